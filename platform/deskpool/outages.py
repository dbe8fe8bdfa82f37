"""Which exceptions mean that a store was lost or did not answer: an outage, not a bug.

A request in flight when PostgreSQL restarts, when an operator terminates its connection
(``pg_terminate_backend``), when the pool cannot open a connection in time, or when Redis
goes away, fails with one of the exceptions :func:`outage_of` recognises. The API answers those
503 with ``Retry-After`` (the request may be sent again as it was), never 500; anything else
that escapes a handler is a bug.

A transaction PostgreSQL ends to break a deadlock or a serialization failure is neither: the
transaction was rolled back whole, and the same work run again normally succeeds.
:func:`contended` recognises those; the API runs such an operation again a bounded number of
times (:data:`CONTENTION_ATTEMPTS`), then answers 503 with ``Retry-After``.
"""

from __future__ import annotations

import logging
import random
import socket

import asyncpg
from asyncpg import exceptions as pg
from redis import exceptions as kv

#: What a client is told to wait before retrying a request an outage interrupted, in seconds.
RETRY_AFTER_SECONDS = 2

DATABASE = "database"
KVSTORE = "key-value store"
NETWORK = "network service"

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
_CONTENTION_ERRORS: tuple[type[BaseException], ...] = (
    # SQLSTATE 40P01 and 40001: the server rolled the transaction back; run it again.
    pg.DeadlockDetectedError,
    pg.SerializationError,
)
_NETWORK_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, socket.gaierror)


#: How many times an operation is run when PostgreSQL ends its transaction for contention.
CONTENTION_ATTEMPTS = 4


def contention_pause(attempt: int) -> float:
    """Seconds to wait before running an operation contention ended for the ``attempt``-th time.

    Short and random (10 to 50 ms times the attempt), so that the transactions that met stop
    meeting in the same order.
    """
    return random.uniform(0.01, 0.05) * attempt


def _chain(error: BaseException) -> list[BaseException]:
    """``error``, its explicit causes and the members of exception groups, each once."""
    seen: set[int] = set()
    found: list[BaseException] = []
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        found.append(current)
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        if current.__cause__ is not None:
            pending.append(current.__cause__)
    return found


def contended(error: BaseException) -> bool:
    """Whether PostgreSQL ended the transaction of ``error`` for a deadlock or serialization."""
    return any(isinstance(current, _CONTENTION_ERRORS) for current in _chain(error))


def _library_of(error: BaseException) -> str | None:
    """The store whose client code ``error`` went through (its traceback), if any.

    A timeout is a plain :class:`TimeoutError` whoever raised it (asyncpg's ``command_timeout``
    and pool ``acquire`` timeout among them): where it came from says which store did not answer.
    """
    traceback = error.__traceback__
    found = None
    while traceback is not None:
        module = str(traceback.tb_frame.f_globals.get("__name__", ""))
        if module == "asyncpg" or module.startswith("asyncpg."):
            found = DATABASE
        elif module == "redis" or module.startswith("redis."):
            found = KVSTORE
        traceback = traceback.tb_next
    return found


def outage_of(error: BaseException) -> str | None:
    """The store that ``error`` says is unavailable, or ``None`` when it is not an outage.

    Looks through explicit causes (``raise ... from``) and exception groups.
    """
    for current in _chain(error):
        if isinstance(current, pg.ClientConfigurationError):
            return None  # a setting is wrong: no retry helps
    network = False
    for current in _chain(error):
        if isinstance(current, _DATABASE_ERRORS):
            return DATABASE
        if isinstance(current, _KVSTORE_ERRORS):
            return KVSTORE
        if isinstance(current, _NETWORK_ERRORS):
            library = _library_of(current)
            if library is not None:
                return library
            network = True
    return NETWORK if network else None


def unavailable_detail(dependency: str) -> str:
    """What a client is told of an outage of ``dependency`` (one of the names above)."""
    if dependency == NETWORK:
        return "A service this request needs was unavailable; retry it."
    return f"The {dependency} is unavailable; retry it."


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
