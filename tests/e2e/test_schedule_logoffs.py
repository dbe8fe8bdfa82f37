"""A phase's warnings and forced log-offs end to end: ``deskpool run`` processes, the simulator.

The deployment of tests/e2e/test_schedules.py (an api, three workers, a gateway) shares a
database of this module's own and a simulated cluster.
A persistent pool's schedule keeps 2 desktops ready; Alice holds one (logged on, no connection
open: disconnected), Bob owns the other and logged off. The administrator adds an exception
for today with an off-peak phase of its own (``min_ready`` 0, ``idle: power_off``, and a
``logoff`` of disconnected sessions after 3 s with a message):

1. Alice's ``GET /api/v1/me/desktops`` shows the notice (reason ``capacity_schedule``, the
   message, the deadline); Bob's desktop, with no session, is powered off (its VM stopped) and
   stays his;
2. Alice is logged off by the reconciler once the deadline has passed (audited
   ``desktop.forced_logoff``, once), her notice is gone, and her desktop, drained, is powered
   off and stays hers.

Every wait is for a condition read from the database or the API.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, cast

import aiohttp
import asyncpg
import pytest
from tests.e2e.test_rollouts import ADMIN, hands, wait
from tests.e2e.test_schedules import (
    EVERY_DAY,
    caller,
    closed_today,
    environ,
    processes,
    scheduled_pool,
    simulated_cluster,
)

from deskpool.clusters.repository import get_cluster
from deskpool.runtime import Runtime
from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.processes import DeskpoolProcess
from deskpool_driver_api import PowerState
from deskpool_driver_simulator import SimulatorDriver

ALICE, BOB = "logoff-alice", "logoff-bob"
MESSAGE = "The office closes: your session ends soon."

pytestmark = pytest.mark.slow

__all__ = ["environ", "hands", "processes"]


async def test_a_disconnected_session_is_warned_then_logged_off_and_its_desktop_powered_off(
    processes: dict[str, DeskpoolProcess],
    identity_provider: TestIdentityProvider,
    db: asyncpg.Connection,
    hands: Runtime,
) -> None:
    api = f"{processes['api'].url('api')}/api/v1"
    admin = {"Authorization": f"Bearer {identity_provider.issue_token(ADMIN)}"}
    alice = {"Authorization": f"Bearer {identity_provider.issue_token(ALICE)}"}
    bob = {"Authorization": f"Bearer {identity_provider.issue_token(BOB)}"}
    async with aiohttp.ClientSession() as http:
        call = caller(http, api)
        cluster = await simulated_cluster(call, admin, "e2e-logoffs")
        day = {
            "name": "day",
            "days": EVERY_DAY,
            "start": "00:00",
            "min_ready": 2,
            "spare": 0,
            "idle": "keep",
        }
        weekly = {"name": "e2e-logoffs", "time_zone": "UTC", "phases": [day]}
        schedule = await call("POST", "/schedules", admin, json=weekly)
        # The pool's own policy never logs a disconnected user off: the phase does.
        pool = await scheduled_pool(
            call,
            admin,
            cluster["id"],
            schedule["id"],
            name="e2e-logoffs",
            kind="persistent",
            max_size=3,
            naming_pattern="lo-{n:02}",
        )
        pool_id = uuid.UUID(pool["id"])
        ids = {}
        for name, headers in ((ALICE, alice), (BOB, bob)):
            ids[name] = (await call("GET", "/me", headers))["id"]
            await call(
                "POST",
                f"/pools/{pool_id}/entitlements",
                admin,
                json={"subject_type": "user", "subject_id": ids[name]},
            )
        record = await get_cluster(hands.db, uuid.UUID(cluster["id"]))
        assert record is not None
        simulator = cast(SimulatorDriver, await hands.drivers.driver_for(record))

        async def desktop(desktop_id: str) -> asyncpg.Record | None:
            return await db.fetchrow("SELECT * FROM desktops WHERE id = $1", uuid.UUID(desktop_id))

        async def two_ready() -> bool:
            rows = await db.fetch("SELECT state FROM desktops WHERE pool_id = $1", pool_id)
            return [row["state"] for row in rows] == ["ready"] * 2

        await wait(two_ready, "the pool has 2 ready desktops", seconds=120)
        # Alice is logged on with no connection open; Bob owns his desktop and logged off.
        held = await call("POST", f"/me/pools/{pool_id}/desktop", alice)
        owned = await call("POST", f"/me/pools/{pool_id}/desktop", bob)
        await call("POST", f"/me/desktops/{owned['id']}/logoff", bob)

        async def bob_logged_off() -> bool:
            row = await desktop(owned["id"])
            return row is not None and row["state"] == "ready"

        await wait(bob_logged_off, "Bob is logged off and keeps his desktop")

        off_peak = {
            "min_ready": 0,
            "spare": 0,
            "idle": "power_off",
            "logoff": {"scope": "disconnected", "wait_seconds": 3, "message": MESSAGE},
        }
        closed = closed_today(weekly, off_peak)
        changed = await call("PUT", f"/schedules/{schedule['id']}", admin, json=closed)
        assert changed["in_force"]["exception"] == "closed today"

        # 1. Alice is warned in /me/desktops; Bob's idle desktop is powered off and his.
        async def warned() -> dict[str, Any] | None:
            mine = await call("GET", "/me/desktops", alice)
            [item] = [item for item in mine["items"] if item["id"] == held["id"]]
            notice: dict[str, Any] | None = item["notice"]
            return notice

        notice = await wait(warned, "Alice's desktop view shows the schedule's warning")
        assert (notice["reason"], notice["message"]) == ("capacity_schedule", MESSAGE)
        deadline = datetime.fromisoformat(notice["ends_at"])

        async def vm_stopped(desktop_id: str) -> bool:
            return any(
                vm.power_state is PowerState.STOPPED and str(vm.desktop_id) == desktop_id
                for vm in await simulator.list_owned_vms()
            )

        async def bob_powered_off() -> bool:
            row = await desktop(owned["id"])
            return (
                row is not None
                and row["state"] == "powered_off"
                and str(row["assigned_user"]) == ids[BOB]
                and await vm_stopped(owned["id"])
            )

        await wait(bob_powered_off, "Bob's desktop, with no session, is powered off", 90)

        # 2. After the wait Alice is logged off, and her desktop drains and is powered off.
        async def alice_powered_off() -> bool:
            row = await desktop(held["id"])
            return (
                row is not None
                and row["state"] == "powered_off"
                and str(row["assigned_user"]) == ids[ALICE]
                and await vm_stopped(held["id"])
            )

        await wait(alice_powered_off, "Alice is logged off and her desktop powered off", 120)
        forced = await db.fetch(
            """SELECT occurred_at, actor FROM audit_events
                WHERE action = 'desktop.forced_logoff' AND resource_id = $1""",
            held["id"],
        )
        assert [row["actor"] for row in forced] == ["system:reconciler"]
        assert forced[0]["occurred_at"] >= deadline  # not before the deadline she was shown
        warnings = await db.fetchval(
            """SELECT count(*) FROM audit_events
                WHERE action = 'desktop.notice' AND resource_id = $1""",
            held["id"],
        )
        assert warnings == 1
        mine = await call("GET", "/me/desktops", alice)
        [item] = [item for item in mine["items"] if item["id"] == held["id"]]
        assert item["notice"] is None
        assert item["state"] == "powered_off"
