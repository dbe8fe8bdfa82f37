"""Idempotency keys: a retried change is answered what it answered, and applied once.

A client that sends a write (``POST``, ``PUT``, ``PATCH``, ``DELETE``) with an
``Idempotency-Key`` header gets it run in one transaction with the key and its response
(:mod:`deskpool.api.idempotency`); the same key sent again by the same caller for the same
request is answered the stored response, for :data:`~deskpool.idempotency.model.KEY_LIFETIME`.
"""
