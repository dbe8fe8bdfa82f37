"""The libvirt driver passes the conformance kit against real libvirt and real VMs.

The driver reaches the local libvirtd through its TCP listener on loopback with SASL
credentials (so a wrong password is refused by libvirt itself) and clones the run's template,
a domain booting the tiny guest (``deskpool.testing.libvirt``) under QEMU.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from deskpool.testing.libvirt import TCP_URI, LibvirtLab
from deskpool_driver_api import (
    ClusterConnection,
    DriverContext,
    HypervisorDriver,
    InMemorySharedState,
)
from deskpool_driver_api.conformance import ConformanceTarget, HypervisorDriverConformance
from deskpool_driver_libvirt import LibvirtDriver


class TestLibvirtConformance(HypervisorDriverConformance):
    """Every check of the kit, against libvirt with real (tiny) VMs."""


@pytest.fixture
async def conformance_driver(
    libvirt_lab: LibvirtLab, libvirt_credentials: dict[str, str]
) -> AsyncIterator[ConformanceTarget]:
    driver = LibvirtDriver(
        ClusterConnection(TCP_URI, libvirt_credentials),
        DriverContext(
            InMemorySharedState(), cluster_id="conformance", owner_tag=libvirt_lab.owner_tag
        ),
    )
    yield ConformanceTarget(driver, template=libvirt_lab.template, timeout=120.0)
    await driver.close()


@pytest.fixture
async def conformance_unauthenticated_driver(
    libvirt_lab: LibvirtLab, libvirt_credentials: dict[str, str]
) -> AsyncIterator[HypervisorDriver]:
    driver = LibvirtDriver(
        ClusterConnection(TCP_URI, {**libvirt_credentials, "password": "wrong"}),
        DriverContext(
            InMemorySharedState(), cluster_id="conformance", owner_tag=libvirt_lab.owner_tag
        ),
    )
    yield driver
    await driver.close()
