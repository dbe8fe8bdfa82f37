"""The simulator driver passes the conformance suite, its cluster kept in the real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from deskpool.clusters.shared_state import RedisSharedState
from deskpool_driver_api import ClusterConnection, DriverContext, HypervisorDriver
from deskpool_driver_api.conformance import ConformanceTarget, HypervisorDriverConformance
from deskpool_driver_simulator import SimulatorDriver


class TestSimulatorConformance(HypervisorDriverConformance):
    """Every check of the kit, against the simulator."""


@pytest.fixture
async def conformance_driver(
    redis_shared_state: RedisSharedState,
) -> AsyncIterator[ConformanceTarget]:
    driver = SimulatorDriver(
        ClusterConnection("simulator://conformance"),
        DriverContext(redis_shared_state, cluster_id="conformance"),
    )
    yield ConformanceTarget(
        driver, template="ubuntu-22.04", windows_template="windows-11", timeout=30.0
    )
    await driver.close()


@pytest.fixture
async def conformance_unauthenticated_driver(
    redis_shared_state: RedisSharedState,
) -> AsyncIterator[HypervisorDriver]:
    driver = SimulatorDriver(
        ClusterConnection(
            "simulator://conformance",
            {"token": "wrong"},
            options={"required_token": "right"},
        ),
        DriverContext(redis_shared_state, cluster_id="conformance"),
    )
    yield driver
    await driver.close()
