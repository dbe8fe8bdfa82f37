"""The license's concurrent sessions: one more is refused, nothing open is touched."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.sessions import (
    Estate,
    desktop_row,
    install_license,
    open_desktop,
)

from deskpool.actor import Actor
from deskpool.licensing import service
from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker
from deskpool.testing.licensing import TestVendor

MakeEstate = Callable[..., Awaitable[Estate]]


async def test_a_session_beyond_the_license_is_refused_and_open_ones_stay(
    client: Any,
    estate: MakeEstate,
    pools_runtime: Runtime,
    broker: PlatformSessionBroker,
    license_vendor: TestVendor,
) -> None:
    await install_license(pools_runtime, license_vendor, sessions=1)
    first, second = await estate(ready=1), await estate(ready=1)
    opened = await open_desktop(client, first)
    await broker.redeem(opened["connection"]["token"], gateway_id="gw-lic")
    refused = await client.post(
        f"/api/v1/me/pools/{second.pool.id}/desktop", headers=second.user.headers
    )
    assert refused.status == 409
    problem = await refused.json()
    assert problem["code"] == "license_limit_reached"
    assert problem["resource"] == "sessions"
    # Nothing was allocated to the refused user; the open session is untouched.
    assert (await desktop_row(pools_runtime, second.desktops[0]))["assigned_user"] is None
    row = await desktop_row(pools_runtime, opened["id"])
    assert row["state"] == "in_use"
    # The holder of the session may reconnect: the same desktop does not count twice.
    again = await client.post(
        f"/api/v1/me/desktops/{opened['id']}/connection", headers=first.user.headers
    )
    assert again.status == 200
    async with pools_runtime.db.acquire() as connection:
        await service.remove_license(
            connection, pools_runtime.licensing, Actor.system("test:sessions")
        )
    await open_desktop(client, second)
