"""Concurrent rollout creations on one pool meeting a reconciliation: never a 500.

The attack of issue 33 (finding 6): 8 concurrent ``POST /pools/{id}/rollouts`` on one pool, a
worker reconciling the pool meanwhile, were answered 500 (``DeadlockDetectedError``) 3 to 5
times of 8. The cycle: a request holds the pool's row (``FOR UPDATE``) and inserts its rollout,
whose unique check on the pool's active rollout waits for the reconciliation's transaction,
which has updated that rollout (a ``ChangeRollout``) and then waits for the pool's row to mark
it reconciled. Here a transaction of the test takes the reconciliation's two steps, in its order,
around the eight requests, so the deadlock happens every time rather than by chance.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from tests.support.pools import Caller, pool_body

from deskpool.runtime import Runtime
from deskpool.testing.processes import until

POOLS = "/api/v1/pools"
TEMPLATES = [{"name": "ubuntu-22.04"}, {"name": "ubuntu-24.04"}, {"name": "ubuntu-25.04"}]


@pytest.fixture
def pools_environ(pools_environ: dict[str, str]) -> dict[str, str]:
    """Statements may wait as long as the deadlock takes to be found (1 s, then retries)."""
    return pools_environ | {"DATABASE_STATEMENT_TIMEOUT": "30s"}


async def test_eight_concurrent_rollouts_meeting_a_reconciliation_are_never_500(
    client: Any,
    pools_runtime: Runtime,
    new_caller: Callable[..., Awaitable[Caller]],
    api_cluster: Callable[..., Awaitable[str]],
) -> None:
    manager = await new_caller("pools:manage")
    cluster_id = await api_cluster(templates=TEMPLATES)
    created = await client.post(POOLS, headers=manager.headers, json=pool_body(cluster_id))
    assert created.status == 201, await created.text()
    pool_id = (await created.json())["id"]
    rollouts = f"{POOLS}/{pool_id}/rollouts"
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    first = await client.post(
        rollouts, headers=manager.headers, json={"template": "ubuntu-24.04", "start_at": later}
    )
    assert first.status == 201, await first.text()
    rollout_id = (await first.json())["id"]

    async def start() -> tuple[int, str]:
        response = await client.post(
            rollouts, headers=manager.headers, json={"template": "ubuntu-25.04"}
        )
        return response.status, await response.text()

    # The reconciliation's transaction: the rollout changed first...
    url = pools_runtime.config["DATABASE_URL"]
    reconciliation, watcher = await asyncpg.connect(url), await asyncpg.connect(url)
    try:
        async with reconciliation.transaction():
            # PostgreSQL ends the transaction whose wait it checks first: the request's (each
            # request holding the pool's row in turn meets the cycle, a second each).
            await reconciliation.execute("SET LOCAL deadlock_timeout = '200s'")
            await reconciliation.execute(
                "UPDATE rollouts SET message = message WHERE id = $1", rollout_id
            )
            requests = asyncio.gather(*(start() for _ in range(8)))

            async def a_request_waits_on_the_rollout() -> bool:
                return bool(
                    await watcher.fetchval(
                        """SELECT count(*) FROM pg_stat_activity
                            WHERE datname = current_database() AND wait_event_type = 'Lock'
                              AND query LIKE '%INSERT INTO rollouts%'"""
                    )
                )

            await until(a_request_waits_on_the_rollout, "a request waits on the rollout's row")
            # ... then the pool marked reconciled: the pool's row a request holds.
            await reconciliation.execute(
                "UPDATE pools SET updated_at = updated_at WHERE id = $1", pool_id
            )
        answers = await requests
    finally:
        await reconciliation.close()
        await watcher.close()

    statuses = Counter(status for status, _ in answers)
    assert statuses[500] == 0, [text for status, text in answers if status == 500]
    # The pool has its one active rollout: every request is refused as a conflict, or (one
    # that met the deadlock on each of its attempts, under a loaded machine) told to retry.
    assert set(statuses) <= {409, 503}, answers
    assert all('"contention"' in text for status, text in answers if status == 503), answers
