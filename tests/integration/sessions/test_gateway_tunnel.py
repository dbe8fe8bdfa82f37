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
from tests.support.sessions import (
    Estate,
    desktop_row,
    open_desktop,
    running_gateway,
)

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.guacamole import Instruction, Status
from deskpool.runtime import Runtime
from deskpool.sessions.model import AfterDisconnect, SessionPolicy
from deskpool.sessions.tunnel import SessionEndReason
from deskpool.testing.processes import until
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


async def test_a_daemon_that_hangs_up_ends_the_session_as_its_error_and_keeps_the_desktop(
    client: Any,
    estate: MakeEstate,
    pools_environ: dict[str, str],
    pools_runtime: Runtime,
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    # A pool that logs its users off at once when they leave: a hang-up is not their leaving.
    place = await estate(policy=SessionPolicy(after_disconnect=AfterDisconnect.LOGOFF_IMMEDIATELY))
    opened = await open_desktop(client, place)
    async with (
        running_gateway(pools_environ, desktop_daemon) as url,
        aiohttp.ClientSession() as session,
    ):
        token = opened["connection"]["token"]
        tunnel = await WebSocketTunnelClient.connect(session, url, {"token": token})
        await tunnel.until("sync")
        await tunnel.send("key", ord("w"), 1)  # the user's work
        session_id = uuid.UUID(await tunnel.tunnel_id())
        ((connection_id, connection),) = desktop_daemon.connections.items()

        async def typed() -> bool:
            return bool(connection.screen.typed == "w")

        await until(typed, "the desktop shows what the user typed")
        desktop_daemon.kill_connection(connection_id)
        error = (await tunnel.until("error"))[-1]
        assert error.args[1] == str(int(Status.UPSTREAM_ERROR))
        assert (await tunnel.closed()).status == Status.UPSTREAM_ERROR

        async def ended() -> Any:
            async with pools_runtime.db.acquire() as db:
                return await db.fetchval(
                    "SELECT end_reason FROM desktop_sessions"
                    " WHERE id = $1 AND ended_at IS NOT NULL",
                    session_id,
                )

        assert await until(ended, "the session ended") == SessionEndReason.DAEMON_ERROR.value
        desktop = await desktop_row(pools_runtime, opened["id"])
        assert (desktop["state"], str(desktop["assigned_user"]), desktop["in_session"]) == (
            "in_use",
            place.user.id,
            False,
        )
        # The user reconnects to the same desktop, and finds it as the daemon kept it.
        again = await open_desktop(client, place)
        assert again["id"] == opened["id"]
        tunnel = await WebSocketTunnelClient.connect(
            session, url, {"token": again["connection"]["token"]}
        )
        await tunnel.until("sync")
        (connection,) = desktop_daemon.connections.values()
        assert connection.screen.typed == "w"
        await tunnel.ws.close()
