"""Which exceptions mean that a store was lost or did not answer: an outage, not a bug.

A request in flight when PostgreSQL restarts, when an operator terminates its connection
(``pg_terminate_backend``), when the pool cannot open a connection in time, or when Redis
goes away, fails with one of the exceptions :func:`outage_of` recognises. The API answers those
503 with ``Retry-After`` (the request may be sent again as it was), never 500; anything else
that escapes a handler is a bug.
"""

from __future__ import annotations

import logging
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


class OutageWithoutTraceback(logging.Filter):
    """A library's record of an outage is one line: no traceback, the error's type and text.

    asyncpg's pool logs a warning with the traceback each time it fails to reopen its floor of
    connections while the database is away (``Failed to restore the pool connection floor``).
    An outage is not a bug: the record keeps its level and message, the exception becomes
    ``(ConnectionRefusedError: ...)`` at the end of the message. Other exceptions pass as
    they are.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Fold an outage's exception into the message (always keeps the record)."""
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and outage_of(error) is not None:
            record.msg = f"{record.getMessage()} ({type(error).__name__}: {error})"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


#: The loggers of libraries that log an outage with its traceback.
LIBRARY_LOGGERS = ("asyncpg.pool",)
