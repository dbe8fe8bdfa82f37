"""Opening a desktop and redeeming its token ask no driver where it is shown (issue 39, Build 3).

The address is recorded when the desktop becomes ready (the worker's step: its own test in
``tests/integration/provisioning/test_ready_address.py``); a desktop without one (made ready
before the address was kept) has its driver asked at its first opening, once, and the answer
recorded for the next.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from tests.support.sessions import (
    CONSOLE_HOST,
    VNC_PORT,
    Estate,
    open_desktop,
    record_addresses,
)

from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker

MakeEstate = Callable[..., Awaitable[Estate]]


@pytest.fixture
def driver_calls(pools_runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The clusters whose driver the runtime opened from now on."""
    calls: list[str] = []
    opened = pools_runtime.drivers.open

    @contextlib.asynccontextmanager
    async def counting(record: Any) -> AsyncIterator[Any]:
        calls.append(str(record.id))
        async with opened(record) as driver:
            yield driver

    monkeypatch.setattr(pools_runtime.drivers, "open", counting)
    return calls


async def test_opening_and_redeeming_a_ready_desktop_ask_no_driver(
    client: Any,
    estate: MakeEstate,
    pools_runtime: Runtime,
    broker: PlatformSessionBroker,
    driver_calls: list[str],
) -> None:
    place = await estate(ready=1)
    await record_addresses(pools_runtime, place.desktops)
    driver_calls.clear()

    opened = await open_desktop(client, place)
    grant = await broker.redeem(opened["connection"]["token"], gateway_id="gw-address")

    assert driver_calls == []
    assert (grant.target.protocol, grant.target.hostname, grant.target.port) == (
        "vnc",
        CONSOLE_HOST,
        VNC_PORT,
    )


async def test_a_desktop_without_an_address_has_its_driver_asked_once(
    client: Any,
    estate: MakeEstate,
    pools_runtime: Runtime,
    broker: PlatformSessionBroker,
    driver_calls: list[str],
) -> None:
    place = await estate(ready=1)
    driver_calls.clear()  # the estate's VMs were made through the driver

    first = await open_desktop(client, place)
    grant = await broker.redeem(first["connection"]["token"], gateway_id="gw-address")
    assert len(driver_calls) == 1
    assert grant.target.hostname == CONSOLE_HOST
    second = await open_desktop(client, place)

    assert second["id"] == first["id"]
    assert len(driver_calls) == 1  # the answer was recorded
