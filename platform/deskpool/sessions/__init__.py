"""Desktop sessions: connection tokens, session records and the gateway's view of them.

:mod:`deskpool.sessions.tunnel` is the seam between the platform and the ``gateway`` component:
the gateway redeems a connection token, reports the session's life and bytes, and learns which
sessions it must close, all through a :class:`~deskpool.sessions.tunnel.SessionBroker`.
"""
