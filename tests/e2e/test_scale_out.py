"""Scale-out on one machine: two api processes, three workers and two gateways, driven together.

Every process is a real ``deskpool run`` on one PostgreSQL database (this module's own) and one
Redis. The test checks what a deployment with replicas relies on:

- pools converge with three workers, and no job runs twice at once (a recording job kind, from
  a test plugin every worker loads, notes each execution with its lease's fence);
- a permission granted through one api process is effective on the other at once (the
  effective-permission caches are invalidated for every process through Redis);
- a session opened through one api process and one gateway is disconnected through the other
  api process: the gateway holding the tunnel closes it;
- killing any one process loses nothing: a worker SIGKILLed mid-job and an api process
  SIGKILLed mid-traffic leave every job done, every desktop owned and the pool converged.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from tests.e2e.deployment_api import Api
from tests.e2e.jobrecorder import RECORDING_TABLES, recorder_site
from tests.secret_leak_guard import LeakGuard
from tests.support.e2e import (
    DeploymentEnviron,
)

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.jobs import queue
from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.processes import (
    DeskpoolProcess,
    listening,
    running,
    until,
)
from deskpool.testing.tunnels import TunnelClosed, WebSocketTunnelClient

ADMIN = "scale-admin"
USER = "scale-user"
VIEWER = "scale-viewer"
SIMULATOR_OPTIONS = {
    "clone_seconds": 0.2,
    "boot_seconds": 0.1,
    "agent_seconds": 0.1,
    "oobe_seconds": 0.1,
    "shutdown_seconds": 0.05,
}
pytestmark = pytest.mark.slow


@pytest.fixture
async def db(db: asyncpg.Connection) -> asyncpg.Connection:
    """The module's database, with the recording plugin's tables."""
    await db.execute(RECORDING_TABLES)
    return db


@pytest.fixture
def environ(
    quick_deployment: DeploymentEnviron,
    desktop_daemon: DesktopDaemonSimulator,
    leak_guard: LeakGuard,
    plugin_site: Callable[..., Path],
    db: asyncpg.Connection,
) -> dict[str, str]:
    return quick_deployment(
        ADMIN,
        PYTHONPATH=str(recorder_site(plugin_site)),
        SECRETS_MASTER_KEY=leak_guard.master_key(),
        GATEWAY_PUBLIC_WS_URL="wss://desktops.scale.test/websocket-tunnel",
        DESKTOPD_ADDRESS=desktop_daemon.address,
        WORKER_LEASE_DURATION="2s",
        WORKER_CONCURRENCY="4",
        METRICS_ADDR="",
    )


@pytest.fixture
async def processes(environ: dict[str, str]) -> AsyncIterator[dict[str, DeskpoolProcess]]:
    """api-a, api-b, worker-1..3, gateway-a, gateway-b: each its own process and port."""
    started: dict[str, DeskpoolProcess] = {}
    for name in ("api-a", "api-b"):
        started[name] = listening(["api"], environ, "API_ADDR")
    for n in (1, 2, 3):
        started[f"worker-{n}"] = DeskpoolProcess(["worker"], environ)
    for name in ("gateway-a", "gateway-b"):
        started[name] = listening(["gateway"], environ, "GATEWAY_ADDR")
    async with running(started) as processes:
        yield processes


async def test_two_apis_three_workers_two_gateways_share_the_work_and_lose_nothing(
    processes: dict[str, DeskpoolProcess],
    identity_provider: TestIdentityProvider,
    db: asyncpg.Connection,
) -> None:
    token = identity_provider.issue_token
    async with aiohttp.ClientSession() as http:
        admin_a = Api(http, processes["api-a"], token(ADMIN))
        admin_b = Api(http, processes["api-b"], token(ADMIN))
        user_a = Api(http, processes["api-a"], token(USER))
        viewer_b = Api(http, processes["api-b"], token(VIEWER))

        # Pools converge with three workers, and no job runs twice at once.
        user = await user_a("GET", "/me")
        cluster = await admin_a(
            "POST", "/clusters",
            json={"name": "scale", "driver": "simulator", "endpoint": "simulator://scale",
                  "options": SIMULATOR_OPTIONS},
        )  # fmt: skip
        pool = await admin_a(
            "POST", "/pools",
            json={"name": "scale", "cluster_id": cluster["id"], "template": "ubuntu-22.04",
                  "kind": "non_persistent", "os_type": "linux", "min_size": 6, "spare": 0,
                  "max_size": 10, "naming_pattern": "scale-{n:02}",
                  "session_policy": {"after_disconnect": "logoff_immediately"}},
        )  # fmt: skip
        pool_id = uuid.UUID(pool["id"])
        await admin_a(
            "POST", f"/pools/{pool_id}/entitlements",
            json={"subject_type": "user", "subject_id": user["id"]},
        )  # fmt: skip
        for n in range(30):
            await queue.enqueue(db, "record", {"n": n, "seconds": 0.2})

        async def ready_desktops(count: int) -> bool:
            rows = await db.fetch(
                "SELECT state, vm_id FROM desktops WHERE pool_id = $1 AND state <> 'deleted'",
                pool_id,
            )
            ready = [row for row in rows if row["state"] == "ready"]
            return len(ready) >= count

        async def jobs_done() -> bool:
            return bool(
                await db.fetchval(
                    "SELECT count(*) = 0 FROM jobs WHERE kind = 'record' "
                    "AND state IN ('queued', 'running')"
                )
            )

        await until(lambda: ready_desktops(6), "six desktops are ready", seconds=90)
        await until(jobs_done, "every recording job ran", seconds=60)
        executions = await db.fetch("SELECT job_id, fence, pid FROM job_executions")
        per_job: dict[int, list[Any]] = {}
        for row in executions:
            per_job.setdefault(row["job_id"], []).append(row)
        assert len(per_job) == 30
        assert all(len(rows) == 1 for rows in per_job.values()), "a job ran twice"
        assert len({row["pid"] for row in executions}) >= 2, "the workers did not share the work"

        # A permission granted through api-a becomes effective on api-b.
        status, _ = await viewer_b.status("GET", "/pools")
        assert status == 403
        viewer = await viewer_b("GET", "/me")
        await admin_a(
            "POST", "/grants",
            json={"subject_type": "user", "subject_id": viewer["id"], "permission": "pools:read"},
        )  # fmt: skip

        async def seen_by_api_b() -> bool:
            return (await viewer_b.status("GET", "/pools"))[0] == 200

        await until(seen_by_api_b, "api-b sees the grant made through api-a")

        # A session opened through api-a and gateway-a is disconnected through api-b.
        opened = await user_a("POST", f"/me/pools/{pool_id}/desktop")
        gateway_a = f"{processes['gateway-a'].url('gateway', 'ws')}/websocket-tunnel"
        client = await WebSocketTunnelClient.connect(
            http, gateway_a, {"token": opened["connection"]["token"]}
        )
        await client.until("sync", within=20)

        async def open_session() -> Any:
            page = await admin_b("GET", f"/sessions?desktop_id={opened['id']}&state=open")
            items = page["items"]
            return items[0] if items and items[0]["connected_at"] else None

        session = await until(open_session, "the session is open")
        await admin_b("POST", f"/sessions/{session['id']}/disconnect")
        assert isinstance(await client.closed(within=15), TunnelClosed)

        # Killing any one process loses nothing: a worker mid-job, then api-a.
        for n in range(12):
            await queue.enqueue(db, "record", {"n": 100 + n, "seconds": 0.5})
        await admin_b("PATCH", f"/pools/{pool_id}", json={"min_size": 8})

        async def busy_worker() -> str | None:
            rows = await db.fetch(
                "SELECT DISTINCT worker FROM jobs WHERE state = 'running' AND worker IS NOT NULL"
            )
            pids = {int(row["worker"].split(":")[1]) for row in rows}
            for name in ("worker-1", "worker-2", "worker-3"):
                if processes[name].pid in pids:
                    return name
            return None

        victim = await until(busy_worker, "a worker is mid-job", seconds=30)
        processes[victim].kill()
        processes["api-a"].kill()
        await until(jobs_done, "every recording job ran after the kill", seconds=60)
        await until(lambda: ready_desktops(8), "the pool grew to eight desktops", seconds=180)

        dead = await db.fetchval("SELECT count(*) FROM jobs WHERE state = 'dead'")
        assert dead == 0
        for job_id, rows in per_job_after(await db.fetch("SELECT * FROM job_executions")).items():
            fences = [row["fence"] for row in rows]
            assert len(set(fences)) == len(fences), f"job {job_id} ran twice under one lease"
        rows = await db.fetch(
            "SELECT name, state, vm_id FROM desktops WHERE pool_id = $1 AND state <> 'deleted'",
            pool_id,
        )
        vm_ids = [row["vm_id"] for row in rows if row["vm_id"] is not None]
        assert len(vm_ids) == len(set(vm_ids)), "two desktops own one VM"
        assert not [row for row in rows if row["state"] == "failed"], rows
        assert (await admin_b("GET", f"/pools/{pool_id}"))["id"] == str(pool_id)
    for name, process in processes.items():
        assert "Traceback" not in process.output, f"{name}:\n{process.output}"


def per_job_after(rows: list[Any]) -> dict[int, list[Any]]:
    grouped: dict[int, list[Any]] = {}
    for row in rows:
        grouped.setdefault(row["job_id"], []).append(row)
    return grouped
