"""Every long-lived stream is judged again by the access watch, whatever took the access away.

A change that takes access away through a service asks the gateway to close the tunnels it
ended (the disconnect requests). The access watch does not count on that: the real gateway
component registers every tunnel with it, and a tunnel whose user no longer keeps it closes
within seconds even when the access went by a path that asked nothing (here, a row changed
behind the services' back, as a new way of taking access away that forgot to revoke would).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from tests.support.sessions import Estate, open_desktop, running_gateway

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.guacamole import Status
from deskpool.runtime import Runtime
from deskpool.testing.processes import until
from deskpool.testing.tunnels import WebSocketTunnelClient

MakeEstate = Callable[..., Awaitable[Estate]]


async def test_a_tunnel_closes_when_its_entitlement_goes_by_a_path_that_asks_nothing(
    client: Any,
    estate: MakeEstate,
    pools_runtime: Runtime,
    pools_environ: dict[str, str],
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    place = await estate()
    opened = await open_desktop(client, place)
    async with (
        running_gateway(pools_environ, desktop_daemon) as url,
        aiohttp.ClientSession() as session,
    ):
        tunnel = await WebSocketTunnelClient.connect(
            session, url, {"token": opened["connection"]["token"]}
        )
        await tunnel.until("sync")
        assert tunnel.uuid is not None
        async with pools_runtime.db.acquire() as connection:
            await connection.execute(
                "DELETE FROM pool_entitlements WHERE pool_id = $1 AND subject_id = $2::uuid",
                place.pool.id,
                place.user.id,
            )
        closed = await tunnel.closed(within=10)
        assert closed.status == Status.CLIENT_FORBIDDEN

    async def ended() -> Any:
        async with pools_runtime.db.acquire() as connection:
            return await connection.fetchval(
                "SELECT end_reason FROM desktop_sessions WHERE id = $1 AND ended_at IS NOT NULL",
                uuid.UUID(tunnel.uuid),
            )

    assert await until(ended, "the session ended") == "access_revoked"


async def test_a_live_event_stream_closes_when_its_user_is_disabled_by_a_path_that_tells_nobody(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate()
    events = await client.get("/api/v1/events", headers=place.user.headers)
    assert events.status == 200
    await events.content.readline()  # the stream is open
    async with pools_runtime.db.acquire() as connection:
        # No identity change is published: only the database knows.
        await connection.execute(
            "UPDATE users SET disabled = true WHERE id = $1::uuid", place.user.id
        )
    rest = await asyncio.wait_for(events.content.read(), 10)
    assert rest.endswith(b": account disabled\n\n")
