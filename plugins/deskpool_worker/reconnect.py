"""Riding out a lost database: which errors mean "try again later", and how long to wait.

The worker never stops because PostgreSQL restarted or dropped its connections: every loop
catches :data:`DATABASE_ERRORS`, waits a :class:`ReconnectBackoff` delay, and tries again on a
fresh connection from the pool (asyncpg replaces closed connections when they are acquired).
"""

from __future__ import annotations

import asyncio
import contextlib
import random

import asyncpg

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
