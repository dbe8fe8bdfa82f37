"""One pool's reconciliation fails alone, and two reconciliations of a pool never both apply.

Poison is stored behind the API's back (the edge refuses it; these tests are about what is
already stored): a schedule whose exception date is 9999-12-31 in ``Etc/GMT+12`` (its end
overflows the calendar when the phase in force is computed) and a rollout that starts at
0001-01-01T00:00:00Z (read back from PostgreSQL as a naive ``datetime.min``, which the
rollout planner cannot compare with the pass's aware time). Every other pool of the passes
converges; both poisoned pools show a ``reconcile_error`` through the API and the metric, and
it clears once the poison is gone.

Two reconciliations of a new pool at once (two ``pool.reconcile`` jobs, or a job and the
periodic pass) never make more desktops than the pool's ``max_size``.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, date, datetime, time
from typing import Any

import asyncpg
import pytest
from asyncpg.transaction import Transaction
from tests.integration.seed import seed_user
from tests.support.provisioning import (
    POLICY,
    MakePool,
    RunJob,
    desktops,
    no_fence,
    provision_all,
)

from deskpool.jobs.periodic import PeriodicContext
from deskpool.pools.model import DesktopState, Pool
from deskpool.reconciliation import applying, cluster_vms, planning
from deskpool.reconciliation.failures import ReconcileBusy
from deskpool.reconciliation.metrics import PoolReconcileMetrics
from deskpool.reconciliation.periodic import POOL_RECONCILE_TASK, reconcile_batch
from deskpool.reconciliation.reconciler import PoolReconcilerService
from deskpool.reconciliation.store import try_lock_pool_for_reconciliation
from deskpool.rollouts import store as rollout_store
from deskpool.rollouts.model import InUsePolicy, Rollout, RolloutState
from deskpool.runtime import Runtime
from deskpool.schedules import store as schedule_store
from deskpool.schedules.model import ExceptionDates, Phase, Schedule, Settings
from deskpool.testing.periodic import leased_periodic_context
from deskpool.testing.pytest_plugin import opened_runtime

S = DesktopState

ApiGet = Callable[[str], Awaitable[Any]]
ApiCall = Callable[[str], Awaitable[tuple[int, Any]]]


@pytest.fixture
async def api_runtime(
    worker_environ: dict[str, str], identity_provider: Any, runtime: Runtime
) -> AsyncIterator[Runtime]:
    """An api runtime on the worker's database, authenticating against the test issuer."""
    environ = {
        **worker_environ,
        "AUTH_OIDC_ISSUER_URL": identity_provider.issuer_url,
        "AUTH_OIDC_AUDIENCE": identity_provider.audience,
    }
    async with opened_runtime(environ) as opened:
        yield opened


@pytest.fixture
async def api_call(
    api_runtime: Runtime,
    api_client_for: Callable[[Any], Awaitable[Any]],
    identity_provider: Any,
    bearer: Callable[..., dict[str, str]],
) -> ApiCall:
    """``await api_call(path)``: the status and JSON of ``GET path`` (pools and schedules read)."""
    client = await api_client_for(api_runtime)
    subject = f"reader-{secrets.token_hex(4)}"
    await seed_user(
        api_runtime, identity_provider.issuer_url, subject, "pools:read", "schedules:read"
    )
    headers = bearer(subject)

    async def call(path: str) -> tuple[int, Any]:
        response = await client.get(path, headers=headers)
        return response.status, await response.json()

    return call


@pytest.fixture
def api_get(api_call: ApiCall) -> ApiGet:
    """``await api_get(path)``: the JSON of a success (any other status fails the test)."""

    async def get(path: str) -> Any:
        status, body = await api_call(path)
        assert status == 200, body
        return body

    return get


async def pass_context(db: asyncpg.Connection, runtime: Runtime) -> PeriodicContext:
    """The context of a new run of the reconciliation task (the former run's claim removed)."""
    await db.execute("DELETE FROM periodic_tasks WHERE name = $1", POOL_RECONCILE_TASK)
    return await leased_periodic_context(db, runtime, POOL_RECONCILE_TASK)


