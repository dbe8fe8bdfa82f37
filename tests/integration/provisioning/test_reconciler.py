"""The reconciler applied to stored pools and a simulated cluster.

The pure rules are tested in tests/unit/pools; these tests check what applying them does to
the database and the cluster: desktops inserted with one job each, the audit trail, one VM
listing per cluster per batch, an unlistable cluster never taken for vanished VMs, plans not
applied to desktops that moved on, fencing by the run's lease.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from tests.support.provisioning import (
    POLICY,
    ConvergedPool,
    MakeCluster,
    MakePool,
    RunJob,
    Simulator,
    SimulatorFor,
    add_desktop,
    desktops,
    no_fence,
    provision_all,
)

from deskpool.desktops import store as store_desktops
from deskpool.desktops.jobs import PROVISION, enqueue_desktop_job, idempotency_key
from deskpool.desktops.states import Allocated
from deskpool.jobs.model import LeaseLost
from deskpool.jobs.periodic import PeriodicContext
from deskpool.pools import store as store_pools
from deskpool.pools.model import DesktopState, Pool
from deskpool.reconciliation import store_orphans
from deskpool.reconciliation.jobs import POOL_RECONCILE_JOB, enqueue_pool_reconcile
from deskpool.reconciliation.periodic import POOL_RECONCILE_TASK, reconcile_batch
from deskpool.reconciliation.reconciler import PoolReconcilerService
from deskpool.runtime import Runtime
from deskpool.testing.periodic import claim_periodic_task, leased_periodic_context

S = DesktopState


async def shrink(db: asyncpg.Connection, pool: Pool, min_size: int) -> None:
    """Change the pool's ``min_size`` behind the API's back (a new generation)."""
    await db.execute(
        "UPDATE pools SET min_size = $2, generation = generation + 1 WHERE id = $1",
        pool.id,
        min_size,
    )


async def jobs_of(db: asyncpg.Connection, desktop_id: uuid.UUID) -> list[asyncpg.Record]:
    return list(
        await db.fetch(
            "SELECT * FROM jobs WHERE resource_type = 'desktops' AND resource_id = $1 ORDER BY id",
            str(desktop_id),
        )
    )


async def audit(db: asyncpg.Connection, action: str, pool: Pool) -> list[asyncpg.Record]:
    """The reconciler's events of ``action`` about ``pool``.

    The trail is the whole database's: other test files' events stay in it.
    """
    query = "SELECT * FROM audit_events WHERE action = $1 AND details->>'pool_id' = $2 ORDER BY id"
    return list(await db.fetch(query, action, str(pool.id)))


async def test_a_new_pool_gets_its_desktops_each_with_one_provisioning_job(
    db: asyncpg.Connection, make_pool: MakePool, reconciler: PoolReconcilerService
) -> None:
    pool = await make_pool(min_size=3)
    applied = await reconciler.reconcile_now(pool.id, no_fence)
    assert applied is not None
    assert (applied.applied, applied.skipped) == (3, 0)

    created = await desktops(db, pool)
    assert sorted(desktop.name for desktop in created) == [
        pool.naming_pattern.format(n=n) for n in (1, 2, 3)
    ]
    for desktop in created:
        assert desktop.state is S.PROVISIONING
        [job] = await jobs_of(db, desktop.id)
        assert job["kind"] == PROVISION
        assert job["idempotency_key"] == idempotency_key(PROVISION, desktop)
    events = await audit(db, "reconcile.create_desktop", pool)
    assert len(events) == 3
    assert {event["actor"] for event in events} == {"system:reconciler"}
    assert all("min_size 3" in event["details"] for event in events)
    stored = await store_pools.get_pool_record(db, pool.id)
    assert stored is not None
    assert stored.pool.reconciled_generation == pool.generation
    assert stored.reconciled_at is not None
    assert stored.health is not None

    again = await reconciler.reconcile_now(pool.id, no_fence)
    assert again is not None
    assert (again.applied, again.skipped) == (0, 0)
    assert len(await desktops(db, pool)) == 3
    assert await db.fetchval("SELECT count(*) FROM jobs") == 3


async def test_a_batch_lists_each_cluster_once_however_many_of_its_pools_it_takes(
    db: asyncpg.Connection,
    make_cluster: MakeCluster,
    make_pool: MakePool,
    runtime: Runtime,
    reconciler: PoolReconcilerService,
) -> None:
    other = await make_cluster()
    pools = [await make_pool(min_size=1) for _ in range(3)]
    pools.append(await make_pool(min_size=1, cluster_id=other.id))
    labels = {"driver": "simulator", "operation": "list_owned_vms", "outcome": "ok"}
    before = runtime.metrics.get_sample_value("deskpool_driver_calls_total", labels) or 0.0
    context = await leased_periodic_context(db, runtime, POOL_RECONCILE_TASK)

    batch = await reconcile_batch(reconciler, context)

    assert sorted(batch.reconciled) == sorted(str(pool.id) for pool in pools)
    assert batch.failed == ()
    after = runtime.metrics.get_sample_value("deskpool_driver_calls_total", labels)
    assert after == before + 2
    for pool in pools:
        assert [desktop.state for desktop in await desktops(db, pool)] == [S.PROVISIONING]


async def test_a_run_that_lost_its_lease_commits_nothing(
    db: asyncpg.Connection, make_pool: MakePool, runtime: Runtime
) -> None:
    pool = await make_pool(min_size=2)
    await claim_periodic_task(db, POOL_RECONCILE_TASK, fence=8, lease=timedelta(0), started=False)
    stale = PeriodicContext(
        POOL_RECONCILE_TASK,
        runtime,
        fence=7,  # another worker took the task over (fence 8)
        started_at=datetime.now(UTC),
        interval=timedelta(seconds=30),
        lease_duration=timedelta(minutes=1),
    )
    reconciler = PoolReconcilerService(runtime, POLICY)
    async with runtime.db.acquire() as connection:
        assert await reconciler.pools_to_reconcile(connection, 10) == [str(pool.id)]
    with pytest.raises(LeaseLost):
        await reconciler.reconcile_pool(str(pool.id), stale)
    assert await desktops(db, pool) == []
    assert await db.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_vm_deleted_behind_deskpools_back_is_provisioned_anew(
    db: asyncpg.Connection,
    converged_pool: ConvergedPool,
    reconciler: PoolReconcilerService,
    run_job: RunJob,
    simulator: Simulator,
) -> None:
    pool, [ready] = await converged_pool(min_size=1)
    assert ready.state is S.READY
    assert ready.vm_id is not None

    await simulator.driver.delete(ready.vm_id)
    await reconciler.reconcile_now(pool.id, no_fence)

    [replaced] = await desktops(db, pool)
    assert replaced.id == ready.id
    assert replaced.state is S.PROVISIONING
    assert replaced.vm_id is None
    [event] = await audit(db, "reconcile.replace_desktop", pool)
    assert "vanished" in event["details"]
    first, second = await jobs_of(db, ready.id)
    assert first["state"] == "succeeded"
    assert second["state"] == "queued"
    assert second["idempotency_key"] == idempotency_key(PROVISION, replaced)

    await run_job(second["id"])
    [again] = await desktops(db, pool)
    assert again.state is S.READY
    assert again.vm_id not in (None, ready.vm_id)
    assert await simulator.vms_of(ready.id) == [again.vm_id]


async def test_an_unlistable_cluster_is_not_taken_for_vanished_vms(
    db: asyncpg.Connection,
    make_cluster: MakeCluster,
    make_pool: MakePool,
    reconciler: PoolReconcilerService,
) -> None:
    unreachable = await make_cluster("nosuchdriver")
    pool = await make_pool(min_size=1, cluster_id=unreachable.id)
    desktop = await add_desktop(db, pool)
    await db.execute(
        "UPDATE desktops SET state = 'ready', vm_id = '100', template = $2 WHERE id = $1",
        desktop.id,
        pool.template,
    )

    applied = await reconciler.reconcile_now(pool.id, no_fence)

    assert applied is not None
    assert (applied.applied, applied.skipped) == (0, 0)
    [still] = await desktops(db, pool)
    assert (still.state, still.vm_id) == (S.READY, "100")
    stored = await store_pools.get_pool_record(db, pool.id)
    assert stored is not None
    assert stored.health is not None
    assert any("could not be listed" in reason for reason in stored.health.reasons)
    assert stored.pool.reconciled_generation == 0


async def test_a_failed_desktop_is_retried_after_its_backoff(
    db: asyncpg.Connection,
    make_pool: MakePool,
    reconciler: PoolReconcilerService,
    run_job: RunJob,
    simulator: Simulator,
) -> None:
    pool = await make_pool(min_size=1)
    await reconciler.reconcile_now(pool.id, no_fence)
    [desktop] = await desktops(db, pool)
    await simulator.driver.admin.inject(agent_never_answers=desktop.name)
    await provision_all(db, run_job)
    [failed] = await desktops(db, pool)
    assert failed.state is S.FAILED
    await simulator.driver.admin.clear_faults()

    await reconciler.reconcile_now(pool.id, no_fence)

    [retried] = await desktops(db, pool)
    assert retried.state is S.PROVISIONING
    [event] = await audit(db, "reconcile.retry_failed", pool)
    assert "retrying provisioning" in event["details"]
    await provision_all(db, run_job)
    [ready] = await desktops(db, pool)
    assert ready.state is S.READY
    assert await simulator.vms_of(ready.id) == [ready.vm_id]


async def test_a_plan_is_not_applied_to_a_desktop_that_moved_on(
    db: asyncpg.Connection, converged_pool: ConvergedPool, reconciler: PoolReconcilerService
) -> None:
    pool, [desktop] = await converged_pool(min_size=1)
    await shrink(db, pool, 0)
    current = await store_pools.get_pool(db, pool.id)
    assert current is not None
    planned = (await reconciler.plan([current]))[pool.id]
    assert [action.kind for action in planned.plan.actions] == ["delete_desktop"]

    user = await db.fetchval(
        "INSERT INTO users (issuer, subject) VALUES ('https://issuer.test', $1) RETURNING id",
        f"user-{uuid.uuid4()}",
    )
    await store_desktops.apply_event(db, desktop.id, Allocated(str(user)), datetime.now(UTC))
    applied = await reconciler.apply(planned, no_fence)

    assert (applied.applied, applied.skipped) == (0, 1)
    [kept] = await desktops(db, pool)
    assert kept.state is S.IN_USE


async def test_surplus_desktops_are_deleted_with_their_vms(
    db: asyncpg.Connection,
    converged_pool: ConvergedPool,
    reconciler: PoolReconcilerService,
    run_job: RunJob,
    simulator: Simulator,
) -> None:
    pool, ready = await converged_pool(min_size=2)
    assert [desktop.state for desktop in ready] == [S.READY, S.READY]
    await shrink(db, pool, 1)

    await reconciler.reconcile_now(pool.id, no_fence)
    doomed = [desktop for desktop in await desktops(db, pool) if desktop.state is S.DELETING]
    assert len(doomed) == 1
    [job] = [job for job in await jobs_of(db, doomed[0].id) if job["state"] == "queued"]
    assert job["kind"] == "desktop.delete"
    await run_job(job["id"])

    [kept] = await desktops(db, pool)
    assert kept.state is S.READY
    assert await simulator.vms_of(doomed[0].id) == []


async def test_an_orphan_vm_is_reported_once(
    db: asyncpg.Connection,
    converged_pool: ConvergedPool,
    reconciler: PoolReconcilerService,
    simulator: Simulator,
) -> None:
    pool, [desktop] = await converged_pool(min_size=1)
    stray = await simulator.driver.clone("9000", name="stray", desktop_id=str(desktop.id))

    await reconciler.reconcile_now(pool.id, no_fence)
    await reconciler.reconcile_now(pool.id, no_fence)

    [orphan] = await store_orphans.list_orphans(db, pool_id=pool.id)
    assert (orphan.vm_id, orphan.name, orphan.desktop_id) == (stray.id, "stray", desktop.id)
    [event] = await audit(db, "reconcile.report_orphan", pool)
    assert stray.id in event["details"]
    assert await simulator.vms_of(desktop.id) == sorted([desktop.vm_id or "", stray.id], key=int)


async def test_the_pool_reconcile_job_reconciles_one_pool_now(
    db: asyncpg.Connection, make_pool: MakePool, run_job: RunJob
) -> None:
    pool = await make_pool(min_size=2)
    job = await enqueue_pool_reconcile(db, pool.id)
    assert (await enqueue_pool_reconcile(db, pool.id)).id == job.id
    assert job.kind == POOL_RECONCILE_JOB
    await run_job(job.id)
    assert len(await desktops(db, pool)) == 2
    assert (await enqueue_pool_reconcile(db, pool.id)).id != job.id


async def test_a_desktop_enqueued_for_by_hand_is_not_enqueued_again_by_reconciliation(
    db: asyncpg.Connection, make_pool: MakePool, reconciler: PoolReconcilerService
) -> None:
    pool = await make_pool(min_size=1)
    desktop = await add_desktop(db, pool, pool.naming_pattern.format(n=1))
    await enqueue_desktop_job(db, PROVISION, desktop)
    await reconciler.reconcile_now(pool.id, no_fence)
    assert len(await jobs_of(db, desktop.id)) == 1
    assert len(await desktops(db, pool)) == 1


async def test_the_simulator_fixture_cluster_is_per_test(
    make_cluster: MakeCluster, simulator_for: SimulatorFor
) -> None:
    first = await simulator_for(await make_cluster())
    second = await simulator_for(await make_cluster())
    await first.driver.clone("9000", name="a", desktop_id="d1")
    assert await second.driver.list_owned_vms() == []
