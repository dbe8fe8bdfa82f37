"""Periodic task claims: once per interval, never two runs at once, fenced leases."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from deskpool.jobs import PeriodicContext
from deskpool.jobs import periodic as runs
from deskpool.reconciliation.periodic import (
    POOL_RECONCILE_TASK,
    pool_reconcile_task,
    reconcile_batch,
)
from deskpool.runtime import Runtime

INTERVAL = timedelta(minutes=1)
LEASE = timedelta(seconds=30)


async def claim(db: asyncpg.Connection, worker: str = "w1") -> runs.ClaimedRun | None:
    return await runs.claim_run(db, "task", worker=worker, interval=INTERVAL, lease=LEASE)


async def test_a_run_is_claimed_once_per_interval(db: asyncpg.Connection) -> None:
    await runs.register_tasks(db, ["task"])
    first = await claim(db)
    assert first is not None
    assert await claim(db, "w2") is None
    assert await runs.finish_run(db, "task", first.fence, outcome="succeeded")
    assert await claim(db, "w2") is None  # finished, but the interval has not passed
    assert await runs.seconds_until_due(db, "task", INTERVAL) == pytest.approx(60, abs=5)
    await db.execute("UPDATE periodic_tasks SET last_started_at = now() - interval '61 seconds'")
    second = await claim(db, "w2")
    assert second is not None
    assert second.fence == first.fence + 1


async def test_a_run_in_progress_blocks_the_next_until_its_lease_expires(
    db: asyncpg.Connection,
) -> None:
    await runs.register_tasks(db, ["task"])
    first = await claim(db)
    assert first is not None
    await db.execute("UPDATE periodic_tasks SET last_started_at = now() - interval '10 minutes'")
    assert await claim(db, "w2") is None  # due, but the first run still holds the lease
    assert await runs.extend_run(db, "task", first.fence, LEASE)
    await db.execute("UPDATE periodic_tasks SET lease_expires_at = now() - interval '1 second'")
    taken_over = await claim(db, "w2")
    assert taken_over is not None
    # The first run's worker comes back: its lease is gone, its end is not recorded.
    assert not await runs.extend_run(db, "task", first.fence, LEASE)
    assert not await runs.finish_run(db, "task", first.fence, outcome="succeeded")
    assert await runs.finish_run(db, "task", taken_over.fence, outcome="failed", error="boom")
    row = await db.fetchrow("SELECT * FROM periodic_tasks WHERE name = 'task'")
    assert (row["last_outcome"], row["last_error"], row["worker"]) == ("failed", "boom", "w2")
    assert row["runs"] == 2


class Pools:
    """A reconciler over an in-memory list of pools, one of which fails."""

    def __init__(self, pool_ids: list[str], failing: str) -> None:
        self.pool_ids = pool_ids
        self.failing = failing
        self.reconciled: list[str] = []
        self.limits: list[int] = []

    async def pools_to_reconcile(self, connection: asyncpg.Connection, limit: int) -> list[str]:
        self.limits.append(limit)
        return self.pool_ids[:limit]

    async def reconcile_pool(self, pool_id: str, context: PeriodicContext) -> None:
        if pool_id == self.failing:
            raise RuntimeError("the cluster does not answer")
        self.reconciled.append(pool_id)
        self.pool_ids.remove(pool_id)
        self.pool_ids.append(pool_id)  # now the most recently reconciled


async def test_pool_reconciliation_takes_a_batch_oldest_first_and_survives_a_failure(
    make_config: Any,
) -> None:
    process = make_config(["worker"], POOL_RECONCILE_BATCH_SIZE="3", POOL_RECONCILE_INTERVAL="7s")
    runtime = Runtime(process.config, process.plugins)
    await runtime.open()
    try:
        pools = Pools(["a", "b", "c", "d", "e"], failing="b")
        task = pool_reconcile_task(lambda _runtime: pools)
        assert task.interval(runtime.config) == timedelta(seconds=7)
        context = PeriodicContext(
            POOL_RECONCILE_TASK,
            runtime,
            fence=1,
            started_at=await runtime.db.fetchval("SELECT now()"),
            interval=timedelta(seconds=7),
            lease_duration=LEASE,
        )
        batch = await reconcile_batch(pools, context)
        assert pools.limits == [3]
        assert batch.reconciled == ("a", "c")
        assert batch.failed == ("b",)
        await task.run(context)
        assert pools.reconciled == ["a", "c", "d", "e"]
    finally:
        await runtime.close()
