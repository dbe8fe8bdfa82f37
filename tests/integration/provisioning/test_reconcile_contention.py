"""A deadlock met while applying a pool's plan is retried, not reported as the pool's failure.

PostgreSQL ends one transaction of a deadlock (or a serialization failure) and rolls it back
whole; the same work run again normally succeeds (issue 33 §5: "retried a bounded number of
times"). Applying one pool's plan is one transaction, so a pass that meets one runs it again a
few times before it records a ``reconcile_error``.

The deadlock here is a real one, made certain: inside the apply's transaction (where it reads the
pool again under the pool's lock) the apply holds one advisory lock and waits for a second that
another transaction of the test holds while it waits for the first. The apply's
``deadlock_timeout`` is short, the other's long, so PostgreSQL always ends the apply's.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest
from asyncpg.transaction import Transaction
from tests.support.provisioning import POLICY, MakePool, desktops, no_fence

from deskpool.outages import CONTENTION_ATTEMPTS
from deskpool.reconciliation import applying
from deskpool.reconciliation.failures import PoolReconcileFailed
from deskpool.reconciliation.reconciler import PoolReconcilerService
from deskpool.runtime import Runtime
from deskpool.testing.processes import until

FIRST_LOCK, SECOND_LOCK = 0x64656164, 0x6C6F636B

Deadlocks = Callable[[int], Awaitable[list[str]]]


class Deadlocker:
    """Makes a transaction the loser of a real deadlock with a transaction of its own.

    The other side of each deadlock is ended once the loser's transaction has rolled back:
    before the next deadlock, or by :meth:`close`.
    """

    def __init__(self, other: asyncpg.Connection, watcher: asyncpg.Connection) -> None:
        self.other = other
        self.watcher = watcher
        self.pending: list[tuple[Transaction, asyncio.Task[Any]]] = []

    async def end_others(self) -> None:
        """End the other sides of the deadlocks so far (their losers have rolled back)."""
        while self.pending:
            held, waiting = self.pending.pop()
            await waiting
            await held.rollback()

    async def deadlock(self, victim: asyncpg.Connection) -> None:
        """Make ``victim`` (in its transaction) lose a real deadlock.

        :raises asyncpg.DeadlockDetectedError: always (from ``victim``'s statement).
        """
        await self.end_others()
        held = self.other.transaction()
        await held.start()
        await self.other.execute("SET LOCAL deadlock_timeout = '200s'")
        await self.other.execute("SELECT pg_advisory_xact_lock($1)", SECOND_LOCK)
        await victim.execute("SET LOCAL deadlock_timeout = '10ms'")
        await victim.execute("SELECT pg_advisory_xact_lock($1)", FIRST_LOCK)
        waiting = asyncio.create_task(
            self.other.execute("SELECT pg_advisory_xact_lock($1)", FIRST_LOCK)
        )
        self.pending.append((held, waiting))

        async def other_waits() -> bool:
            return bool(
                await self.watcher.fetchval(
                    "SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                )
            )

        await until(other_waits, "the other transaction waits for the first lock")
        await victim.execute("SELECT pg_advisory_xact_lock($1)", SECOND_LOCK)
        raise AssertionError("PostgreSQL found no deadlock")


@pytest.fixture
async def deadlocks(
    db: asyncpg.Connection, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Deadlocks]:
    """``seen = await deadlocks(n)``: the next ``n`` applies each lose a deadlock.

    ``seen`` (filled as it happens) names the error each of them met.
    """
    other = await asyncpg.connect(runtime.config["DATABASE_URL"])
    deadlocker = Deadlocker(other, db)
    real = applying.pool_now
    left = 0
    seen: list[str] = []

    async def deadlocking(connection: asyncpg.Connection, pool_id: uuid.UUID) -> Any:
        nonlocal left
        if left > 0:
            left -= 1
            try:
                await deadlocker.deadlock(connection)
            except asyncpg.DeadlockDetectedError as error:
                seen.append(type(error).__name__)
                raise
        return await real(connection, pool_id)

    async def arm(times: int) -> list[str]:
        nonlocal left
        left = times
        return seen

    monkeypatch.setattr(applying, "pool_now", deadlocking)
    try:
        yield arm
    finally:
        await deadlocker.end_others()
        await other.close()


async def test_a_deadlock_met_while_applying_is_retried_and_the_pool_converges(
    db: asyncpg.Connection, make_pool: MakePool, runtime: Runtime, deadlocks: Deadlocks
) -> None:
    pool = await make_pool(min_size=2, max_size=2)
    seen = await deadlocks(1)

    applied = await PoolReconcilerService(runtime, POLICY).reconcile_now(pool.id, no_fence)

    assert seen == ["DeadlockDetectedError"]
    assert applied is not None
    assert applied.applied == 2
    assert len(await desktops(db, pool)) == 2  # the first try was rolled back whole
    failing = await db.fetchval("SELECT reconcile_error_code FROM pools WHERE id = $1", pool.id)
    assert failing is None


async def test_a_pool_that_deadlocks_at_every_try_fails_alone_after_a_bounded_number(
    db: asyncpg.Connection, make_pool: MakePool, runtime: Runtime, deadlocks: Deadlocks
) -> None:
    pool = await make_pool(min_size=2, max_size=2)
    seen = await deadlocks(CONTENTION_ATTEMPTS + 5)

    with pytest.raises(PoolReconcileFailed) as failed:
        await PoolReconcilerService(runtime, POLICY).reconcile_now(pool.id, no_fence)

    assert seen == ["DeadlockDetectedError"] * CONTENTION_ATTEMPTS
    assert "DeadlockDetectedError" in str(failed.value)
    assert await desktops(db, pool) == []
    failing = await db.fetchval("SELECT reconcile_error_code FROM pools WHERE id = $1", pool.id)
    assert failing == "apply_failed"