async def poison_schedule(db: asyncpg.Connection) -> uuid.UUID:
    """A schedule whose one exception ends after 9999-12-31 in Etc/GMT+12 (stored as is)."""
    day = Settings(min_ready=1)
    schedule = Schedule(
        id=uuid.uuid4(),
        name=f"poison-{secrets.token_hex(4)}",
        time_zone="Etc/GMT+12",
        phases=(Phase(name="day", days=frozenset(range(7)), start=time(0), settings=day),),
        exceptions=(
            ExceptionDates(name="forever", first=date(9999, 12, 31), last=date(9999, 12, 31)),
        ),
    )
    record = await schedule_store.insert_schedule(db, schedule)
    return record.schedule.id


async def poison_rollout(db: asyncpg.Connection, pool: Pool) -> Rollout:
    """A scheduled rollout of ``pool`` starting at 0001-01-01T00:00:00Z (stored as is)."""
    return await rollout_store.insert_rollout(
        db,
        Rollout(
            id=uuid.uuid4(),
            pool_id=pool.id,
            from_template=pool.template,
            to_template="ubuntu-24.04",
            canary=1,
            batch_size=1,
            min_ready=0,
            surge=0,
            in_use=InUsePolicy.WAIT_FOR_LOGOFF,
            warning_seconds=60,
            message="",
            start_at=datetime(1, 1, 1, tzinfo=UTC),
            stop_on_error=True,
            recreate_assigned=False,
            state=RolloutState.SCHEDULED,
            created_by="test",
            created_at=datetime.now(UTC),
        ),
    )


async def test_two_poisoned_pools_fail_alone_and_say_so(
    db: asyncpg.Connection,
    make_pool: MakePool,
    runtime: Runtime,
    run_job: RunJob,
    api_get: ApiGet,
) -> None:
    healthy = [await make_pool(min_size=2) for _ in range(3)]
    schedule_id = await poison_schedule(db)
    by_schedule = await make_pool(min_size=1, schedule_id=schedule_id)
    by_rollout = await make_pool(min_size=1)
    await poison_rollout(db, by_rollout)
    poisoned = {str(by_schedule.id), str(by_rollout.id)}
    metrics = PoolReconcileMetrics(runtime.metrics)

    for _ in range(3):  # a pass creates, the jobs provision, the next pass finds all well
        context = await pass_context(db, runtime)
        batch = await reconcile_batch(PoolReconcilerService(runtime, POLICY, metrics), context)
        assert set(batch.failed) == poisoned
        assert set(batch.reconciled) == {str(pool.id) for pool in healthy}
        await provision_all(db, run_job)

    for pool in healthy:
        assert [desktop.state for desktop in await desktops(db, pool)] == [S.READY, S.READY]
        shown = await api_get(f"/api/v1/pools/{pool.id}")
        assert shown["reconcile_error"] is None
        assert shown["health"]["status"] == "healthy"
        assert runtime.metrics.get_sample_value(
            "deskpool_pool_reconcile_failing", {"pool_id": str(pool.id)}
        ) in (None, 0.0)

    errors = {}
    for pool in (by_schedule, by_rollout):
        shown = await api_get(f"/api/v1/pools/{pool.id}")
        error = shown["reconcile_error"]
        assert error is not None, shown
        assert error["reason"]
        assert error["code"]
        assert datetime.fromisoformat(error["since"]) <= datetime.now(UTC)
        errors[pool.id] = error
        assert (
            runtime.metrics.get_sample_value(
                "deskpool_pool_reconcile_failing", {"pool_id": str(pool.id)}
            )
            == 1.0
        )
    assert errors[by_schedule.id]["code"] == "schedule_unusable"
    assert "schedule" in errors[by_schedule.id]["reason"]
    assert errors[by_rollout.id]["code"] == "rollout_unusable"
    assert "rollout" in errors[by_rollout.id]["reason"]
    listed = await api_get("/api/v1/pools?limit=100")
    shown_errors = {item["id"]: item["reconcile_error"] for item in listed["items"]}
    assert {pool_id for pool_id, error in shown_errors.items() if error} == poisoned
    # Audited once when each started failing (not at each of the three passes), so that
    # webhook subscribers get one reconcile.error per failure.
    audited = await db.fetch(
        """SELECT resource_id, outcome, details->>'code' AS code FROM audit_events
            WHERE action = 'pool.reconcile_error' AND resource_id = ANY($1::text[])""",
        list(poisoned),
    )
    assert sorted((row["resource_id"], row["outcome"], row["code"]) for row in audited) == sorted(
        [
            (str(by_schedule.id), "failure", "schedule_unusable"),
            (str(by_rollout.id), "failure", "rollout_unusable"),
        ]
    )

    # The poison removed, the next pass clears the errors.
    await db.execute("UPDATE schedules SET exceptions = '[]'::jsonb WHERE id = $1", schedule_id)
    await db.execute("DELETE FROM rollouts WHERE pool_id = $1", by_rollout.id)
    context = await pass_context(db, runtime)
    batch = await reconcile_batch(PoolReconcilerService(runtime, POLICY, metrics), context)
    assert batch.failed == ()
    for pool in (by_schedule, by_rollout):
        shown = await api_get(f"/api/v1/pools/{pool.id}")
        assert shown["reconcile_error"] is None
        assert (
            runtime.metrics.get_sample_value(
                "deskpool_pool_reconcile_failing", {"pool_id": str(pool.id)}
            )
            == 0.0
        )
        assert len(await desktops(db, pool)) == 1


