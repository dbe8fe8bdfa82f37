"""Event subscriptions (webhooks): audit events pushed to other systems.

A subscription names a URL and the event types it wants (:mod:`deskpool.events`: named types
such as ``session.started``, audit events by kind as ``audit.<action>``, prefix wildcards). Each
event it selects is written to the outbox (``webhook_deliveries``) in the transaction that
records the event (:func:`deskpool.audit.record_audit_event`); the worker sends the deliveries
of each subscription in order, signed after the Standard Webhooks specification, with retries
and backoff (:mod:`deskpool.webhooks.sender`). See docs/operators/webhooks.md.
"""
