"""A connection pool whose every wait on PostgreSQL is bounded, and fails fast once one ran out.

Three bounds, so that a request never hangs on a database that stopped answering (a frozen
server accepts connections and never replies):

- acquiring a connection waits its turn as long as the pool keeps giving connections back, but
  ``DATABASE_ACQUIRE_TIMEOUT`` at most without one given back (a request holding every
  connection, a server with no room to make some), and :data:`LONGEST_TURN` times that in all;
  each try to open a new connection waits :data:`CONNECT_TIMEOUT`;
- the server cancels a statement that runs longer than ``DATABASE_STATEMENT_TIMEOUT``
  (``statement_timeout``, set on every connection);
- the client waits for an answer :data:`CLIENT_MARGIN` longer than that, then gives up
  (``command_timeout``): the server did not even cancel.

A task may give its statements another bound (a worker's job: :func:`statement_bound`).

A connection whose answer did not come in time is closed at once (:class:`BoundedConnection`):
rolling its transaction back or resetting it for the pool would wait on the same silent server
again. And for :data:`PAUSE_AFTER_TIMEOUT` seconds after such a timeout, acquiring fails at once
(:class:`DatabaseNotAnswering`), also for the requests that were waiting for a connection then,
so that they are answered 503 at once instead of each waiting out its own bound on a connection
of the same server.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Generator, Iterator
from contextvars import ContextVar
from typing import Any

import asyncpg

log = logging.getLogger(__name__)

#: How long opening one connection may take, in seconds (each try, see ``connect_patiently``).
CONNECT_TIMEOUT = 1.5
#: How much longer than the statement timeout the client waits for an answer, in seconds.
CLIENT_MARGIN = 0.5
#: Seconds during which acquiring fails at once after an answer did not come in time.
PAUSE_AFTER_TIMEOUT = 2.0
#: The longest wait for a connection, in acquire bounds, however steadily connections come
#: back: a burst (9 a.m., issue 39) queues for its turn instead of being answered 503 while
#: the database answers, but no request waits for ever.
LONGEST_TURN = 6


class DatabaseNotAnswering(asyncpg.InterfaceError):  # type: ignore[misc]
    """The database did not answer in time a moment ago: not asked again yet (an outage)."""


#: The statement bound of the task under way, when it is not the pool's (see
#: :func:`statement_bound`); ``None``: the pool's.
_STATEMENT_BOUND: ContextVar[float | None] = ContextVar("deskpool_statement_bound", default=None)


@contextlib.contextmanager
def statement_bound(seconds: float) -> Iterator[None]:
    """Give the statements of the task under way (and of the tasks it starts) ``seconds``.

    ``DATABASE_STATEMENT_TIMEOUT`` bounds a request's statements; a worker's job may rightly run
    longer ones (``WORKER_STATEMENT_TIMEOUT``). Inside the block, a connection acquired from a
    :class:`BoundedPool` gets that ``statement_timeout`` on the server, and the client waits
    :data:`CLIENT_MARGIN` longer than it for an answer; the connection goes back to the pool
    with the pool's own bound (its reset restores the session's settings).
    """
    token = _STATEMENT_BOUND.set(seconds)
    try:
        yield
    finally:
        _STATEMENT_BOUND.reset(token)


#: The connection every acquire of one task is handed (see :func:`shared_connection`): the
#: task and the connection.
_SHARED: ContextVar[tuple[asyncio.Task[Any] | None, Any] | None] = ContextVar(
    "deskpool_shared_connection", default=None
)


@contextlib.contextmanager
def shared_connection(connection: Any) -> Iterator[None]:
    """Hand ``connection`` to every acquire of a :class:`BoundedPool` by the task under way.

    So that all the work of a request runs in one transaction the caller opened on
    ``connection`` (an idempotent write: its changes, its key and its response commit
    together): the services' own transactions become savepoints of it, and their releases do
    not give the connection back. Tasks the work starts get connections of their own.
    """
    token = _SHARED.set((asyncio.current_task(), connection))
    try:
        yield
    finally:
        _SHARED.reset(token)


def _shared() -> Any | None:
    """The connection shared with the task under way, if any."""
    shared = _SHARED.get()
    if shared is not None and shared[0] is asyncio.current_task():
        return shared[1]
    return None


class SharedAcquire:
    """What :meth:`BoundedPool.acquire` returns in a task given a shared connection."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    async def __aenter__(self) -> Any:
        return self.connection

    async def __aexit__(self, *exc: object) -> None:
        return None

    def __await__(self) -> Generator[Any, None, Any]:
        return self._acquired().__await__()

    async def _acquired(self) -> Any:
        return self.connection


