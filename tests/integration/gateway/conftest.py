"""A gateway component on loopback with an in-memory broker and the desktop daemon simulator."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
import pytest
from tests.support.gateway import (
    GatewayHarness,
    gateway_environ,
)

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.host import bootstrap
from deskpool.runtime import Runtime
from deskpool.testing.tunnels import InMemorySessionBroker
from deskpool_gateway import GatewayComponent


@pytest.fixture
async def start_gateway(
    desktop_daemon: DesktopDaemonSimulator,
) -> AsyncIterator[Callable[..., Any]]:
    """``await start_gateway(**environ_overrides)``: a started gateway harness."""
    started: list[GatewayHarness] = []
    async with aiohttp.ClientSession() as session:

        async def start(**overrides: str) -> GatewayHarness:
            environ: Mapping[str, str] = gateway_environ(desktop_daemon.address, **overrides)
            process = bootstrap(environ, ["gateway"], log_setup=False)
            broker = InMemorySessionBroker()
            component = GatewayComponent(
                Runtime(process.config, process.plugins), broker_factory=lambda _: broker
            )
            await component.start()
            address = component.bound
            harness = GatewayHarness(component, broker, session, f"ws://{address}/websocket-tunnel")
            started.append(harness)
            return harness

        try:
            yield start
        finally:
            for harness in started:
                if harness.component.started:
                    await harness.component.stop()


@pytest.fixture
async def gateway(start_gateway: Callable[..., Any]) -> GatewayHarness:
    """A started gateway with the default settings of these tests."""
    harness: GatewayHarness = await start_gateway()
    return harness