async def test_a_stored_poisoned_schedule_is_shown_and_its_capacity_refused_in_words(
    db: asyncpg.Connection, make_pool: MakePool, api_get: ApiGet, api_call: ApiCall
) -> None:
    """Its list and its page answer, its pool's capacity is a 409 (finding 1: all three 500)."""
    schedule_id = await poison_schedule(db)
    pool = await make_pool(min_size=1, schedule_id=schedule_id)
    shown = await api_get(f"/api/v1/schedules/{schedule_id}")
    assert shown["in_force"] is None
    listed = await api_get("/api/v1/schedules?limit=100")
    assert str(schedule_id) in {item["id"] for item in listed["items"]}
    status, problem = await api_call(f"/api/v1/pools/{pool.id}/capacity")
    assert status == 409, problem
    assert problem["code"] == "schedule_unusable"
    assert "cannot be computed" in problem["detail"]


async def test_a_poisoned_pool_reconciled_now_fails_alone(
    db: asyncpg.Connection, make_pool: MakePool, reconciler: PoolReconcilerService
) -> None:
    pool = await make_pool(min_size=1, schedule_id=await poison_schedule(db))
    with pytest.raises(Exception, match="schedule"):
        await reconciler.reconcile_now(pool.id, no_fence)
    error = await db.fetchrow(
        "SELECT reconcile_error_code, reconcile_error_reason, reconcile_error_since "
        "FROM pools WHERE id = $1",
        pool.id,
    )
    assert error is not None
    assert error["reconcile_error_code"] == "schedule_unusable"
    assert await desktops(db, pool) == []


