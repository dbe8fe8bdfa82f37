"""A cluster's last check is what reconciliation last saw of it (issue 37).

The cluster list said "Last check: never" after half an hour of use: only the administrator's
"Check" recorded one, while reconciliation lists every cluster's VMs on each pass. Now each
listing is the cluster's check: its outcome and time are kept (at most once a minute while the
outcome stays the same), a failure with its error.
"""

from __future__ import annotations

from datetime import timedelta

import asyncpg
from tests.support.provisioning import MakePool

from deskpool.clusters.repository import ClusterRecord, get_cluster
from deskpool.reconciliation.reconciler import PoolReconcilerService
from deskpool.testing.processes import until


async def _no_fence(connection: asyncpg.Connection) -> None:
    return None


async def test_reconciling_a_pool_records_its_clusters_check(
    db: asyncpg.Connection,
    cluster: ClusterRecord,
    make_pool: MakePool,
    reconciler: PoolReconcilerService,
) -> None:
    assert cluster.last_check_at is None
    pool = await make_pool(min_size=0)
    await reconciler.reconcile_now(pool.id, _no_fence)
    seen = await get_cluster(db, cluster.id)
    assert seen is not None
    assert seen.last_check_at is not None
    assert (seen.last_check_ok, seen.last_check_error) == (True, None)

    # Within a minute and unchanged, it is not written again.
    await reconciler.reconcile_now(pool.id, _no_fence)
    again = await get_cluster(db, cluster.id)
    assert again is not None
    assert again.last_check_at == seen.last_check_at

    # A cluster that cannot be opened any more (its driver is gone) says so at once.
    await db.execute("UPDATE clusters SET driver = 'uninstalled' WHERE id = $1", cluster.id)
    await reconciler.reconcile_now(pool.id, _no_fence)

    async def failed() -> ClusterRecord | None:
        record = await get_cluster(db, cluster.id)
        return record if record is not None and record.last_check_ok is False else None

    down = await until(failed, "the failed listing is the cluster's check", seconds=5)
    assert down.last_check_error
    assert down.last_check_at is not None
    assert down.last_check_at - seen.last_check_at < timedelta(minutes=1)
