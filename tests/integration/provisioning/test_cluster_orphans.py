"""Cluster-wide orphans and the reconciliation metrics, against a simulated cluster.

A VM tagged as deskpool's whose tags name no existing pool or desktop (its pool was deleted)
belongs to no pool's plan: batch planning finds it among the cluster's listed VMs and records
it once, with no pool, audited once, and never deletes it; the administrator's deletion job
does. Every applied action and every cycle is counted on the worker's metrics.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from tests.support.provisioning import (
    POLICY,
    ConvergedPool,
    MakeCluster,
    MakePool,
    RunJob,
    Simulator,
    no_fence,
)

from deskpool.clusters.repository import ClusterRecord
from deskpool.desktops.jobs import enqueue_orphan_deletion
from deskpool.reconciliation import store_orphans
from deskpool.reconciliation.metrics import PoolReconcileMetrics
from deskpool.reconciliation.periodic import POOL_RECONCILE_TASK, reconcile_batch
from deskpool.reconciliation.reconciler import PoolReconcilerService
from deskpool.runtime import Runtime
from deskpool.testing.periodic import leased_periodic_context
from deskpool_worker import WorkerComponent
from deskpool_worker.pools import pool_reconciler


@pytest.fixture(autouse=True)
async def forget_audit_events(db: asyncpg.Connection) -> AsyncIterator[None]:
    """Start and leave the audit trail empty: tests of the directory count their events."""
    await db.execute("TRUNCATE audit_events")
    yield
    await db.execute("TRUNCATE audit_events")


async def test_a_vm_of_a_deleted_pool_is_reported_once_with_no_pool_and_kept(
    db: asyncpg.Connection,
    converged_pool: ConvergedPool,
    runtime: Runtime,
    run_job: RunJob,
    simulator: Simulator,
) -> None:
    pool, [desktop] = await converged_pool(min_size=1)
    gone_desktop = uuid.uuid4()
    left = await simulator.driver.clone("9000", name="left-behind", desktop_id=str(gone_desktop))
    foreign = await simulator.driver.admin.add_foreign_vm("not-ours")

    context = await leased_periodic_context(db, runtime, POOL_RECONCILE_TASK)
    for _ in range(2):
        batch = await reconcile_batch(PoolReconcilerService(runtime, POLICY), context)
        assert batch.failed == ()

    [orphan] = await store_orphans.list_orphans(db, cluster_id=pool.cluster_id)
    assert (orphan.vm_id, orphan.name, orphan.pool_id, orphan.desktop_id) == (
        left.id,
        "left-behind",
        None,
        gone_desktop,
    )
    events = await db.fetch(
        "SELECT * FROM audit_events WHERE action = 'reconcile.report_orphan' ORDER BY id"
    )
    [event] = events
    assert (event["resource_type"], event["resource_id"]) == ("clusters", str(pool.cluster_id))
    assert left.id in event["details"]
    owned = {vm.id for vm in await simulator.driver.list_owned_vms()}
    assert owned == {desktop.vm_id, left.id}
    assert foreign.id not in {o.vm_id for o in await store_orphans.list_orphans(db)}
    assert await db.fetchval("SELECT count(*) FROM jobs WHERE kind = 'vm.delete_orphan'") == 0

    async with runtime.db.acquire() as connection:
        job = await enqueue_orphan_deletion(connection, pool.cluster_id, left.id)
    await run_job(job.id)
    assert {vm.id for vm in await simulator.driver.list_owned_vms()} == {desktop.vm_id}
    assert await store_orphans.list_orphans(db, cluster_id=pool.cluster_id) == []


async def test_a_cluster_without_pools_has_its_leftover_vms_reported_by_the_scan(
    db: asyncpg.Connection,
    cluster: ClusterRecord,
    make_cluster: MakeCluster,
    runtime: Runtime,
    simulator: Simulator,
) -> None:
    left = await simulator.driver.clone("9000", name="left-over", desktop_id=str(uuid.uuid4()))
    await simulator.driver.admin.add_foreign_vm("not-ours-either")
    await make_cluster("nosuchdriver")  # no pools either, and it cannot be listed

    for run in range(2):
        reported = await PoolReconcilerService(runtime, POLICY).report_orphans_on_idle_clusters(
            no_fence
        )
        assert reported == (1 if run == 0 else 0)

    [orphan] = await store_orphans.list_orphans(db, cluster_id=cluster.id)
    assert (orphan.vm_id, orphan.pool_id) == (left.id, None)
    assert (
        await db.fetchval(
            "SELECT count(*) FROM audit_events WHERE action = 'reconcile.report_orphan'"
        )
        == 1
    )
    assert left.id in {vm.id for vm in await simulator.driver.list_owned_vms()}


async def test_an_unlistable_cluster_reports_no_orphans(
    db: asyncpg.Connection,
    make_cluster: MakeCluster,
    make_pool: MakePool,
    runtime: Runtime,
) -> None:
    unreachable = await make_cluster("nosuchdriver")
    pool = await make_pool(min_size=1, cluster_id=unreachable.id)

    planned = await PoolReconcilerService(runtime, POLICY).plan([pool])

    assert planned[pool.id].unowned == ()
    assert not planned[pool.id].observed


async def test_a_reconcile_run_counts_its_actions_and_its_cycle(
    db: asyncpg.Connection, make_pool: MakePool, runtime: Runtime
) -> None:
    metrics = PoolReconcileMetrics(runtime.metrics)
    created = {"kind": "create_desktop"}
    pool = await make_pool(min_size=2)

    await PoolReconcilerService(runtime, POLICY, metrics).reconcile_now(pool.id, no_fence)

    sample = runtime.metrics.get_sample_value
    assert sample("deskpool_reconcile_actions_total", created) == 2
    assert sample("deskpool_reconcile_cycle_seconds_count") == 1

    await make_pool(min_size=1)
    context = await leased_periodic_context(db, runtime, POOL_RECONCILE_TASK)
    batch = await reconcile_batch(PoolReconcilerService(runtime, POLICY, metrics), context)

    assert len(batch.reconciled) == 2
    assert sample("deskpool_reconcile_actions_total", created) == 3
    assert sample("deskpool_reconcile_cycle_seconds_count") == 2


async def test_the_worker_factory_counts_on_the_worker_components_metrics(
    runtime: Runtime,
) -> None:
    assert pool_reconciler(runtime).metrics is None
    worker = WorkerComponent(runtime)
    runtime.components[worker.name] = worker

    first, second = pool_reconciler(runtime), pool_reconciler(runtime)

    assert first.metrics is worker.reconcile_metrics
    assert second.metrics is worker.reconcile_metrics