def gate_first_listing(monkeypatch: pytest.MonkeyPatch) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold the next cluster listing of a plan until released: (listing began, release)."""
    listing = asyncio.Event()
    release = asyncio.Event()
    real = cluster_vms.list_clusters

    async def gated(*args: Any, **kwargs: Any) -> Any:
        if not listing.is_set():
            listing.set()
            await release.wait()
        return await real(*args, **kwargs)

    monkeypatch.setattr(planning, "list_clusters", gated)
    return listing, release


async def test_a_reconciliation_planned_before_another_applied_never_exceeds_max_size(
    db: asyncpg.Connection,
    make_pool: MakePool,
    runtime: Runtime,
    run_job: RunJob,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race of the review, made certain: B lists the cluster while A applies.

    B (the periodic pass, say) has read the pool's desktops (none) and is listing the
    cluster's VMs, which takes time on a real cluster; meanwhile A (a ``pool.reconcile`` job)
    creates the pool's five desktops and their VMs are cloned. B's listing then shows five
    VM names taken, so B plans five more desktops under new names.
    """
    for attempt in range(3):
        pool = await make_pool(min_size=5, max_size=5)
        listing, release = gate_first_listing(monkeypatch)
        late = asyncio.create_task(
            PoolReconcilerService(runtime, POLICY).reconcile_now(pool.id, no_fence)
        )
        await listing.wait()
        await PoolReconcilerService(runtime, POLICY).reconcile_now(pool.id, no_fence)
        await provision_all(db, run_job)
        release.set()
        await late
        count = len(await desktops(db, pool))
        assert count == 5, f"attempt {attempt}: {count} desktops for a max_size of 5"


async def test_two_reconciliations_of_a_new_pool_never_exceed_its_max_size(
    db: asyncpg.Connection, make_pool: MakePool, runtime: Runtime
) -> None:
    for attempt in range(6):
        pool = await make_pool(min_size=5, max_size=5)
        first = PoolReconcilerService(runtime, POLICY)
        second = PoolReconcilerService(runtime, POLICY)
        await asyncio.gather(
            first.reconcile_now(pool.id, no_fence), second.reconcile_now(pool.id, no_fence)
        )
        count = len(await desktops(db, pool))
        assert count == 5, f"attempt {attempt}: {count} desktops for a max_size of 5"


async def test_the_periodic_pass_and_a_job_at_once_never_exceed_max_size(
    db: asyncpg.Connection, make_pool: MakePool, runtime: Runtime
) -> None:
    for attempt in range(4):
        pool = await make_pool(min_size=5, max_size=5)
        context = await pass_context(db, runtime)
        await asyncio.gather(
            reconcile_batch(PoolReconcilerService(runtime, POLICY), context),
            PoolReconcilerService(runtime, POLICY).reconcile_now(pool.id, no_fence),
        )
        count = len(await desktops(db, pool))
        assert count == 5, f"attempt {attempt}: {count} desktops for a max_size of 5"


async def hold_reconcile_lock(db: asyncpg.Connection, pool: Pool) -> Transaction:
    """Take the pool's reconciliation lock in ``db``'s transaction, as an applying pass holds it."""
    transaction = db.transaction()
    await transaction.start()
    assert await try_lock_pool_for_reconciliation(db, pool.id)
    return transaction


async def test_a_pass_waits_for_another_applying_the_same_pool(
    db: asyncpg.Connection, make_pool: MakePool, runtime: Runtime
) -> None:
    pool = await make_pool(min_size=2)
    held = await hold_reconcile_lock(db, pool)
    waiting = asyncio.create_task(
        PoolReconcilerService(runtime, POLICY).reconcile_now(pool.id, no_fence)
    )
    await asyncio.sleep(0.5)
    assert not waiting.done()
    await held.rollback()
    applied = await waiting
    assert applied is not None
    assert applied.applied == 2


async def test_a_pass_that_waits_too_long_leaves_the_pool_without_failing_it(
    db: asyncpg.Connection, make_pool: MakePool, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(applying, "LOCK_WAIT", 0.3)
    pool = await make_pool(min_size=2)
    held = await hold_reconcile_lock(db, pool)
    try:
        with pytest.raises(ReconcileBusy):
            await PoolReconcilerService(runtime, POLICY).reconcile_now(pool.id, no_fence)
    finally:
        await held.rollback()
    assert await desktops(db, pool) == []
    failing = await db.fetchval("SELECT reconcile_error_code FROM pools WHERE id = $1", pool.id)
    assert failing is None
