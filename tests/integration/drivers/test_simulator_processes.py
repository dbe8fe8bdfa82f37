"""Two processes driving one simulated cluster through Redis see the same VMs and phases."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from typing import Any

from deskpool.clusters.shared_state import RedisSharedState
from deskpool.drivers import ClusterConnection, DriverContext, PowerState
from deskpool_driver_api.conformance import eventually
from deskpool_driver_simulator import SimulatorDriver

# What the other process (say, the worker) does: clone, start, take a node down, report.
WORKER = textwrap.dedent(
    """
    import asyncio, json, sys
    import redis.asyncio as redis
    from deskpool.drivers import ClusterConnection, DriverContext
    from deskpool.clusters.shared_state import RedisSharedState
    from deskpool_driver_simulator import SimulatorDriver

    async def main(host, port, prefix, options):
        client = redis.Redis(host=host, port=int(port))
        driver = SimulatorDriver(
            ClusterConnection("simulator://shared", options=json.loads(options)),
            DriverContext(RedisSharedState(client, prefix), cluster_id="shared"),
        )
        vm = await driver.clone("9001", name="win-1", desktop_id="d1", node="sim-node-1")
        await driver.start(vm.id)
        await driver.admin.inject(agent_never_answers="silent-*")
        print(json.dumps({"vm": vm.id}))
        await client.aclose()

    asyncio.run(main(*sys.argv[1:]))
    """
)

OPTIONS = {"boot_seconds": 0.2, "agent_seconds": 0.0, "oobe_seconds": 0.0}


async def run_worker(test_servers: Any, prefix: str) -> dict[str, str]:
    host, _, port = test_servers.kv_addr.rpartition(":")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WORKER,
        host,
        port,
        prefix,
        json.dumps(OPTIONS),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    result: dict[str, str] = json.loads(out)
    return result


async def test_a_vm_made_by_another_process_is_seen_and_progresses_here(
    test_servers: Any, redis_shared_state: RedisSharedState, key_prefix: str
) -> None:
    api = SimulatorDriver(
        ClusterConnection("simulator://shared", options=OPTIONS),
        DriverContext(redis_shared_state, cluster_id="shared"),
    )
    assert await api.list_owned_vms() == []
    started = await run_worker(test_servers, key_prefix)
    (vm,) = await api.list_owned_vms()
    assert (vm.id, vm.desktop_id, vm.power_state) == (started["vm"], "d1", PowerState.RUNNING)

    # The guest boots in the other process's timeline, computed from the stored start time:
    # this process never saw the start, yet sees the agent come up.
    async def agent_answers() -> bool:
        return await api.agent_ping(vm.id)

    await eventually(agent_answers, within=10, what="the agent answers")
    assert await api.windows_ready(vm.id)
    assert (await api.admin.faults()).agent_never_answers == frozenset({"silent-*"})
    await api.delete(vm.id, desktop_id="d1")
    assert await api.list_owned_vms() == []
