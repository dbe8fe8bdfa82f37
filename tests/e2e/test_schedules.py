"""Capacity and power schedules end to end, with real ``deskpool run`` processes and the simulator.

One api process, three workers and a gateway (in front of the desktop daemon simulator) share a
database of this module's own and a simulated cluster.
Through the REST API an administrator creates a schedule whose phase in force now asks for 3
ready desktops and a pool (``min_size`` 0, ``max_size`` 5) that references it:

1. the pool converges to 3 ready desktops; a worker is SIGKILLed while it clones one of them
   (mid-ramp), and the other worker finishes: exactly 3 desktops, one VM each;
2. a user opens a desktop; the administrator adds an exception for today with an off-peak
   phase of its own (``min_ready`` 0, ``idle: power_off``): the two free desktops are powered
   off (their VMs stopped) and the one in use is left alone; once its user logs off, it is
   refreshed and powered off too;
3. the pool's capacity shows the phases planned and the samples the reconciler recorded, with
   powered-off desktops counted;
4. start on connect: with every desktop powered off, the user opens the pool and gets 202 with
   a pending connection (never a 503), the desktop reserved to him; the worker powering it on
   is SIGKILLed while it waits for the guest agent, another finishes the job and hands the
   desktop to him; the connection that follows opens through the gateway to the daemon's
   first frame, and the logon records every phase from asked to first frame, powered_on
   included, with no failure in between.

Every wait is for a condition read from the database or the API.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import aiohttp
import asyncpg
import pytest
from tests.e2e.test_rollouts import ADMIN, hands, wait
from tests.support.e2e import (
    DeploymentEnviron,
)

from deskpool.clusters.repository import get_cluster
from deskpool.runtime import Runtime
from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.processes import DeskpoolProcess, listening, running
from deskpool.testing.tunnels import WebSocketTunnelClient
from deskpool_driver_api import PowerState
from deskpool_driver_simulator import SimulatorDriver

USER = "schedule-user"

#: A clone takes 0.6 s: long enough to kill a worker in the middle of one.
SIMULATOR_OPTIONS = {
    "clone_seconds": 0.6,
    "boot_seconds": 0.05,
    "agent_seconds": 0.05,
    "oobe_seconds": 0.05,
    "shutdown_seconds": 0.05,
    "templates": [{"name": "ubuntu-22.04"}],
}
EVERY_DAY = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]

pytestmark = pytest.mark.slow

__all__ = ["hands"]


@pytest.fixture
def environ(gateway_environ: DeploymentEnviron) -> dict[str, str]:
    """The environment every process of the test shares."""
    return gateway_environ(ADMIN, POOL_FAILURE_BACKOFF="1s", WORKER_LEASE_DURATION="2s")


@pytest.fixture
async def processes(environ: dict[str, str]) -> AsyncIterator[dict[str, DeskpoolProcess]]:
    """The api, three workers (two are killed on the way) and a gateway."""
    started = {
        "api": DeskpoolProcess(["api"], environ),
        "worker-1": DeskpoolProcess(["worker"], environ),
        "worker-2": DeskpoolProcess(["worker"], environ),
        "worker-3": DeskpoolProcess(["worker"], environ),
        "gateway": listening(["gateway"], environ, "GATEWAY_ADDR"),
    }
    async with running(started) as processes:
        yield processes


def phase(name: str, min_ready: int, idle: str = "keep") -> dict[str, Any]:
    return {
        "name": name,
        "days": EVERY_DAY,
        "start": "00:00",
        "min_ready": min_ready,
        "spare": 0,
        "idle": idle,
    }


Call = Callable[..., Awaitable[Any]]


def caller(http: aiohttp.ClientSession, api: str) -> Call:
    """``await call(method, path, headers, **kw)``: the API's answer, asserted successful."""

    async def call(method: str, path: str, headers: dict[str, str], **kw: Any) -> Any:
        async with http.request(method, f"{api}{path}", headers=headers, **kw) as response:
            body = await response.json() if response.status != 204 else None
            assert response.status < 300, (method, path, response.status, body)
            return body

    return call


async def simulated_cluster(call: Call, admin: dict[str, str], name: str) -> Any:
    """A simulated cluster ``name`` with :data:`SIMULATOR_OPTIONS`, created through the API."""
    return await call(
        "POST",
        "/clusters",
        admin,
        json={
            "name": name,
            "driver": "simulator",
            "endpoint": f"simulator://{name}",
            "options": SIMULATOR_OPTIONS,
        },
    )


