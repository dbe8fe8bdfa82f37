"""Messages from administrators to desktop users: to one session, to a user, to a pool.

An administrator (``sessions:manage``) sends a message (info, warning or urgent, up to 2,000
characters, valid for a time) to one session, to every session of a user, or to every session
of a pool. It reaches the desktop views open at that moment at once (a live ``message.sent``
event to each recipient), and is kept: a user who connects within its validity sees it too
(``GET /api/v1/me/messages``), until he dismisses it or it expires.

- :mod:`~deskpool.messages.model`: the message and its rules (pure).
- :mod:`~deskpool.messages.store`: its SQL.
- :mod:`~deskpool.messages.service`: send, list, the caller's messages, dismiss.
"""
