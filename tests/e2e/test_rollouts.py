"""Image rollouts end to end, with real ``deskpool run`` processes and the simulator.

One api process and two workers share a database of this module's own and a simulated
cluster (its state in Redis). Through the REST API an administrator creates a non-persistent
pool of 6 desktops (spare 2, so ``min_ready`` is 2) and two users each open one. Then:

1. a rollout to ``ubuntu-24.04`` with ``wait_for_logoff`` and batches of 2: the canary is
   rebuilt first and alone, and ready on the new template before anything else is touched;
   the four free desktops follow; the two in use are left alone until their users log off;
   then every desktop runs the new template and the rollout has succeeded;
2. the users open desktops again, and a rollout back to ``ubuntu-22.04`` (a rollback, from the
   image history) with ``force_logoff`` and a 5 s warning: the warning reaches the users' live
   events and ``GET /me/desktops``; they are logged off no sooner than 5 s after it. A worker
   is SIGKILLed while it rebuilds one of the rollout's desktops: the other worker takes the
   job over, and the rollout loses nothing (every desktop ends on ``ubuntu-22.04``, one VM
   each);
3. with every clone failing (the simulator's ``clone_fails_for``), a rollout's canary fails:
   the rollout stops in ``failed`` with the reason, the pool keeps its template, and once the
   fault is gone the pool serves the old template on every desktop.

Throughout, a sampler reads the number of ready, free, clean desktops: it never falls below
``min_ready``. Every wait is for a condition read from the database or the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any, cast

import aiohttp
import asyncpg
import pytest
from tests.secret_leak_guard import LeakGuard
from tests.support.e2e import (
    DeploymentEnviron,
)

from deskpool.clusters.repository import get_cluster
from deskpool.runtime import Runtime
from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.processes import ANY_PORT, DeskpoolProcess, running, until
from deskpool.testing.pytest_plugin import connected, opened_runtime
from deskpool_driver_simulator import SimulatorDriver

ADMIN = "rollout-admin"
USERS = ("rollout-user-a", "rollout-user-b")
OLD, NEW = "9000", "9001"
PUBLIC_URL = "wss://desktops.e2e.test/websocket-tunnel"

#: A clone takes 0.6 s: long enough to kill a worker in the middle of one.
SIMULATOR_OPTIONS = {
    "clone_seconds": 0.6,
    "boot_seconds": 0.05,
    "agent_seconds": 0.05,
    "oobe_seconds": 0.05,
    "shutdown_seconds": 0.05,
    "templates": [{"name": "ubuntu-22.04"}, {"name": "ubuntu-24.04"}],
}

pytestmark = pytest.mark.slow


@pytest.fixture
def environ(quick_deployment: DeploymentEnviron, leak_guard: LeakGuard) -> dict[str, str]:
    """The environment every process of the test shares."""
    return quick_deployment(
        ADMIN,
        API_ADDR=ANY_PORT,
        SECRETS_MASTER_KEY=leak_guard.master_key(),
        GATEWAY_PUBLIC_WS_URL=PUBLIC_URL,
        POOL_FAILURE_BACKOFF="1s",
        WORKER_LEASE_DURATION="2s",
    )


@pytest.fixture
async def processes(environ: dict[str, str]) -> AsyncIterator[dict[str, DeskpoolProcess]]:
    """The api and two workers; stopped (or killed) at the end."""
    started = {
        "api": DeskpoolProcess(["api"], environ),
        "worker-1": DeskpoolProcess(["worker"], environ),
        "worker-2": DeskpoolProcess(["worker"], environ),
    }
    async with running(started) as processes:
        yield processes


@pytest.fixture
async def hands(environ: dict[str, str]) -> AsyncIterator[Runtime]:
    """A runtime of the test's own, to reach the simulated cluster behind deskpool's back."""
    async with opened_runtime(environ) as runtime:
        yield runtime


async def wait(check: Any, what: str, seconds: float = 90) -> Any:
    """:func:`until` at a pace the API's rate limit allows (the checks read the API)."""
    return await until(check, what, seconds, every=0.2)


