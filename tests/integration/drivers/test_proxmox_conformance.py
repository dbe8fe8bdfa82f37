"""The Proxmox VE driver passes the conformance suite against the Proxmox VE API fake."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from deskpool_driver_api import (
    ClusterConnection,
    DriverContext,
    HypervisorDriver,
    InMemorySharedState,
)
from deskpool_driver_api.conformance import ConformanceTarget, HypervisorDriverConformance
from deskpool_driver_proxmox import ProxmoxDriver
from deskpool_driver_proxmox.testing import TOKEN_ID, TOKEN_SECRET, FakeProxmox


class TestProxmoxConformance(HypervisorDriverConformance):
    """Every check of the kit, against the Proxmox VE driver and the API fake."""


@pytest.fixture
async def fake_proxmox() -> AsyncIterator[FakeProxmox]:
    async with FakeProxmox() as fake:
        yield fake


def _driver(fake: FakeProxmox, secret: str = TOKEN_SECRET) -> ProxmoxDriver:
    return ProxmoxDriver(
        ClusterConnection(
            fake.endpoint,
            {"token_id": TOKEN_ID, "token_secret": secret},
            options={"task_poll_interval": 0.005},
        ),
        DriverContext(InMemorySharedState(), cluster_id="conformance"),
    )


@pytest.fixture
async def conformance_driver(fake_proxmox: FakeProxmox) -> AsyncIterator[ConformanceTarget]:
    driver = _driver(fake_proxmox)
    yield ConformanceTarget(
        driver, template="ubuntu-2204-tpl", windows_template="win11-tpl", timeout=30.0
    )
    await driver.close()
    untagged = [
        vm.vmid
        for vm in fake_proxmox.vms.values()
        if not vm.is_template and "deskpool" not in str(vm.config.get("tags", ""))
    ]
    assert untagged == [], "a clone was left without deskpool's tags"


@pytest.fixture
async def conformance_unauthenticated_driver(
    fake_proxmox: FakeProxmox,
) -> AsyncIterator[HypervisorDriver]:
    driver = _driver(fake_proxmox, secret="00000000-0000-0000-0000-000000000000")
    yield driver
    await driver.close()
