"""A Windows pool converges, and repairs itself, with real ``deskpool run`` processes.

One api process and two worker processes share a database of this module's own and a
simulated cluster (its state in Redis, so every process sees the same VMs). Through the REST
API, with a token of the test identity provider for a bootstrap admin, the test connects a
simulator cluster and creates a Windows pool (min_size 5, spare 2, max_size 10). Then:

1. the pool converges to 5 ready desktops, one VM each;
2. a VM is deleted behind deskpool's back (straight on the simulator) and, into the clone that
   replaces it, a guest agent that never answers is injected: that desktop fails at
   ``waiting_for_agent`` after ``GUEST_AGENT_WAIT_TIMEOUT``, and is then provisioned again
   and ready;
3. another VM is deleted behind deskpool's back, and the worker cloning its replacement is
   SIGKILLed mid-clone: the other worker takes the job over once its lease expires, adopts
   the VM the dead worker was cloning, and no desktop ever has two VMs.

Every wait is for a condition read from the database or the cluster; the short intervals
(reconciliation every second, 2 s leases, a 3 s agent timeout) keep the module well under a
minute.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import cast

import aiohttp
import asyncpg
import pytest
from tests.support.e2e import (
    DeploymentEnviron,
)

from deskpool.clusters.repository import get_cluster
from deskpool.pools.model import DesktopState
from deskpool.runtime import Runtime
from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.processes import (
    ANY_PORT,
    DeskpoolProcess,
    running,
    until,
)
from deskpool.testing.pytest_plugin import opened_runtime
from deskpool_driver_simulator import SimulatorDriver

ADMIN = "e2e-admin"
AGENT_TIMEOUT_SECONDS = 3

#: A clone takes a second: long enough to kill a worker in the middle of one.
SIMULATOR_OPTIONS = {
    "clone_seconds": 1.0,
    "boot_seconds": 0.05,
    "agent_seconds": 0.05,
    "oobe_seconds": 0.1,
    "shutdown_seconds": 0.05,
}

pytestmark = pytest.mark.slow


@pytest.fixture
def environ(
    quick_deployment: DeploymentEnviron,
) -> dict[str, str]:
    """The environment every process of the test shares."""
    return quick_deployment(
        ADMIN,
        API_ADDR=ANY_PORT,
        POOL_FAILURE_BACKOFF="1s",
        WORKER_LEASE_DURATION="2s",
        GUEST_AGENT_WAIT_TIMEOUT=f"{AGENT_TIMEOUT_SECONDS}s",
        WINDOWS_READY_WAIT_TIMEOUT="30s",
    )


@pytest.fixture
async def processes(environ: dict[str, str]) -> AsyncIterator[dict[str, DeskpoolProcess]]:
    """The api and two workers, started together; stopped (or killed) at the end."""
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


async def vms_per_desktop(simulator: SimulatorDriver) -> dict[str, list[str]]:
    """VM ids by desktop tag, every deskpool VM of the cluster."""
    found: dict[str, list[str]] = {}
    for vm in await simulator.list_owned_vms():
        found.setdefault(str(vm.desktop_id), []).append(vm.id)
    return found


async def test_a_windows_pool_converges_and_repairs_itself(
    processes: dict[str, DeskpoolProcess],
    environ: dict[str, str],
    identity_provider: TestIdentityProvider,
    db: asyncpg.Connection,
    hands: Runtime,
) -> None:
    api = f"{processes['api'].url('api')}/api/v1"
    headers = {"Authorization": f"Bearer {identity_provider.issue_token(ADMIN)}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(
            f"{api}/clusters",
            json={
                "name": "e2e-simulator",
                "driver": "simulator",
                "endpoint": "simulator://e2e",
                "options": SIMULATOR_OPTIONS,
            },
        ) as response:
            assert response.status == 201, await response.text()
            cluster_id = uuid.UUID((await response.json())["id"])
        async with http.post(
            f"{api}/pools",
            json={
                "name": "e2e-windows",
                "cluster_id": str(cluster_id),
                "template": "windows-11",
                "kind": "non_persistent",
                "os_type": "windows",
                "min_size": 5,
                "spare": 2,
                "max_size": 10,
                "naming_pattern": "e2e-{n:02}",
            },
        ) as response:
            assert response.status == 201, await response.text()
            pool_id = uuid.UUID((await response.json())["id"])

    record = await get_cluster(hands.db, cluster_id)
    assert record is not None
    simulator = cast(SimulatorDriver, await hands.drivers.driver_for(record))

    async def states() -> Counter[str]:
        rows = await db.fetch("SELECT state FROM desktops WHERE pool_id = $1", pool_id)
        return Counter(row["state"] for row in rows)

    async def desktop(name: str) -> asyncpg.Record:
        row = await db.fetchrow(
            "SELECT * FROM desktops WHERE pool_id = $1 AND name = $2", pool_id, name
        )
        assert row is not None
        return row

    async def converged() -> bool:
        return await states() == Counter({"ready": 5})

    # 1. Convergence: five ready desktops, one VM each.
    await until(converged, "the pool has 5 ready desktops")
    vms = await vms_per_desktop(simulator)
    desktops = await db.fetch("SELECT * FROM desktops WHERE pool_id = $1 ORDER BY name", pool_id)
    assert {str(row["id"]): [row["vm_id"]] for row in desktops} == vms
    assert [row["name"] for row in desktops] == [f"e2e-{n:02}" for n in range(1, 6)]

    # 2. A VM deleted behind deskpool's back, its replacement's agent silent.
    first = desktops[0]
    next_vm_id = str(max(int(vm_id) for ids in vms.values() for vm_id in ids) + 1)
    await simulator.admin.inject(agent_never_answers=next_vm_id)
    await simulator.delete(first["vm_id"])

    async def failed_at_agent() -> asyncpg.Record | None:
        row = await desktop(first["name"])
        return row if row["state"] == DesktopState.FAILED else None

    failed = await until(failed_at_agent, "the replacement fails at waiting_for_agent")
    assert failed["failed_step"] == "waiting_for_agent"
    assert failed["vm_id"] == next_vm_id
    assert failed["last_error"] == (
        f"the guest agent did not answer within {AGENT_TIMEOUT_SECONDS}s"
    )
    replaced = await db.fetchrow(
        """
        SELECT * FROM audit_events
         WHERE action = 'reconcile.replace_desktop' AND resource_id = $1
        """,
        str(first["id"]),
    )
    assert replaced is not None
    assert replaced["actor"] == "system:reconciler"
    assert "vanished" in replaced["details"]

    async def ready_again() -> asyncpg.Record | None:
        row = await desktop(first["name"])
        return row if row["state"] == DesktopState.READY else None

    repaired = await until(ready_again, "the failed desktop is provisioned again")
    assert repaired["vm_id"] not in (first["vm_id"], next_vm_id)
    assert (await vms_per_desktop(simulator))[str(first["id"])] == [repaired["vm_id"]]
    assert await db.fetchval(
        "SELECT count(*) FROM audit_events WHERE action = 'reconcile.retry_failed' "
        "AND resource_id = $1",
        str(first["id"]),
    )

    # 3. A worker SIGKILLed while it clones a replacement.
    second = desktops[1]
    await simulator.delete(second["vm_id"])

    async def cloning_worker() -> str | None:
        """The worker running the provisioning job of ``second`` while its clone copies."""
        job = await db.fetchrow(
            """
            SELECT worker FROM jobs
             WHERE kind = 'desktop.provision' AND resource_id = $1 AND state = 'running'
            """,
            str(second["id"]),
        )
        if job is None:
            return None
        cloning = [
            vm for vm in await simulator.list_owned_vms() if vm.desktop_id == str(second["id"])
        ]
        return str(job["worker"]) if cloning and cloning[0].busy else None

    worker_id = await until(cloning_worker, "a worker is cloning the replacement")
    pid = int(worker_id.split(":")[1])
    [victim] = [process for process in processes.values() if process.pid == pid]
    victim.kill()

    async def second_ready() -> asyncpg.Record | None:
        row = await desktop(second["name"])
        return row if row["state"] == DesktopState.READY else None

    rebuilt = await until(second_ready, "the other worker finishes the replacement")
    assert rebuilt["vm_id"] != second["vm_id"]
    assert await db.fetchval(
        "SELECT max(reclaims) FROM jobs WHERE kind = 'desktop.provision' AND resource_id = $1",
        str(second["id"]),
    )
    await until(converged, "the pool has 5 ready desktops again")
    final = await vms_per_desktop(simulator)
    assert all(len(ids) == 1 for ids in final.values()), final
    rows = await db.fetch("SELECT id, vm_id FROM desktops WHERE pool_id = $1", pool_id)
    assert final == {str(row["id"]): [row["vm_id"]] for row in rows}
    await simulator.close()
