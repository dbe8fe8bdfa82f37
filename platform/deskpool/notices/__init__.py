"""Telling the user of a desktop that their session ends, and ending it: one mechanism.

Whatever ends a user's session on a schedule (an image rollout's forced log-off, a capacity
schedule's ramp-down) warns the user first through :func:`deskpool.notices.service.warn`
("the session of the user of desktop D ends at T because R, with message M") and logs them
off with :func:`deskpool.notices.service.force_logoff`. A warning reaches the user at once in
their live events (``desktop.notice``, which only they and administrators see), and stays in
``GET /api/v1/me/desktops`` (the ``notice`` of the desktop: when and why it ends) until it is
cleared (:func:`deskpool.notices.service.clear`). The console shows it in the desktop view as a
banner with the message and a countdown.

- :mod:`~deskpool.notices.model`: the notice (pure).
- :mod:`~deskpool.notices.store`: its SQL.
- :mod:`~deskpool.notices.service`: warn, force a log-off, clear, and the caller's notices.
"""
