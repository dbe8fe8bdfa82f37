"""Live events: state changes streamed to the console and REST clients (``GET /api/v1/events``).

Whoever changes a desktop, a pool, a job or a session publishes a :class:`LiveEvent` after the
change is committed (:mod:`deskpool.live.bus`); the events go through one Redis stream, so an
api process streams what any process published, and a client that reconnects with
``Last-Event-ID`` resumes where it stopped. Who sees which event is decided in
:mod:`deskpool.live.model`, without I/O.

Live events are a notification, not a record: the audit log is the record. An event lost to a
Redis outage only delays a screen's refresh; a publisher never fails its change because of one.
"""
