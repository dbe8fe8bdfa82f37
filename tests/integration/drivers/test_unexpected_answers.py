"""A hypervisor answering in an unexpected shape is a driver error (502), never a 500.

Issue 33, finding 7: a Proxmox VE answer of an unexpected shape on ``/nodes`` made
``GET /api/v1/clusters/{id}/nodes`` answer 500 (the driver's ``KeyError`` went up as a bug).
Every driver call passes :func:`deskpool_driver_api.context.run_call`, which now turns what a
driver raises while reading an answer (``KeyError``, ``TypeError``, ``ValueError``...) into
:class:`deskpool_driver_api.errors.UnexpectedAnswer`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.integration.drivers.test_proxmox_driver import make_driver

from deskpool.drivers import DriverError
from deskpool_driver_proxmox.testing import FakeProxmox

SHAPES: list[Any] = [
    [{"status": "online"}],  # no node name
    {"nodes": ["pve1"]},  # an object, not a list
    ["pve1"],  # names, not objects
    [{"node": "pve1", "maxcpu": "lots"}],  # a count that is no number
    [{"node": "pve1", "maxmem": [1]}],
]


@pytest.fixture
async def fake() -> AsyncIterator[FakeProxmox]:
    async with FakeProxmox() as running:
        yield running


@pytest.mark.parametrize("shape", SHAPES, ids=range(len(SHAPES)))
async def test_nodes_of_an_unexpected_shape_are_a_502_driver_error(
    fake: FakeProxmox, shape: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def odd_nodes(call: Any) -> Any:
        return shape

    monkeypatch.setattr(fake, "_nodes", odd_nodes)
    driver = make_driver(fake)
    try:
        with pytest.raises(DriverError) as raised:
            await driver.list_nodes()
    finally:
        await driver.close()
    assert raised.value.status == 502
    assert raised.value.code == "driver_unexpected_answer"
