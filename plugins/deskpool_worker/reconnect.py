"""Riding out a lost database: which errors mean "try again later", and how long to wait.

The worker never stops because PostgreSQL restarted or dropped its connections: every loop
catches :data:`DATABASE_ERRORS`, waits a :class:`ReconnectBackoff` delay, and tries again on a
fresh connection from the pool (asyncpg replaces closed connections when they are acquired).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg

T = TypeVar("T")

log = logging.getLogger(__name__)

#: The longest wait between two tries of writing a job's outcome: it is written within about
#: this long of the database's return.
OUTCOME_RETRY_LONGEST = 2.0

#: Errors from a database that is unreachable, restarting, or that closed the connection.
DATABASE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
)


class ReconnectBackoff:
    """Delays that double from ``first`` up to ``longest``, with jitter; reset on success."""

    def __init__(self, first: float = 0.2, longest: float = 10.0) -> None:
        self.first = first
        self.longest = longest
        self._next = first

    def next_delay(self) -> float:
        """The delay before the next try (and double the one after)."""
        delay = self._next
        self._next = min(self._next * 2, self.longest)
        return delay * random.uniform(0.75, 1.25)

    def reset(self) -> None:
        """Back to the first delay, after a success."""
        self._next = self.first


async def wait_for_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` pass; return whether it is set."""
    if seconds <= 0:
        return event.is_set()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
    return event.is_set()


async def until_written(write: Callable[[], Awaitable[T]], *, within: float, what: str) -> T:
    """Run the database write ``write`` until it goes through, while the database is away.

    A job's outcome is kept and written as soon as the database is back (tries at most
    :data:`OUTCOME_RETRY_LONGEST` apart), rather than left for its lease to expire. After
    ``within`` seconds (the job's lease: past it another worker reclaims the job, and the
    outcome would be refused) the last error is raised.
    """
    loop = asyncio.get_running_loop()
    give_up = loop.time() + within
    backoff = ReconnectBackoff(longest=OUTCOME_RETRY_LONGEST)
    while True:
        try:
            return await write()
        except DATABASE_ERRORS as error:
            delay = backoff.next_delay()
            if loop.time() + delay > give_up:
                raise
            log.warning("%s failed (%s); trying again in %.1fs", what, error, delay)
            await asyncio.sleep(delay)
