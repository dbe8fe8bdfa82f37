"""Every long-lived stream registers here, so that losing access ends it, whatever took it away.

A request answers and is done; a stream (a gateway's tunnel, a live event stream, a recording
download) goes on long after the permission check that let it start. Each one registers with
its process's :class:`AccessWatch` for as long as it runs, saying what its user must keep for it
to go on (a :data:`Keeps` rule over the user's :class:`~deskpool.revocation.model.Holding`):

    with access_watch(runtime).watching(user_id, "recording_download", keeps) as watch:
        finished = await until_lost(watch, send_the_bytes())

The watch reads what every registered user holds now from the database (one connection, the
same rules as the revocation of a change: :func:`deskpool.revocation.service.holdings`) every
:data:`CHECK_INTERVAL` seconds, on a timer of its own that never waits on Redis, and at once
when :meth:`AccessWatch.nudge` is called (a change of access heard of). A stream whose user no
longer keeps what it needs is told (:attr:`Watch.lost`), and :func:`until_lost` ends its work.
It does not matter which service took the access away, or whether it called
:func:`~deskpool.revocation.service.revoke_lost_access`: what the user holds is judged again.

While the database does not answer, streams go on (a warning is logged; nothing can be judged),
and are judged at the first read that succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
import weakref
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import asyncpg

from deskpool.revocation.model import Holding
from deskpool.revocation.service import holdings
from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: Seconds between two readings of what the watched users hold.
CHECK_INTERVAL = 2.0

#: What a user must keep for a stream to go on.
Keeps = Callable[[Holding], bool]

T = TypeVar("T")

_DATABASE_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)


@dataclass(eq=False)
class Watch:
    """One registered stream: whose it is, what it needs, and whether it lost it."""

    user_id: uuid.UUID
    kind: str
    keeps: Keeps
    #: Set once the user no longer keeps what the stream needs.
    lost: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def is_lost(self) -> bool:
        """Whether the stream must end."""
        return self.lost.is_set()


#: Reads what users hold now: ``(connection, user_ids) -> {user_id: Holding}``.
ReadHoldings = Callable[[asyncpg.Connection, list[uuid.UUID]], Awaitable[dict[uuid.UUID, Holding]]]


async def _read_holdings(
    connection: asyncpg.Connection, user_ids: list[uuid.UUID]
) -> dict[uuid.UUID, Holding]:
    return await holdings(connection, user_ids, exclusive=None)


class AccessWatch:
    """The streams of one process, judged again every :data:`CHECK_INTERVAL` seconds.

    :param runtime: the process's runtime (its database pool).
    :param interval: seconds between two readings.
    """

    def __init__(self, runtime: Runtime, *, interval: float = CHECK_INTERVAL) -> None:
        self.runtime = runtime
        self.interval = interval
        self._watches: set[Watch] = set()
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.read_holdings: ReadHoldings = _read_holdings

    @property
    def watched(self) -> int:
        """How many streams are registered."""
        return len(self._watches)

    def register(self, user_id: uuid.UUID, kind: str, keeps: Keeps) -> Watch:
        """Register a stream of ``user_id`` until :meth:`unregister`; see :meth:`watching`."""
        watch = Watch(user_id, kind, keeps)
        self._watches.add(watch)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="access-watch")
        return watch

    def unregister(self, watch: Watch) -> None:
        """The stream ended: stop judging it (the timer stops with the last one)."""
        self._watches.discard(watch)
        if not self._watches and self._task is not None:
            self._task.cancel()
            self._task = None

    @contextlib.contextmanager
    def watching(self, user_id: uuid.UUID, kind: str, keeps: Keeps) -> Iterator[Watch]:
        """Register a stream of ``user_id`` for the block; :attr:`Watch.lost` says when to end.

        :param kind: what the stream is (``tunnel``, ``live_events``, ``recording_download``),
            for the log.
        """
        watch = self.register(user_id, kind, keeps)
        try:
            yield watch
        finally:
            self.unregister(watch)

    def nudge(self) -> None:
        """Judge every stream again now (a change of access was heard of)."""
        self._wake.set()

    async def check(self) -> list[Watch]:
        """Read what the watched users hold and mark the streams they lost; return those.

        :raises asyncpg.PostgresError: (and the other connection errors) the database failed.
        """
        watches = [watch for watch in self._watches if not watch.is_lost]
        users = sorted({watch.user_id for watch in watches})
        if not users:
            return []
        async with self.runtime.db.acquire() as connection:
            held = await self.read_holdings(connection, users)
        lost = []
        for watch in watches:
            holding = held.get(watch.user_id)
            if holding is not None and not watch.keeps(holding):
                log.info("%s of user %s ends: access lost", watch.kind, watch.user_id)
                watch.lost.set()
                lost.append(watch)
        return lost

    async def _run(self) -> None:
        failing = False
        while self._watches:
            self._wake.clear()
            try:
                await self.check()
            except _DATABASE_ERRORS as error:
                if not failing:
                    log.warning(
                        "streams cannot be judged again (%s): the database does not answer",
                        type(error).__name__,
                    )
                failing = True
            else:
                failing = False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self._wake.wait()


_WATCHES: weakref.WeakKeyDictionary[Runtime, AccessWatch] = weakref.WeakKeyDictionary()


def access_watch(runtime: Runtime) -> AccessWatch:
    """The process's :class:`AccessWatch` (one per runtime, made on first use)."""
    watch = _WATCHES.get(runtime)
    if watch is None:
        watch = _WATCHES[runtime] = AccessWatch(runtime)
    return watch


async def until_lost(watch: Watch, work: Awaitable[T]) -> tuple[bool, T | None]:
    """Run ``work`` until it finishes or ``watch`` is lost (then ``work`` is cancelled).

    :returns: ``(True, result)`` when it finished, ``(False, None)`` when access was lost.
    """
    running = asyncio.ensure_future(work)
    losing = asyncio.create_task(watch.lost.wait())
    try:
        await asyncio.wait((running, losing), return_when=asyncio.FIRST_COMPLETED)
    finally:
        losing.cancel()
        if not running.done():
            running.cancel()
        await asyncio.gather(running, losing, return_exceptions=True)
    if running.cancelled():
        return False, None
    return True, running.result()