class BoundedConnection(asyncpg.Connection):  # type: ignore[misc]
    """A connection closed at once when an answer does not come within ``command_timeout``.

    Inside :func:`statement_bound`, the client waits that bound (and the margin) instead.
    """

    _pool_of_connection: BoundedPool | None = None
    #: The task's statement bound was given to the server (see :func:`release_reset`).
    _bound_taken: bool = False

    async def _introspect_types(self, typeoids: Any, timeout: Any) -> Any:  # noqa: ASYNC109
        """What the database says of types, asked once for all the pool's connections.

        asyncpg asks on each connection the first time one of its statements uses a type it
        has no codec for (a recursive catalog query, about 5 ms of planning, between two JIT
        settings): at 9 a.m. about 60 times in a storm as the pools open their connections
        (issue 39). The pool keeps the answers; asyncpg's own invalidation (a row that no
        longer matches a type, :meth:`_drop_local_type_cache`) forgets them.
        """
        pool = self._pool_of_connection
        if pool is None:
            return await super()._introspect_types(typeoids, timeout)
        asked = frozenset(typeoids)
        known = pool.known_types.get(asked)
        if known is None:
            known = await super()._introspect_types(typeoids, timeout)
            pool.known_types[asked] = known
        return known

    def _drop_local_type_cache(self) -> None:
        pool = self._pool_of_connection
        if pool is not None:
            pool.known_types.clear()
        super()._drop_local_type_cache()

    def _timed_out(self) -> None:
        if not self.is_closed():
            self.terminate()
        pool = self._pool_of_connection
        if pool is not None:
            pool.answer_timed_out()

    async def _answered(
        self, call: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any
    ) -> Any:
        """``call(*args, **kwargs)`` within the task's bound; the connection closed on a timeout."""
        bound = _STATEMENT_BOUND.get()
        if bound is not None and kwargs.get("timeout") is None:
            kwargs["timeout"] = bound + CLIENT_MARGIN
        try:
            return await call(*args, **kwargs)
        except TimeoutError:
            self._timed_out()
            raise

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`asyncpg.Connection.execute`, bounded (see the class)."""
        return await self._answered(super().execute, *args, **kwargs)

    async def executemany(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`asyncpg.Connection.executemany`, bounded (see the class)."""
        return await self._answered(super().executemany, *args, **kwargs)

    async def fetch(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`asyncpg.Connection.fetch`, bounded (see the class)."""
        return await self._answered(super().fetch, *args, **kwargs)

    async def fetchval(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`asyncpg.Connection.fetchval`, bounded (see the class)."""
        return await self._answered(super().fetchval, *args, **kwargs)

    async def fetchrow(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`asyncpg.Connection.fetchrow`, bounded (see the class)."""
        return await self._answered(super().fetchrow, *args, **kwargs)

    async def fetchmany(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`asyncpg.Connection.fetchmany`, bounded (see the class)."""
        return await self._answered(super().fetchmany, *args, **kwargs)

    async def take_task_bound(self) -> None:
        """Give the server the task's statement bound, if it has one (:func:`statement_bound`)."""
        bound = _STATEMENT_BOUND.get()
        if bound is not None:
            await self.execute(
                "SELECT set_config('statement_timeout', $1, false)", str(int(bound * 1000))
            )
            self._bound_taken = True


async def release_reset(connection: asyncpg.Connection) -> None:
    """What a connection given back to a pool undoes: what the platform may leave behind.

    asyncpg rolls back a transaction left open before this runs (and forgets the connection's
    listeners); the platform leaves nothing else on a pooled connection: locks are transaction
    locks, or session ones given back in a ``finally``; no cursor outlives its transaction;
    nobody ``LISTEN``s on a pooled connection (the worker's notifications have a connection of
    their own); no setting is changed for the session but a task's statement bound
    (:func:`statement_bound`), given back here. So no ``RESET ALL; UNLISTEN *; CLOSE ALL;
    pg_advisory_unlock_all()`` round trip on every release (issue 39).
    """
    if getattr(connection, "_bound_taken", False):
        await connection.execute("RESET statement_timeout")
        connection._bound_taken = False


class Turns:
    """Turns at a pool's ``size`` connections, first come, first served.

    asyncpg's pool waits in an :class:`asyncio.Queue`, which lets a caller that runs between a
    connection's return and the woken waiter's resumption take the connection; the waiter
    then queues again at the back, and under a burst may lose its turn again and again (a
    cold ``GET /me`` p99 of 0.4 s against 0.08 s on uvloop, which runs new requests earlier).
    Here a turn given back goes straight to the longest waiter, and a newcomer waits behind
    every waiter.
    """

    def __init__(self, size: int) -> None:
        self.free = size
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def take_at_once(self) -> bool:
        """Take a turn if one is free and nobody waits for one."""
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return True
        return False

    async def take(self) -> None:
        """A turn, after every caller that waited before this one."""
        if self.take_at_once():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.give_back()  # given a turn just as the wait ended: the next one's
            else:
                self._waiters.remove(waiter)
            raise

    def give_back(self) -> None:
        """Give a turn back: to the longest waiter, if any."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1


class BoundedPool(asyncpg.Pool):  # type: ignore[misc]
    """A pool whose ``acquire()`` waits ``acquire_timeout`` at most with no connection given back.

    A caller waits its turn (first come, first served) as long as connections come back, and
    :data:`LONGEST_TURN` acquire bounds at most: under a burst the database answers, only
    later. After an answer timed out, acquiring fails fast for a moment (see the module).
    """

    def __init__(self, *args: Any, acquire_timeout: float, **kwargs: Any) -> None:
        self.acquire_timeout = acquire_timeout
        self._failed_until = 0.0
        #: Connections given back so far: a waiting caller's evidence that the queue moves.
        self.given_back = 0
        init = kwargs.pop("init", None)

        async def adopt(connection: asyncpg.Connection) -> None:
            if isinstance(connection, BoundedConnection):
                connection._pool_of_connection = self
            if init is not None:
                await init(connection)

        super().__init__(*args, init=adopt, connection_class=BoundedConnection, **kwargs)
        self.turns = Turns(self._maxsize)
        #: What the database said of types, by the type ids asked about (see
        #: :meth:`BoundedConnection._introspect_types`).
        self.known_types: dict[frozenset[int], Any] = {}
        #: The connections handed out, each holding a turn until it is given back.
        self._turns_held: set[Any] = set()

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

    def acquire(self, *, timeout: float | None = None) -> BoundedAcquire | SharedAcquire:
        """A connection, waiting ``timeout`` (default ``acquire_timeout``) at most.

        In a task given a shared connection (:func:`shared_connection`), that connection.

        :raises DatabaseNotAnswering: an answer timed out a moment ago (also when that
            happened while this call waited for a connection).
        """
        shared = _shared()
        if shared is not None:
            return SharedAcquire(shared)
        bound = self.acquire_timeout if timeout is None else timeout
        return BoundedAcquire(self, bound)

    async def in_turn(self, bound: float) -> Any:
        """A connection when the caller's turn comes (see the class and :class:`Turns`).

        :raises TimeoutError: no connection came back for ``bound`` seconds, an answer timed
            out meanwhile, or the turn did not come within :data:`LONGEST_TURN` bounds.
        """
        if not self._queue.empty() and self.turns.take_at_once():
            # A connection is free and nobody waits: no turn to wait for, so no timer to
            # bound the wait (every request takes one or more). Opening it again, if it was
            # closed while idle, has bounds of its own (CONNECT_TIMEOUT each try).
            return await self._handed_out()
        loop = asyncio.get_running_loop()
        latest = loop.time() + bound * LONGEST_TURN
        given_back = self.given_back
        look: asyncio.TimerHandle | None = None

        def moving_on(turn: asyncio.Timeout) -> None:
            # The wait goes on while connections came back since the last look, else it ends.
            nonlocal given_back, look
            now = loop.time()
            if self.given_back == given_back or self.failed_recently() or now >= latest:
                turn.reschedule(now)
                return
            given_back = self.given_back
            look = loop.call_at(min(now + bound, latest), moving_on, turn)

        # A timeout pushed on while the queue moves bounds the wait for a turn and for the
        # connection it gives (asyncpg's own queue, where a connection closed underneath
        # comes back a moment after its turn did).
        async with asyncio.timeout(None) as turn:
            look = loop.call_later(bound, moving_on, turn)
            try:
                await self.turns.take()
                return await self._handed_out()
            finally:
                if look is not None:
                    look.cancel()

    async def _handed_out(self) -> Any:
        """asyncpg's connection for a turn taken; the turn given back if none comes.

        asyncpg's own wait is unbounded: the caller's (:meth:`in_turn`) bounds it.
        """
        try:
            connection = await super().acquire(timeout=None)
        except BaseException:
            self.turns.give_back()
            raise
        self._turns_held.add(connection)
        return connection

    async def release(self, connection: Any, *, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Give ``connection`` back, unless it is the task's shared connection."""
        if connection is not _shared():
            self.given_back += 1
            try:
                if not self._given_back_at_once(connection):
                    await super().release(connection, timeout=timeout)
            finally:
                # Its turn ends with it, whatever became of the connection (closed
                # underneath, given back twice: one turn).
                if connection in self._turns_held:
                    self._turns_held.discard(connection)
                    self.turns.give_back()

    def _given_back_at_once(self, proxy: Any) -> bool:
        """Give back a connection that has nothing to undo, as asyncpg would, without a task.

        asyncpg shields every release in a task of its own, for the round trips a reset may
        take; a connection outside a transaction, with no statement bound of a task and no
        cancellation under way, needs none (see :func:`release_reset`). ``False``: asyncpg's
        own release is needed (it also refuses a connection not of this pool). Written
        against asyncpg's pool (0.29 to 0.32); ``tests/integration/test_pool_release.py``
        checks it gives back a usable connection.
        """
        holder = getattr(proxy, "_holder", None)
        connection = getattr(proxy, "_con", None)
        if (
            type(proxy) is not asyncpg.pool.PoolConnectionProxy
            or holder is None
            or connection is None
            or holder._pool is not self
            or holder._generation != self._generation
            or connection.is_closed()
            or connection.is_in_transaction()
            or connection._top_xact is not None
            or getattr(connection, "_bound_taken", False)
            or connection._protocol._is_cancelling()
            or connection._protocol.queries_count >= holder._max_queries
        ):
            return False
        connection._on_release()
        connection._listeners.clear()
        connection._log_listeners.clear()
        holder._timeout = None
        holder._release()
        holder._setup_inactive_callback()
        return True


class BoundedAcquire:
    """What :meth:`BoundedPool.acquire` returns: awaited, or used as ``async with``."""

    def __init__(self, pool: BoundedPool, bound: float) -> None:
        self.pool = pool
        self.bound = bound
        self.connection: Any = None

    def _refuse(self) -> DatabaseNotAnswering:
        return DatabaseNotAnswering(
            "the database did not answer in time a moment ago; not asked again yet"
        )

    async def __aenter__(self) -> Any:
        self.connection = await self._acquired()
        return self.connection

    async def __aexit__(self, *exc: object) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            await self.pool.release(connection)

    def __await__(self) -> Generator[Any, None, Any]:
        return self._acquired().__await__()

    async def _acquired(self) -> Any:
        if self.pool.failed_recently():
            raise self._refuse()
        connection = await self.pool.in_turn(self.bound)
        if self.pool.failed_recently():
            await self.pool.release(connection)
            raise self._refuse()
        try:
            await connection.take_task_bound()
        except BaseException:
            await self.pool.release(connection)
            raise
        return connection
