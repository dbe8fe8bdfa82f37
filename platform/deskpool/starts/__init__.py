"""Start on connect: a user who opens a desktop when none is ready gets one powered on for him.

A pool whose schedule powered its idle desktops off (:mod:`deskpool.schedules`), or a persistent
pool whose owner's desktop rests powered off, answers the user's open with a *pending
connection* instead of a 503: in one transaction a powered-off desktop is reserved to the user
(``assigned_user``, the ``PowerUp(user)`` transition), its power-on job is enqueued and a start
row names the logon that waits for it. The worker that brings the desktop to ``ready`` hands it
to the user (``in_use``) and records the logon's ``powered_on`` phase; the user's live events
carry each state change, and the console connects by itself once the desktop is in use.

- :mod:`~deskpool.starts.model`: which desktop is started for a user (pure).
- :mod:`~deskpool.starts.store`: the SQL of ``desktop_starts``.

The use cases are where their callers are: starting for a user in the session's open
(:mod:`deskpool.sessions.service`), cancelling a start in a log-off or a revocation
(:mod:`deskpool.sessions.start_cancel`), handing over when ready and ending failed or abandoned
starts on the worker's side (:mod:`deskpool.provisioning.starts`). This package is the model and
the store they share, below sessions in the layer order (``tests/unit/test_layers.py``).
"""