class Sampler:
    """Reads the pool's ready, free, clean desktops every few milliseconds; keeps the least."""

    def __init__(self, url: str, pool_id: uuid.UUID) -> None:
        self.url = url
        self.pool_id = pool_id
        self.least: int | None = None
        self.samples = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        async with connected(self.url) as connection:
            while True:
                free = await connection.fetchval(
                    """SELECT count(*) FROM desktops
                        WHERE pool_id = $1 AND state = 'ready' AND assigned_user IS NULL
                          AND NOT in_session AND NOT used_since_refresh""",
                    self.pool_id,
                )
                self.samples += 1
                self.least = free if self.least is None else min(self.least, free)
                await asyncio.sleep(0.02)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def read_stream(response: aiohttp.ClientResponse, into: list[dict[str, Any]]) -> None:
    """Append every event of an open ``/events`` stream to ``into`` until it closes."""
    while True:
        block = (await response.content.readuntil(b"\n\n")).decode()
        for line in block.splitlines():
            if line.startswith("data: "):
                into.append(json.loads(line.removeprefix("data: ")))


async def test_rollouts_canary_first_min_ready_held_users_warned_and_nothing_lost(
    processes: dict[str, DeskpoolProcess],
    environ: dict[str, str],
    module_database_url: str,
    identity_provider: TestIdentityProvider,
    db: asyncpg.Connection,
    hands: Runtime,
) -> None:
    api = f"{processes['api'].url('api')}/api/v1"
    admin = {"Authorization": f"Bearer {identity_provider.issue_token(ADMIN)}"}
    users = [{"Authorization": f"Bearer {identity_provider.issue_token(u)}"} for u in USERS]
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(timeout=timeout) as http:

        async def call(method: str, path: str, headers: dict[str, str], **kw: Any) -> Any:
            async with http.request(method, f"{api}{path}", headers=headers, **kw) as response:
                body = await response.json()
                assert response.status < 300, (method, path, response.status, body)
                return body

        cluster = await call(
            "POST",
            "/clusters",
            admin,
            json={
                "name": "e2e-rollouts",
                "driver": "simulator",
                "endpoint": "simulator://e2e-rollouts",
                "options": SIMULATOR_OPTIONS,
            },
        )
        pool = await call(
            "POST",
            "/pools",
            admin,
            json={
                "name": "e2e-rollouts",
                "cluster_id": cluster["id"],
                "template": "ubuntu-22.04",
                "kind": "non_persistent",
                "os_type": "linux",
                "min_size": 6,
                "spare": 2,
                "max_size": 6,
                "naming_pattern": "ro-{n:02}",
                "session_policy": {"after_disconnect": "never"},
            },
        )
        pool_id = uuid.UUID(pool["id"])
        mes = [await call("GET", "/me", headers) for headers in users]
        for me in mes:
            await call(
                "POST",
                f"/pools/{pool_id}/entitlements",
                admin,
                json={"subject_type": "user", "subject_id": me["id"]},
            )
        record = await get_cluster(hands.db, uuid.UUID(cluster["id"]))
        assert record is not None
        simulator = cast(SimulatorDriver, await hands.drivers.driver_for(record))

        async def desktops() -> list[asyncpg.Record]:
            return list(
                await db.fetch("SELECT * FROM desktops WHERE pool_id = $1 ORDER BY name", pool_id)
            )

        async def all_ready_on(template: str, count: int = 6) -> bool:
            rows = await desktops()
            return len(rows) == count and all(
                row["state"] in ("ready", "in_use") and row["template"] == template for row in rows
            )

        async def rollout(rollout_id: str) -> Any:
            return await call("GET", f"/pools/{pool_id}/rollouts/{rollout_id}", admin)

        async def in_state(rollout_id: str, *states: str) -> Any:
            shown = await rollout(rollout_id)
            return shown if shown["state"] in states else None

        async def open_desktops() -> list[str]:
            opened = [await call("POST", f"/me/pools/{pool_id}/desktop", h) for h in users]
            return [item["id"] for item in opened]

        await wait(lambda: all_ready_on(OLD), "the pool has 6 ready desktops", seconds=60)
        held = await open_desktops()
        sampler = Sampler(module_database_url, pool_id)
        sampler.start()

        # 1. wait_for_logoff: canary first, the free desktops next, users waited for.
        progress: list[dict[str, Any]] = []
        admin_stream = await http.get(f"{api}/events", headers=admin)
        assert admin_stream.status == 200
        following = asyncio.create_task(read_stream(admin_stream, progress))
        first = await call(
            "POST",
            f"/pools/{pool_id}/rollouts",
            admin,
            json={"template": "ubuntu-24.04", "batch_size": 2, "in_use": "wait_for_logoff"},
        )
        assert (first["min_ready"], first["canary"]) == (2, 1)

        async def users_waited_for() -> Any:
            shown = await rollout(first["id"])
            waiting = [d for d in shown["desktops"] if d["state"] == "waiting_for_logoff"]
            return shown if len(waiting) == 2 and shown["counts"]["on_new_template"] == 4 else None

        shown = await wait(users_waited_for, "the free desktops are replaced", seconds=90)
        assert shown["state"] == "rolling"
        assert sorted(d["desktop_id"] for d in shown["desktops"] if d["role"] == "canary") != []
        rows = {str(row["id"]): row for row in await desktops()}
        for desktop_id in held:  # not replaced before its user logs off
            assert (rows[desktop_id]["state"], rows[desktop_id]["template"]) == ("in_use", OLD)
        for headers, desktop_id in zip(users, held, strict=True):
            await call("POST", f"/me/desktops/{desktop_id}/logoff", headers)
        done = await wait(
            lambda: in_state(first["id"], "succeeded"), "the first rollout succeeds", seconds=90
        )
        assert done["counts"] == {
            "total": 6,
            "on_new_template": 6,
            "replacing": 0,
            "waiting_for_logoff": 0,
            "failed": 0,
            "percent": 100,
        }
        assert await all_ready_on(NEW)
        await check_canary_first(db, first["id"])

        async def announced() -> bool:
            return any(
                event["type"] == "pool.rollout"
                and event.get("rollout_id") == first["id"]
                and event.get("state") == "succeeded"
                and event.get("progress", {}).get("percent") == 100
                for event in progress
            )

        await wait(announced, "the live events carry the rollout's progress to 100 %")
        following.cancel()
        admin_stream.close()
        shown_pool = await call("GET", f"/pools/{pool_id}", admin)
        assert (shown_pool["template"], shown_pool["counts"]["by_template"]) == (NEW, {NEW: 6})

        # 2. Roll back, with force_logoff and a 5 s warning; a worker dies mid-rollout.
        await wait(lambda: all_ready_on(NEW), "every desktop is ready again")
        images = await call("GET", f"/pools/{pool_id}/images", admin)
        assert [image["template"] for image in images["items"]][:2] == [NEW, OLD]
        held = await open_desktops()
        events: list[dict[str, Any]] = []
        stream = await http.get(f"{api}/events", headers=users[1])
        assert stream.status == 200
        reader = asyncio.create_task(read_stream(stream, events))
        second = await call(
            "POST",
            f"/pools/{pool_id}/rollouts",
            admin,
            json={
                "template": OLD,
                "batch_size": 2,
                "in_use": "force_logoff",
                "warning_seconds": 5,
                "message": "Your desktop gets the new image",
            },
        )

        async def rebuilding_worker() -> tuple[str, str] | None:
            """A worker running a rollout's rebuild while its clone copies."""
            job = await db.fetchrow(
                """
                SELECT j.worker, j.resource_id FROM jobs j
                  JOIN rollout_desktops e ON e.desktop_id::text = j.resource_id
                 WHERE j.kind = 'desktop.rebuild' AND j.state = 'running'
                   AND e.rollout_id = $1::uuid
                """,
                second["id"],
            )
            if job is None:
                return None
            cloning = [
                vm for vm in await simulator.list_owned_vms() if vm.desktop_id == job["resource_id"]
            ]
            busy = any(vm.busy for vm in cloning)
            return (str(job["worker"]), str(job["resource_id"])) if busy else None

        worker_id, _ = await wait(rebuilding_worker, "a worker rebuilds a desktop", seconds=60)
        [victim] = [p for p in processes.values() if p.pid == int(worker_id.split(":")[1])]
        victim.kill()

        async def notice_seen() -> dict[str, Any] | None:
            return next((e for e in events if e["type"] == "desktop.notice"), None)

        notice = await wait(notice_seen, "the warning reaches the user's live events", 90)
        assert notice["desktop_id"] == held[1]
        assert notice["message"] == "Your desktop gets the new image"
        assert notice["reason"] == "image_rollout"
        mine = await call("GET", "/me/desktops", users[1])
        [item] = [d for d in mine["items"] if d["id"] == held[1]]
        assert item["notice"]["reason"] == "image_rollout"
        ends_at = datetime.fromisoformat(item["notice"]["ends_at"])
        rolled_back = await wait(
            lambda: in_state(second["id"], "succeeded", "failed"),
            "the second rollout ends",
            seconds=120,
        )
        assert rolled_back["state"] == "succeeded", rolled_back
        reader.cancel()
        stream.close()
        await wait(lambda: all_ready_on(OLD), "every desktop runs the old template again")
        forced = await db.fetch(
            """SELECT resource_id, occurred_at FROM audit_events
                WHERE action = 'desktop.forced_logoff' AND resource_id = ANY($1::text[])""",
            held,
        )
        assert sorted(row["resource_id"] for row in forced) == sorted(held)
        assert all(row["occurred_at"] >= ends_at for row in forced if row["resource_id"] == held[1])
        vms: dict[str, list[str]] = {}
        for vm in await simulator.list_owned_vms():
            vms.setdefault(str(vm.desktop_id), []).append(vm.id)
        assert sorted(vms) == sorted(str(row["id"]) for row in await desktops())
        assert all(len(ids) == 1 for ids in vms.values()), vms
        assert await db.fetchval("SELECT max(reclaims) FROM jobs WHERE kind = 'desktop.rebuild'"), (
            "the killed worker's job was taken over"
        )

        # 3. A failing canary stops the rollout; the old template is still served.
        await simulator.admin.inject(clone_fails_for="*")
        third = await call(
            "POST", f"/pools/{pool_id}/rollouts", admin, json={"template": "ubuntu-24.04"}
        )
        failed = await wait(
            lambda: in_state(third["id"], "failed"), "the failing canary stops the rollout", 90
        )
        assert "failed on template 9001" in failed["reason"]
        assert f"serves template {OLD} again" in failed["reason"]
        assert (await call("GET", f"/pools/{pool_id}", admin))["template"] == OLD
        await simulator.admin.clear_faults()
        await wait(
            lambda: all_ready_on(OLD), "the pool serves the old template on every desktop", 90
        )
        await sampler.stop()
        assert sampler.samples > 50
        assert sampler.least is not None
        assert sampler.least >= 2, f"only {sampler.least} ready free desktops at one point"
        await simulator.close()
    for name in ("api", "worker-1", "worker-2"):
        if processes[name] is not victim:
            assert "Traceback" not in processes[name].output, processes[name].output


async def check_canary_first(db: asyncpg.Connection, rollout_id: str) -> None:
    """The canary was rebuilt alone, and was ready before any other desktop was touched."""
    rows = await db.fetch(
        """SELECT action, resource_id, details FROM audit_events
            WHERE details->>'rollout_id' = $1 ORDER BY id""",
        rollout_id,
    )
    actions = [(row["action"], row["resource_id"]) for row in rows]
    replaced = [index for index, (action, _) in enumerate(actions) if action.endswith("replace")]
    rolling = next(i for i, (action, _) in enumerate(actions) if action == "rollout.rolling")
    assert len([index for index in replaced if index < rolling]) == 1
    canary = actions[replaced[0]][1]
    settled = [
        index
        for index, (action, desktop) in enumerate(actions)
        if action == "rollout.rollout_settle" and desktop == canary
    ]
    assert settled
    assert settled[0] < rolling < replaced[1]
