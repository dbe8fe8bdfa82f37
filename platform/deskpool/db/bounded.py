"""A connection pool whose every wait on PostgreSQL is bounded, and fails fast once one ran out.

Three bounds, so that a request never hangs on a database that stopped answering (a frozen
server accepts connections and never replies):

- acquiring a connection waits ``DATABASE_ACQUIRE_TIMEOUT`` at most (for a busy pool to give
  one back, or for a server with no room to make some), and each try to open a new connection
  :data:`CONNECT_TIMEOUT`;
- the server cancels a statement that runs longer than ``DATABASE_STATEMENT_TIMEOUT``
  (``statement_timeout``, set on every connection);
- the client waits for an answer :data:`CLIENT_MARGIN` longer than that, then gives up
  (``command_timeout``): the server did not even cancel.

A connection whose answer did not come in time is closed at once (:class:`BoundedConnection`):
rolling its transaction back or resetting it for the pool would wait on the same silent server
again. And for :data:`PAUSE_AFTER_TIMEOUT` seconds after such a timeout, acquiring fails at once
(:class:`DatabaseNotAnswering`), also for the requests that were waiting for a connection then,
so that they are answered 503 at once instead of each waiting out its own bound on a connection
of the same server.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator
from typing import Any

import asyncpg
from asyncpg.pool import PoolAcquireContext

log = logging.getLogger(__name__)

#: How long opening one connection may take, in seconds (each try, see ``connect_patiently``).
CONNECT_TIMEOUT = 1.5
#: How much longer than the statement timeout the client waits for an answer, in seconds.
CLIENT_MARGIN = 0.5
#: Seconds during which acquiring fails at once after an answer did not come in time.
PAUSE_AFTER_TIMEOUT = 2.0


class DatabaseNotAnswering(asyncpg.InterfaceError):  # type: ignore[misc]
    """The database did not answer in time a moment ago: not asked again yet (an outage)."""


class BoundedConnection(asyncpg.Connection):  # type: ignore[misc]
    """A connection closed at once when an answer does not come within ``command_timeout``."""

    _pool_of_connection: BoundedPool | None = None

    def _timed_out(self) -> None:
        if not self.is_closed():
            self.terminate()
        pool = self._pool_of_connection
        if pool is not None:
            pool.answer_timed_out()

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`asyncpg.Connection.execute`, the connection closed if it timed out."""
        try:
            return await super().execute(*args, **kwargs)
        except TimeoutError:
            self._timed_out()
            raise

    async def executemany(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`asyncpg.Connection.executemany`, the connection closed if it timed out."""
        try:
            return await super().executemany(*args, **kwargs)
        except TimeoutError:
            self._timed_out()
            raise

    async def fetch(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`asyncpg.Connection.fetch`, the connection closed if it timed out."""
        try:
            return await super().fetch(*args, **kwargs)
        except TimeoutError:
            self._timed_out()
            raise

    async def fetchval(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`asyncpg.Connection.fetchval`, the connection closed if it timed out."""
        try:
            return await super().fetchval(*args, **kwargs)
        except TimeoutError:
            self._timed_out()
            raise

    async def fetchrow(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`asyncpg.Connection.fetchrow`, the connection closed if it timed out."""
        try:
            return await super().fetchrow(*args, **kwargs)
        except TimeoutError:
            self._timed_out()
            raise

    async def fetchmany(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`asyncpg.Connection.fetchmany`, the connection closed if it timed out."""
        try:
            return await super().fetchmany(*args, **kwargs)
        except TimeoutError:
            self._timed_out()
            raise


class BoundedPool(asyncpg.Pool):  # type: ignore[misc]
    """A pool whose ``acquire()`` waits ``acquire_timeout`` at most.

    After an answer timed out, acquiring fails fast for a moment (see the module).
    """

    def __init__(self, *args: Any, acquire_timeout: float, **kwargs: Any) -> None:
        self.acquire_timeout = acquire_timeout
        self._failed_until = 0.0
        init = kwargs.pop("init", None)

        async def adopt(connection: asyncpg.Connection) -> None:
            if isinstance(connection, BoundedConnection):
                connection._pool_of_connection = self
            if init is not None:
                await init(connection)

        super().__init__(*args, init=adopt, connection_class=BoundedConnection, **kwargs)

    def answer_timed_out(self) -> None:
        """A connection's answer did not come in time: fail acquiring for a moment.

        A timeout met while the pause runs (a statement sent before it began) does not
        lengthen it: a busy API would otherwise keep it going long after the database is back.
        """
        if self.failed_recently():
            return
        log.warning(
            "the database did not answer in time; acquiring fails at once for %.0f s",
            PAUSE_AFTER_TIMEOUT,
        )
        self._failed_until = time.monotonic() + PAUSE_AFTER_TIMEOUT

    def failed_recently(self) -> bool:
        """Whether an answer timed out less than :data:`PAUSE_AFTER_TIMEOUT` seconds ago."""
        return time.monotonic() < self._failed_until

    def acquire(self, *, timeout: float | None = None) -> BoundedAcquire:
        """A connection, waiting ``timeout`` (default ``acquire_timeout``) at most.

        :raises DatabaseNotAnswering: an answer timed out a moment ago (also when that
            happened while this call waited for a connection).
        """
        bound = self.acquire_timeout if timeout is None else timeout
        return BoundedAcquire(self, super().acquire(timeout=bound))


class BoundedAcquire:
    """What :meth:`BoundedPool.acquire` returns: awaited, or used as ``async with``."""

    def __init__(self, pool: BoundedPool, acquiring: PoolAcquireContext) -> None:
        self.pool = pool
        self.acquiring = acquiring

    def _refuse(self) -> DatabaseNotAnswering:
        return DatabaseNotAnswering(
            "the database did not answer in time a moment ago; not asked again yet"
        )

    async def __aenter__(self) -> Any:
        if self.pool.failed_recently():
            raise self._refuse()
        connection = await self.acquiring.__aenter__()
        if self.pool.failed_recently():
            await self.acquiring.__aexit__(None, None, None)
            raise self._refuse()
        return connection

    async def __aexit__(self, *exc: object) -> None:
        await self.acquiring.__aexit__(*exc)

    def __await__(self) -> Generator[Any, None, Any]:
        return self._acquired().__await__()

    async def _acquired(self) -> Any:
        if self.pool.failed_recently():
            raise self._refuse()
        return await self.acquiring
