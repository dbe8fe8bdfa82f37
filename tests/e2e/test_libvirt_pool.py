"""A pool on real libvirt with real VMs: converges, repairs itself from events, cleans up.

An api process and a worker share a database of this module's own. Through the REST API the
test connects a libvirt cluster (the local libvirtd's TCP listener with SASL credentials,
sealed like any cluster's) and creates a pool of 3 full clones of this run's template, the
tiny guest (``deskpool.testing.libvirt``). ``POOL_RECONCILE_INTERVAL`` is an hour, so only
what the test does (creating and deleting the pool) and the VM events can make the pool
reconcile. Then:

1. the first desktop's clone is interrupted: the worker is SIGKILLed as soon as libvirt
   defines the new domain (a libvirt event in this process), while its disk is being copied;
   the domain is tagged and names the volume being made, nothing is untagged, and a new worker
   takes the job over, removes the abandoned clone and clones again;
2. the pool converges to 3 ready desktops whose guest agents answer;
3. a VM is destroyed and undefined with its disk behind deskpool's back: its lifecycle event
   makes the worker enqueue ``pool.reconcile`` and the desktop is provisioned anew;
4. deleting the pool leaves no domain and no volume of it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import aiohttp
import asyncpg
import libvirt
import libvirt_qemu
import pytest
from tests.support.e2e import (
    DeploymentEnviron,
)

from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.libvirt import LOCAL_URI, TCP_URI, LibvirtLab
from deskpool.testing.processes import ANY_PORT, DeskpoolProcess, running, until
from deskpool_driver_libvirt.domain_xml import read_domain
from deskpool_driver_libvirt.hosts import ensure_event_loop

ADMIN = "e2e-libvirt-admin"

pytestmark = pytest.mark.slow


@pytest.fixture
def environ(quick_deployment: DeploymentEnviron) -> dict[str, str]:
    """The environment every process of the test shares."""
    return quick_deployment(
        ADMIN,
        API_ADDR=ANY_PORT,
        POOL_RECONCILE_INTERVAL="1h",
        POOL_FAILURE_BACKOFF="1s",
        WORKER_LEASE_DURATION="2s",
        GUEST_AGENT_WAIT_TIMEOUT="120s",
        SECRETS_MASTER_KEY=base64.b64encode(os.urandom(32)).decode(),
    )


@pytest.fixture
def local() -> Iterator[Any]:
    """A connection of the test's own to the local libvirt, behind deskpool's back."""
    ensure_event_loop()
    connection = libvirt.open(LOCAL_URI)
    yield connection
    connection.close()


def run_domains(local: Any, lab: LibvirtLab) -> dict[str, Any]:
    """The run's domains by name (the pool's desktops are named with the run's prefix)."""
    return {
        domain.name(): read_domain(domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
        for domain in local.listAllDomains(0)
        if domain.name().startswith(lab.prefix)
    }


def nothing_untagged(local: Any, lab: LibvirtLab) -> None:
    """Check that no run domain but the template is untagged, and no volume unnamed.

    Every volume is the template's disk or one a tagged domain's metadata names.
    """
    domains = run_domains(local, lab)
    named = {lab.base_volume}
    for name, facts in domains.items():
        if name == lab.template:
            assert facts.template
            continue
        assert "deskpool" in facts.tags, f"{name} is not tagged"
        named |= {volume.name for volume in facts.volumes}
    assert set(lab.volumes(local)) <= named


async def test_a_libvirt_pool_converges_repairs_itself_and_cleans_up(
    environ: dict[str, str],
    identity_provider: TestIdentityProvider,
    db: asyncpg.Connection,
    libvirt_lab: LibvirtLab,
    libvirt_credentials: dict[str, str],
    local: Any,
) -> None:
    lab = libvirt_lab
    headers = {"Authorization": f"Bearer {identity_provider.issue_token(ADMIN)}"}
    first = DeskpoolProcess(["worker"], environ)
    killed_mid_clone = threading.Event()

    def on_lifecycle(_conn: Any, domain: Any, event: int, _detail: int, _opaque: Any) -> None:
        if killed_mid_clone.is_set() or event != libvirt.VIR_DOMAIN_EVENT_DEFINED:
            return
        with contextlib.suppress(libvirt.libvirtError):
            if domain.name().startswith(lab.prefix) and 'cloning="yes"' in domain.XMLDesc(0):
                os.kill(first.pid, signal.SIGKILL)
                killed_mid_clone.set()

    callback = local.domainEventRegisterAny(
        None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, on_lifecycle, None
    )
    processes = {"api": DeskpoolProcess(["api"], environ), "worker-1": first}

    async def killed() -> bool:
        return killed_mid_clone.is_set()

    try:
        async with running(processes) as started, aiohttp.ClientSession(headers=headers) as http:
            api = f"{started['api'].url('api')}/api/v1"
            async with http.post(
                f"{api}/clusters",
                json={
                    "name": f"{lab.prefix}-cluster",
                    "driver": "libvirt",
                    "endpoint": TCP_URI,
                    "credentials": libvirt_credentials,
                },
            ) as response:
                assert response.status == 201, await response.text()
                cluster_id = uuid.UUID((await response.json())["id"])
            async with http.post(
                f"{api}/pools",
                json={
                    "name": f"{lab.prefix}-pool",
                    "cluster_id": str(cluster_id),
                    "template": lab.template,
                    "kind": "non_persistent",
                    "os_type": "linux",
                    "clone_mode": "full",
                    "min_size": 3,
                    "spare": 0,
                    "max_size": 3,
                    "naming_pattern": f"{lab.prefix}-{{n:02}}",
                },
            ) as response:
                assert response.status == 201, await response.text()
                pool_id = uuid.UUID((await response.json())["id"])

            # 1. A clone interrupted by a killed worker leaves only tagged things behind.
            await until(killed, "a worker is killed while it clones", seconds=120)
            await first.wait()
            interrupted = [
                facts for name, facts in run_domains(local, lab).items() if facts.cloning
            ]
            assert interrupted, "the clone had finished before the worker was killed"
            nothing_untagged(local, lab)
            second = DeskpoolProcess(["worker"], environ)
            watching = second.watch("watching the VM events of cluster")
            started["worker-2"] = second
            await second.start()

            # 2. Three ready desktops, their guest agents answering.
            async def states() -> Counter[str]:
                rows = await db.fetch("SELECT state FROM desktops WHERE pool_id = $1", pool_id)
                return Counter(row["state"] for row in rows)

            async def converged() -> bool:
                return await states() == Counter({"ready": 3})

            await until(converged, "the pool has 3 ready desktops", seconds=240)
            desktops = await db.fetch(
                "SELECT * FROM desktops WHERE pool_id = $1 ORDER BY name", pool_id
            )
            for row in desktops:
                domain = local.lookupByUUIDString(row["vm_id"])
                assert domain.name() == row["name"]
                assert domain.isActive()
                assert agent_ping(domain) == {"return": {}}
            assert all(
                facts.uuid not in {row["vm_id"] for row in desktops} for facts in interrupted
            )
            assert interrupted[0].uuid not in run_domains(local, lab)
            nothing_untagged(local, lab)

            # 3. A VM destroyed behind deskpool's back: its event brings the reconciler.
            async def watched() -> bool:
                return watching.is_set()

            await until(watched, "the worker watches the cluster's events")
            victim = desktops[0]
            jobs_before = await db.fetchval(
                "SELECT count(*) FROM jobs WHERE kind = 'pool.reconcile' AND resource_id = $1",
                str(pool_id),
            )
            domain = local.lookupByUUIDString(victim["vm_id"])
            disks = read_domain(domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)).volumes
            domain.destroy()
            domain.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)
            for disk in disks:  # as `virsh undefine --remove-all-storage` does
                local.storagePoolLookupByName(disk.pool).storageVolLookupByName(disk.name).delete()

            async def replaced() -> bool:
                row = await db.fetchrow("SELECT * FROM desktops WHERE id = $1", victim["id"])
                return (
                    row is not None
                    and row["state"] == "ready"
                    and row["vm_id"] not in (None, victim["vm_id"])
                )

            await until(replaced, "the destroyed desktop is provisioned anew", seconds=180)
            assert (
                await db.fetchval(
                    "SELECT count(*) FROM jobs WHERE kind = 'pool.reconcile' AND resource_id = $1",
                    str(pool_id),
                )
                > jobs_before
            )
            assert await db.fetchval(
                "SELECT count(*) FROM audit_events WHERE action = 'reconcile.replace_desktop' "
                "AND resource_id = $1",
                str(victim["id"]),
            )

            # 4. Draining and deleting the pool leaves no domain and no volume of it.
            async with http.patch(f"{api}/pools/{pool_id}", json={"state": "draining"}) as response:
                assert response.status == 200, await response.text()

            async def drained() -> bool:
                return not await db.fetchval(
                    "SELECT count(*) FROM desktops WHERE pool_id = $1", pool_id
                )

            await until(drained, "the draining pool has no desktops left", seconds=180)
            async with http.delete(f"{api}/pools/{pool_id}") as response:
                assert response.status == 204, await response.text()
            assert set(run_domains(local, lab)) == {lab.template}
            assert lab.volumes(local) == [lab.base_volume]
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            local.domainEventDeregisterAny(callback)


def agent_ping(domain: Any) -> Any:
    """The guest agent's answer to ``guest-ping``, asked straight through libvirt."""
    return json.loads(libvirt_qemu.qemuAgentCommand(domain, '{"execute":"guest-ping"}', 10, 0))
