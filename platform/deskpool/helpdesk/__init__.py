"""The help desk: one user, looked up by name, email or subject, and everything about him.

"I can't get my desktop" is answered from one place: his live and recent sessions with their
logon phases and end reasons, his failed logons and why, the desktops he holds, and for every
pool whether he can open it now and why (the entitlement path: directly, through which group
by membership or by a claim binding; or what is missing: no entitlement, his account disabled,
the pool disabled or draining, no desktop to give, the license's session limit). The actions
(message, disconnect, log off, restart or reset, shadow) are the platform's own operations,
each under its own permission; the console's help desk page calls them.

- :mod:`~deskpool.helpdesk.model`: judging a pool for a user (pure).
- :mod:`~deskpool.helpdesk.store`: the user search and the pools' entitlement paths (SQL).
- :mod:`~deskpool.helpdesk.service`: the user's page.
"""
