"""The gateway component with the platform's broker: a token from the API opens a tunnel.

A user opens a desktop through the REST API; the token opens a tunnel through a real gateway
component (with the platform's PostgreSQL+Redis broker) to the desktop daemon simulator; the
session is listed; an administrator's disconnect closes the tunnel within seconds.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from tests.integration.sessions.conftest import (
    Estate,
    desktop_row,
    open_desktop,
    running_gateway,
)

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.guacamole import Instruction, Status
from deskpool.runtime import Runtime
from deskpool.sessions.tunnel import SessionEndReason
from deskpool.testing.tunnels import WebSocketTunnelClient

MakeEstate = Callable[..., Awaitable[Estate]]


async def test_a_desktop_opened_through_the_api_is_shown_and_disconnected(
    client: Any,
    estate: MakeEstate,
    pools_environ: dict[str, str],
    pools_runtime: Runtime,
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    place = await estate()
    opened = await open_desktop(client, place)
    token = opened["connection"]["token"]
    async with (
        running_gateway(pools_environ, desktop_daemon) as url,
        aiohttp.ClientSession() as session,
    ):
        tunnel = await WebSocketTunnelClient.connect(session, url, {"token": token, "width": "640"})
        frame = await tunnel.until("sync")
        assert Instruction("size", ("0", "640", "768")) in frame
        assert tunnel.uuid is not None
        session_id = tunnel.uuid
        listed = await client.get("/api/v1/sessions", headers=place.admin.headers)
        assert session_id in [item["id"] for item in (await listed.json())["items"]]
        assert (await desktop_row(pools_runtime, opened["id"]))["in_session"] is True
        asked = await client.post(
            f"/api/v1/sessions/{session_id}/disconnect", headers=place.admin.headers
        )
        assert asked.status == 202, await asked.text()
        closed = await tunnel.closed(within=10)
        assert closed.status == Status.SESSION_CLOSED
        replay = await WebSocketTunnelClient.connect(session, url, {"token": token})
        assert (await replay.closed()).status == Status.CLIENT_UNAUTHORIZED
    got = await client.get(f"/api/v1/sessions/{session_id}", headers=place.admin.headers)
    record = await got.json()
    assert record["end_reason"] == SessionEndReason.ADMIN_DISCONNECT.value, record
    assert uuid.UUID(record["id"]) == uuid.UUID(session_id)
    assert (await desktop_row(pools_runtime, opened["id"]))["in_session"] is False
