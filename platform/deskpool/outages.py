"""Which exceptions mean that a store was lost or did not answer: an outage, not a bug.

A request in flight when PostgreSQL restarts, when an operator terminates its connection
(``pg_terminate_backend``), when the pool cannot open a connection in time, or when Redis
goes away, fails with one of the exceptions :func:`outage_of` recognises. The API answers those
503 with ``Retry-After`` (the request may be sent again as it was), never 500; anything else
that escapes a handler is a bug.
"""

from __future__ import annotations

import socket

import asyncpg
from asyncpg import exceptions as pg
from redis import exceptions as kv

#: What a client is told to wait before retrying a request an outage interrupted, in seconds.
RETRY_AFTER_SECONDS = 2

DATABASE = "database"
KVSTORE = "key-value store"
NETWORK = "a dependency"

_DATABASE_ERRORS: tuple[type[BaseException], ...] = (
    # SQLSTATE class 08: the connection failed or does not exist.
    pg.PostgresConnectionError,
    # Class 57: admin shutdown (pg_terminate_backend), crash, cannot connect now, cancelled.
    pg.OperatorInterventionError,
    # Class 53: too many connections, out of memory or disk.
    pg.InsufficientResourcesError,
    # Client side: a connection closed under a call, the pool closing; and the protocol
    # state a server-side termination can leave behind ("cannot switch to state 12").
    asyncpg.InterfaceError,
    pg.InternalClientError,
)
_KVSTORE_ERRORS: tuple[type[BaseException], ...] = (kv.ConnectionError, kv.TimeoutError)
_NETWORK_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, socket.gaierror)


def outage_of(error: BaseException) -> str | None:
    """The store that ``error`` says is unavailable, or ``None`` when it is not an outage.

    Looks through explicit causes (``raise ... from``) and exception groups.
    """
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, pg.ClientConfigurationError):
            return None  # a setting is wrong: no retry helps
        if isinstance(current, _DATABASE_ERRORS):
            return DATABASE
        if isinstance(current, _KVSTORE_ERRORS):
            return KVSTORE
        if isinstance(current, _NETWORK_ERRORS):
            return NETWORK
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        if current.__cause__ is not None:
            pending.append(current.__cause__)
    return None
