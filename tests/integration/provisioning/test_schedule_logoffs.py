"""A phase's warnings and forced log-offs applied by the reconciler, on a simulated cluster.

An off-peak phase (``min_ready`` 0, ``idle: power_off``, ``logoff`` of disconnected sessions
after a short wait) in force on a persistent pool: the user whose session is disconnected is
warned (the notice ``GET /api/v1/me/desktops`` shows, from ``notices.held_desktops``), once,
with a deadline that passes by other workers do not move, and logged off after it; his
desktop stays his and is powered off, as is the desktop of an owner with no session. A user
who reconnects before the deadline has the warning withdrawn and is not logged off; one who
disconnects again is warned afresh. The pure
rules are tested in tests/unit/pools/test_schedule_logoffs.py.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, time, timedelta

import asyncpg
import pytest
from tests.support.provisioning import (
    POLICY,
    ConvergedPool,
    RunJob,
    desktops,
    no_fence,
)

from deskpool.desktops import store as store_desktops
from deskpool.desktops.jobs import POWER_OFF
from deskpool.desktops.states import Allocated, SessionClosed, SessionOpened
from deskpool.notices import service as notices
from deskpool.pools.model import Desktop, DesktopState, Pool, PoolKind
from deskpool.reconciliation.reconciler import PoolReconcilerService
from deskpool.runtime import Runtime
from deskpool.schedules import store as schedule_store
from deskpool.schedules.logoffs import IDLE_AFTER, NOTICE_REASON
from deskpool.schedules.model import (
    IdlePolicy,
    Logoff,
    LogoffScope,
    Phase,
    Schedule,
    Settings,
)
from deskpool.sessions import service as sessions
from deskpool.sessions import store as session_store
from deskpool.testing.processes import until

S = DesktopState

OFF_PEAK = Settings(
    min_ready=0,
    spare=0,
    idle=IdlePolicy.POWER_OFF,
    logoff=Logoff(scope=LogoffScope.DISCONNECTED, wait_seconds=2, message="The office closes"),
)


async def new_user(db: asyncpg.Connection) -> str:
    user: uuid.UUID = await db.fetchval(
        "INSERT INTO users (issuer, subject) VALUES ('https://issuer.test', $1) RETURNING id",
        f"user-{uuid.uuid4()}",
    )
    return str(user)


async def off_peak_all_week(db: asyncpg.Connection, settings: Settings = OFF_PEAK) -> uuid.UUID:
    schedule = Schedule(
        id=uuid.uuid4(),
        name=f"night-{uuid.uuid4().hex[:8]}",
        time_zone="Europe/Berlin",
        phases=(
            Phase(name="off-peak", days=frozenset(range(7)), start=time(0), settings=settings),
        ),
    )
    record = await schedule_store.insert_schedule(db, schedule)
    return record.schedule.id


@pytest.fixture
async def held_by_alice(
    db: asyncpg.Connection, converged_pool: ConvergedPool
) -> tuple[Pool, Desktop, str]:
    """A pool of one desktop that a new user, Alice, is logged on to (no connection open)."""
    pool, [desktop] = await converged_pool(min_size=1)
    alice = await new_user(db)
    await store_desktops.apply_event(db, desktop.id, Allocated(alice), datetime.now(UTC))
    return pool, desktop, alice


async def run_power_offs(db: asyncpg.Connection, run_job: RunJob) -> None:
    for row in await db.fetch(
        "SELECT id FROM jobs WHERE kind = $1 AND state = 'queued' ORDER BY id", POWER_OFF
    ):
        await run_job(row["id"])


async def test_a_disconnected_session_is_warned_logged_off_and_its_desktop_powered_off(
    db: asyncpg.Connection,
    runtime: Runtime,
    converged_pool: ConvergedPool,
    reconciler: PoolReconcilerService,
    run_job: RunJob,
) -> None:
    pool, [first, second] = await converged_pool(kind=PoolKind.PERSISTENT, min_size=2)
    alice, bob = await new_user(db), await new_user(db)
    # Alice is logged on with no connection open (disconnected); Bob owns a desktop but has
    # logged off (ready, assigned, no session).
    await store_desktops.apply_event(db, first.id, Allocated(alice), datetime.now(UTC))
    await store_desktops.apply_event(db, second.id, Allocated(bob), datetime.now(UTC))
    await sessions.log_off(db, second.id, "test: Bob logged off")
    schedule_id = await off_peak_all_week(db)
    await db.execute(
        "UPDATE pools SET schedule_id = $2, generation = generation + 1 WHERE id = $1",
        pool.id,
        schedule_id,
    )

    await reconciler.reconcile_now(pool.id, no_fence)

    [held] = await notices.held_desktops(runtime, alice)
    assert held.desktop.id == first.id
    assert held.notice is not None
    assert (held.notice.reason, held.notice.message) == (NOTICE_REASON, "The office closes")
    deadline = held.notice.ends_at
    # Bob's desktop, with no session, is powered off at once and stays his.
    await run_power_offs(db, run_job)
    bobs = await store_desktops.get_desktop(db, second.id)
    assert bobs is not None
    assert (bobs.state, bobs.assigned_user) == (S.POWERED_OFF, bob)

    # Another worker's pass before the deadline (a fresh service: the first one may have died
    # after the warning) neither repeats the warning nor moves its deadline.
    await PoolReconcilerService(runtime, POLICY).reconcile_now(pool.id, no_fence)
    [again] = await notices.held_desktops(runtime, alice)
    assert again.notice is not None
    assert (again.notice.id, again.notice.ends_at) == (held.notice.id, deadline)
    warnings = await db.fetchval(
        "SELECT count(*) FROM audit_events WHERE action = 'desktop.notice' AND resource_id = $1",
        str(first.id),
    )
    assert warnings == 1

    async def logged_off() -> Desktop | None:
        await reconciler.reconcile_now(pool.id, no_fence)
        desktop = await store_desktops.get_desktop(db, first.id)
        return desktop if desktop is not None and desktop.state is not S.IN_USE else None

    after = await until(logged_off, "Alice is logged off after the warning's wait")
    assert datetime.now(UTC) >= deadline
    assert after.assigned_user == alice  # persistent: still hers
    forced = await db.fetchrow(
        "SELECT * FROM audit_events WHERE action = 'desktop.forced_logoff' AND resource_id = $1",
        str(first.id),
    )
    assert forced is not None
    assert forced["actor"] == "system:reconciler"
    assert (
        await db.fetchval(
            "SELECT count(*) FROM desktop_notices WHERE desktop_id = $1 AND cleared_at IS NULL",
            first.id,
        )
        == 0
    )

    # Drained, it is powered off as the phase's idle action says, and stays assigned.
    async def powered_off() -> Desktop | None:
        await reconciler.reconcile_now(pool.id, no_fence)
        await run_power_offs(db, run_job)
        desktop = await store_desktops.get_desktop(db, first.id)
        return desktop if desktop is not None and desktop.state is S.POWERED_OFF else None

    rested = await until(powered_off, "Alice's desktop is powered off")
    assert rested.assigned_user == alice
    [mine] = await notices.held_desktops(runtime, alice)
    assert (mine.desktop.id, mine.notice) == (first.id, None)
    assert [d.state for d in await desktops(db, pool)] == [S.POWERED_OFF, S.POWERED_OFF]


async def test_a_user_who_reconnects_before_the_deadline_is_not_logged_off(
    db: asyncpg.Connection,
    runtime: Runtime,
    held_by_alice: tuple[Pool, Desktop, str],
    reconciler: PoolReconcilerService,
) -> None:
    pool, desktop, alice = held_by_alice
    long_wait = replace(OFF_PEAK, logoff=Logoff(wait_seconds=3600, message="Closing"))
    schedule_id = await off_peak_all_week(db, long_wait)
    await db.execute("UPDATE pools SET schedule_id = $2 WHERE id = $1", pool.id, schedule_id)

    await reconciler.reconcile_now(pool.id, no_fence)
    [held] = await notices.held_desktops(runtime, alice)
    assert held.notice is not None
    first = held.notice

    # She opens a connection again: the warning is withdrawn and she stays logged on.
    await store_desktops.apply_event(db, desktop.id, SessionOpened(), pool=pool)
    await reconciler.reconcile_now(pool.id, no_fence)
    [back] = await notices.held_desktops(runtime, alice)
    assert back.notice is None
    assert back.desktop.state is S.IN_USE
    cleared = await db.fetchval("SELECT cleared_at FROM desktop_notices WHERE id = $1", first.id)
    assert cleared is not None

    # She disconnects again while the phase is in force: a fresh warning, a fresh wait.
    await store_desktops.apply_event(db, desktop.id, SessionClosed(), pool=pool)
    await reconciler.reconcile_now(pool.id, no_fence)
    [again] = await notices.held_desktops(runtime, alice)
    assert again.notice is not None
    assert again.notice.id != first.id
    assert again.notice.ends_at > first.ends_at
    assert (
        await db.fetchval(
            "SELECT count(*) FROM audit_events WHERE action = 'desktop.forced_logoff' "
            "AND resource_id = $1",
            str(desktop.id),
        )
        == 0
    )


async def test_an_idle_connected_session_is_warned_and_its_connection_closed_for_a_logoff(
    db: asyncpg.Connection,
    runtime: Runtime,
    held_by_alice: tuple[Pool, Desktop, str],
    reconciler: PoolReconcilerService,
) -> None:
    pool, desktop, alice = held_by_alice
    await store_desktops.apply_event(db, desktop.id, SessionOpened(), pool=pool)
    tunnel = await session_store.insert_session(
        db,
        user_id=uuid.UUID(alice),
        desktop_id=desktop.id,
        pool_id=pool.id,
        desktop_name=desktop.name,
        protocol="vnc",
        gateway_id="gateway-test",
    )
    # Her last input was longer ago than IDLE_AFTER.
    await db.execute(
        "UPDATE desktop_sessions SET last_activity_at = now() - $2::interval WHERE id = $1",
        tunnel.id,
        IDLE_AFTER + timedelta(minutes=1),
    )
    idle = replace(OFF_PEAK, logoff=Logoff(scope=LogoffScope.IDLE, wait_seconds=0))
    await db.execute(
        "UPDATE pools SET schedule_id = $2 WHERE id = $1",
        pool.id,
        await off_peak_all_week(db, idle),
    )

    await reconciler.reconcile_now(pool.id, no_fence)  # warned, due at once
    [held] = await notices.held_desktops(runtime, alice)
    assert held.notice is not None
    await reconciler.reconcile_now(pool.id, no_fence)  # logged off: her tunnel asked to close
    closing = await session_store.get_session(db, tunnel.id)
    assert closing is not None
    assert closing.disconnect_requested_at is not None
    assert closing.disconnect_reason == "user_logoff"  # its end logs her off
    # Until her gateway closes the tunnel, later passes neither warn nor log her off again.
    await reconciler.reconcile_now(pool.id, no_fence)
    [left] = await notices.held_desktops(runtime, alice)
    assert left.notice is None
    counts = await db.fetchrow(
        """SELECT count(*) FILTER (WHERE action = 'desktop.notice') AS warned,
                  count(*) FILTER (WHERE action = 'desktop.forced_logoff') AS forced
             FROM audit_events WHERE resource_id = $1""",
        str(desktop.id),
    )
    assert (counts["warned"], counts["forced"]) == (1, 1)
