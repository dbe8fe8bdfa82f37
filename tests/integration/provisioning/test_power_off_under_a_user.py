"""An administrator's power-off of a desktop a user holds follows the system's own rules.

Issue 37: the power-off job shut the VM down and left the desktop ``in_use``: the counters said
a user was on it, and his Open failed ("vm_not_running ... try again shortly") for as long as
it was watched. Now the VM's end is his session's end: he is logged off as when he logs off
himself (a non-persistent desktop is rebuilt, a persistent one stays his and rests powered off,
started again by his open).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import asyncpg
from tests.support.provisioning import MakePool, RunJob, Simulator, add_desktop

from deskpool.desktops import store as store_desktops
from deskpool.desktops.jobs import POWER_OFF, PROVISION, REBUILD, enqueue_desktop_job
from deskpool.desktops.states import Allocated
from deskpool.drivers import PowerState
from deskpool.pools.model import Desktop, DesktopState, PoolKind

S = DesktopState


async def _user(db: asyncpg.Connection) -> str:
    user: uuid.UUID = await db.fetchval(
        "INSERT INTO users (issuer, subject) VALUES ('https://issuer.test', $1) RETURNING id",
        f"user-{uuid.uuid4()}",
    )
    return str(user)


async def _held(
    db: asyncpg.Connection, run_job: RunJob, make_pool: MakePool, kind: PoolKind
) -> tuple[Desktop, str]:
    """A ready desktop of a new pool of ``kind`` that a new user is logged on to, unconnected."""
    pool = await make_pool(kind=kind)
    desktop = await add_desktop(db, pool)
    await run_job((await enqueue_desktop_job(db, PROVISION, desktop)).id)
    user = await _user(db)
    held = await store_desktops.apply_event(db, desktop.id, Allocated(user), datetime.now(UTC))
    assert held.state is S.IN_USE
    assert not held.in_session
    return held, user


async def _actions(db: asyncpg.Connection, desktop: Desktop) -> list[str]:
    rows = await db.fetch(
        "SELECT action FROM audit_events WHERE resource_id = $1 ORDER BY id", str(desktop.id)
    )
    return [row["action"] for row in rows]


async def test_a_non_persistent_desktop_powered_off_under_its_user_is_logged_off_and_rebuilt(
    db: asyncpg.Connection, make_pool: MakePool, run_job: RunJob, simulator: Simulator
) -> None:
    held, _ = await _held(db, run_job, make_pool, PoolKind.NON_PERSISTENT)
    await run_job((await enqueue_desktop_job(db, POWER_OFF, held)).id)

    assert held.vm_id is not None
    assert await simulator.driver.power_state(held.vm_id) is PowerState.STOPPED
    after = await store_desktops.get_desktop(db, held.id)
    assert after is not None
    assert (after.state, after.assigned_user, after.in_session) == (S.REFRESHING, None, False)
    assert await db.fetchval(
        "SELECT count(*) FROM jobs WHERE kind = $1 AND resource_id = $2 AND state = 'queued'",
        REBUILD,
        str(held.id),
    )
    assert {"desktop.forced_logoff", "desktop.logoff"} <= set(await _actions(db, held))
    # The rebuild gives the pool a ready desktop again.
    job = await db.fetchval(
        "SELECT id FROM jobs WHERE kind = $1 AND resource_id = $2", REBUILD, str(held.id)
    )
    await run_job(job)
    rebuilt = await store_desktops.get_desktop(db, held.id)
    assert rebuilt is not None
    assert rebuilt.is_available


async def test_a_persistent_desktop_powered_off_under_its_owner_stays_his_powered_off(
    db: asyncpg.Connection, make_pool: MakePool, run_job: RunJob, simulator: Simulator
) -> None:
    held, owner = await _held(db, run_job, make_pool, PoolKind.PERSISTENT)
    await run_job((await enqueue_desktop_job(db, POWER_OFF, held)).id)

    after = await store_desktops.get_desktop(db, held.id)
    assert after is not None
    assert (after.state, after.assigned_user) == (S.POWERED_OFF, owner)
    assert {"desktop.logoff", "desktop.powered_off"} <= set(await _actions(db, held))
