"""The simulator driver against the conformance kit, with in-memory shared state.

Run by ``test_contract_stands_alone.py`` with only the driver contract importable; the suite's
own run of the kit against the simulator (``test_simulator_conformance.py``) keeps its cluster
in the real Redis.
"""

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
from deskpool_driver_simulator import SimulatorDriver


class TestSimulatorConformance(HypervisorDriverConformance):
    """Every check of the kit, against the simulator."""


@pytest.fixture
async def conformance_driver() -> AsyncIterator[ConformanceTarget]:
    driver = SimulatorDriver(
        ClusterConnection("simulator://conformance"),
        DriverContext(InMemorySharedState(), cluster_id="conformance"),
    )
    yield ConformanceTarget(
        driver, template="ubuntu-22.04", windows_template="windows-11", timeout=30.0
    )
    await driver.close()


@pytest.fixture
async def conformance_unauthenticated_driver() -> AsyncIterator[HypervisorDriver]:
    driver = SimulatorDriver(
        ClusterConnection(
            "simulator://conformance", {"token": "wrong"}, options={"required_token": "right"}
        ),
        DriverContext(InMemorySharedState(), cluster_id="conformance"),
    )
    yield driver
    await driver.close()