async def scheduled_pool(
    call: Call, admin: dict[str, str], cluster_id: str, schedule_id: str, **fields: Any
) -> Any:
    """A Linux pool of the schedule, ``min_size`` and ``spare`` 0, whose policy never logs off.

    ``fields`` are the rest (``name`` and ``max_size`` at least); its desktops are ``sc-01``...
    unless ``naming_pattern`` says otherwise.
    """
    body = {
        "cluster_id": cluster_id,
        "template": "ubuntu-22.04",
        "kind": "non_persistent",
        "os_type": "linux",
        "min_size": 0,
        "spare": 0,
        "naming_pattern": "sc-{n:02}",
        "schedule_id": schedule_id,
        "session_policy": {"after_disconnect": "never"},
        **fields,
    }
    return await call("POST", "/pools", admin, json=body)


def closed_today(weekly: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """``weekly`` with the exception *closed today* (yesterday to tomorrow) of ``settings``."""
    today = datetime.now(UTC).date()
    exception = {
        "name": "closed today",
        "first": (today - timedelta(days=1)).isoformat(),
        "last": (today + timedelta(days=1)).isoformat(),
        "settings": settings,
    }
    return {**weekly, "exceptions": [exception]}


async def test_a_schedule_ramps_a_pool_up_powers_idle_desktops_off_and_loses_nothing(
    processes: dict[str, DeskpoolProcess],
    identity_provider: TestIdentityProvider,
    db: asyncpg.Connection,
    hands: Runtime,
) -> None:
    api = f"{processes['api'].url('api')}/api/v1"
    admin = {"Authorization": f"Bearer {identity_provider.issue_token(ADMIN)}"}
    user = {"Authorization": f"Bearer {identity_provider.issue_token(USER)}"}
    async with aiohttp.ClientSession() as http:
        call = caller(http, api)
        cluster = await simulated_cluster(call, admin, "e2e-schedules")
        weekly = {"name": "e2e", "time_zone": "UTC", "phases": [phase("working day", 3)]}
        schedule = await call("POST", "/schedules", admin, json=weekly)
        assert schedule["in_force"]["phase"] == "working day"
        pool = await scheduled_pool(
            call, admin, cluster["id"], schedule["id"], name="e2e-schedules", max_size=5
        )
        pool_id = uuid.UUID(pool["id"])
        me = await call("GET", "/me", user)
        await call(
            "POST",
            f"/pools/{pool_id}/entitlements",
            admin,
            json={"subject_type": "user", "subject_id": me["id"]},
        )
        record = await get_cluster(hands.db, uuid.UUID(cluster["id"]))
        assert record is not None
        simulator = cast(SimulatorDriver, await hands.drivers.driver_for(record))

        async def states() -> list[str]:
            rows = await db.fetch(
                "SELECT state FROM desktops WHERE pool_id = $1 ORDER BY name", pool_id
            )
            return [row["state"] for row in rows]

        # 1. The ramp: a worker dies while it clones a desktop.
        async def cloning_worker() -> str | None:
            job = await db.fetchrow(
                """SELECT worker, resource_id FROM jobs
                    WHERE kind = 'desktop.provision' AND state = 'running'"""
            )
            if job is None:
                return None
            vms = [
                vm for vm in await simulator.list_owned_vms() if vm.desktop_id == job["resource_id"]
            ]
            return str(job["worker"]) if any(vm.busy for vm in vms) else None

        worker_id = await wait(cloning_worker, "a worker clones a desktop", seconds=60)
        [victim] = [p for p in processes.values() if p.pid == int(worker_id.split(":")[1])]
        victim.kill()

        async def three_ready() -> bool:
            return await states() == ["ready"] * 3

        await wait(three_ready, "the pool converges to 3 ready desktops", seconds=120)
        owned = await simulator.list_owned_vms()
        rows = await db.fetch("SELECT id, vm_id FROM desktops WHERE pool_id = $1", pool_id)
        assert sorted(str(vm.desktop_id) for vm in owned) == sorted(str(r["id"]) for r in rows)
        assert len(owned) == 3

        # 2. A user holds one; an exception for today powers the idle ones off.
        held = await call("POST", f"/me/pools/{pool_id}/desktop", user)
        off_peak = {"min_ready": 0, "spare": 0, "idle": "power_off"}
        closed = closed_today(weekly, off_peak)
        changed = await call("PUT", f"/schedules/{schedule['id']}", admin, json=closed)
        assert changed["in_force"]["exception"] == "closed today"

        async def stopped_vms() -> int:
            return sum(
                vm.power_state is PowerState.STOPPED for vm in await simulator.list_owned_vms()
            )

        async def idle_powered_off() -> bool:
            return sorted(await states()) == ["in_use", "powered_off", "powered_off"] and (
                await stopped_vms() == 2
            )

        await wait(idle_powered_off, "the idle desktops are powered off", seconds=90)
        row = await db.fetchrow("SELECT state FROM desktops WHERE id = $1", uuid.UUID(held["id"]))
        assert row is not None
        assert row["state"] == "in_use"

        await call("POST", f"/me/desktops/{held['id']}/logoff", user)

        async def all_powered_off() -> bool:
            return await states() == ["powered_off"] * 3 and await stopped_vms() == 3

        await wait(all_powered_off, "the released desktop is powered off too", seconds=90)

        # 3. The capacity: planned phases and the reconciler's samples.
        capacity = await call("GET", f"/pools/{pool_id}/capacity", admin)
        planned = [(p["phase"], p["min_ready"]) for p in capacity["planned"]]
        assert ("closed today", 0) in planned, planned
        assert ("working day", 3) in planned, planned  # before and after the exception
        assert capacity["actual"], capacity
        latest = capacity["actual"][-1]
        assert latest["phase"] == "closed today"

        async def sampled_off() -> bool:
            shown = await call("GET", f"/pools/{pool_id}/capacity", admin)
            return bool(shown["actual"]) and shown["actual"][-1]["powered_off"] == 3

        await wait(sampled_off, "the samples count the powered-off desktops", seconds=30)
        audited = await db.fetch(
            """SELECT resource_id, details->>'job_kind' AS job FROM audit_events
                WHERE action = 'reconcile.power_off_desktop' AND resource_id = ANY($1::text[])""",
            [str(r["id"]) for r in rows],
        )
        assert {row["resource_id"] for row in audited} == {str(r["id"]) for r in rows}
        assert {row["job"] for row in audited} == {"desktop.power_off"}

        # 4. Start on connect: everything is powered off, the user opens the pool. The guests'
        # agents stay silent until the worker powering his desktop on has been killed.
        await simulator.admin.inject(agent_never_answers="sc-*")
        async with http.post(f"{api}/me/pools/{pool_id}/desktop", headers=user) as response:
            pending = await response.json()
            assert response.status == 202, pending  # a pending connection, not a 503
        started_id = uuid.UUID(pending["id"])
        row = await db.fetchrow("SELECT * FROM desktops WHERE id = $1", started_id)
        assert row is not None
        assert str(row["assigned_user"]) == me["id"]  # reserved to him in the same transaction

        async def powering_worker() -> str | None:
            job = await db.fetchrow(
                """SELECT j.worker FROM jobs j JOIN desktops d ON d.id::text = j.resource_id
                    WHERE j.kind = 'desktop.provision' AND j.state = 'running'
                      AND d.id = $1 AND d.state = 'waiting_for_agent'""",
                started_id,
            )
            return None if job is None else str(job["worker"])

        worker_id = await wait(powering_worker, "a worker powers the desktop on", seconds=60)
        [victim] = [p for p in processes.values() if p.pid == int(worker_id.split(":")[1])]
        victim.kill()
        await simulator.admin.clear_faults()

        async def handed_over() -> bool:
            row = await db.fetchrow(
                "SELECT state, assigned_user FROM desktops WHERE id = $1", started_id
            )
            return row is not None and (row["state"], str(row["assigned_user"])) == (
                "in_use",
                me["id"],
            )

        await wait(handed_over, "another worker hands the started desktop to the user", 120)
        opened = await call("POST", f"/me/desktops/{started_id}/connection", user)
        gateway_url = f"{processes['gateway'].url('gateway', 'ws')}/websocket-tunnel"
        client = await WebSocketTunnelClient.connect(
            http, gateway_url, {"token": opened["connection"]["token"]}
        )
        drawn = await client.until("sync", within=30)
        assert any(instruction.opcode in ("img", "png") for instruction in drawn)
        logon = await db.fetchrow(
            "SELECT * FROM logons WHERE id = $1", uuid.UUID(pending["starting"]["logon_id"])
        )
        assert logon is not None

        async def first_frame_recorded() -> bool:
            found = await db.fetchrow(
                "SELECT first_frame_at FROM logons WHERE id = $1", logon["id"]
            )
            return found is not None and found["first_frame_at"] is not None

        await wait(first_frame_recorded, "the logon records the first frame", seconds=30)
        logon = await db.fetchrow("SELECT * FROM logons WHERE id = $1", logon["id"])
        assert logon is not None
        phases = ["asked", "allocated", "powered_on", "guest_ready", "token_issued"]
        phases += ["tunnel_opened", "daemon_connected", "first_frame"]
        assert [phase for phase in phases if logon[f"{phase}_at"] is None] == []
        assert logon["failed_at"] is None
        assert logon["desktop_id"] == started_id
        failed = await db.fetchval(
            "SELECT count(*) FROM logons WHERE user_id = $1 AND failed_at IS NOT NULL",
            uuid.UUID(me["id"]),
        )
        assert failed == 0  # no error in between
        owned = [vm for vm in await simulator.list_owned_vms() if vm.desktop_id == str(started_id)]
        assert len(owned) == 1  # the killed worker's attempt left no second VM
        await client.ws.close()
