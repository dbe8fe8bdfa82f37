"""A pool's client policy on the real gateway with the platform's broker: live and audited.

A user's tunnel is open through a gateway component (PostgreSQL and Redis behind its broker) to
the desktop daemon simulator. An administrator turns copying out off through the pools API: the
open tunnel stops passing the desktop's clipboard within 2 s, without a reconnect. Every
transfer and refusal is an audit event of the session (``session.transfer``), listed by
``GET /api/v1/sessions/{id}/transfers`` with its SHA-256, never its content.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from tests.support.sessions import Estate, open_desktop, running_gateway

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.guacamole import Status, encode
from deskpool.runtime import Runtime
from deskpool.testing.tunnels import WebSocketTunnelClient

MakeEstate = Callable[..., Awaitable[Estate]]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_copying_out_stops_within_two_seconds_of_the_change_and_every_transfer_is_audited(
    client: Any,
    estate: MakeEstate,
    new_caller: Any,
    pools_environ: dict[str, str],
    pools_runtime: Runtime,
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    place = await estate()
    manager = await new_caller("pools:manage", "pools:read")
    opened = await open_desktop(client, place)
    async with (
        running_gateway(pools_environ, desktop_daemon) as url,
        aiohttp.ClientSession() as session,
    ):
        tunnel = await WebSocketTunnelClient.connect(
            session, url, {"token": opened["connection"]["token"]}
        )
        await tunnel.until("sync")
        session_id = tunnel.uuid
        assert session_id is not None
        user = desktop_daemon.users[-1]

        async def copy_out(n: int) -> bool:
            await user.send(
                encode("clipboard", n, "text/plain")
                + encode("blob", n, b64(f"copied {n}".encode()))
                + encode("end", n)
                + encode("name", f"marker {n}")
            )
            return any(i.opcode == "clipboard" for i in await tunnel.until("name"))

        assert await copy_out(1)
        changed = await client.patch(
            f"/api/v1/pools/{place.pool.id}",
            json={"session_policy": {"client": {"clipboard": {"to_browser": {"mode": "off"}}}}},
            headers=manager.headers,
        )
        assert changed.status == 200, await changed.text()
        since = time.monotonic()
        n = 2
        while await copy_out(n):
            assert time.monotonic() - since < 2.0, "copying out still works 2 s after the change"
            n += 1
            await asyncio.sleep(0.05)
        assert not tunnel.ws.closed
        # An upload from a hand-written client: VNC without SFTP offers no file transfer.
        await tunnel.send("file", 7, "application/octet-stream", "tool.exe")
        await tunnel.send("blob", 7, b64(b"MZ payload"))
        await tunnel.send("end", 7)
        await tunnel.send("key", ord("k"), 1)
        # Read up to the upload's answer: a frame's sync already on its way may come first
        # (a suite run under load saw one, and no ack before it).
        answered: list[str] = []
        while not answered:
            answers = await tunnel.until("ack")
            answered = [i.args[2] for i in answers if i.opcode == "ack" and i.args[0] == "7"]
        assert answered == [str(int(Status.CLIENT_FORBIDDEN))]
        await tunnel.ws.close()
        deadline = time.monotonic() + 10
        while True:
            listed = await client.get(
                f"/api/v1/sessions/{session_id}/transfers", headers=place.admin.headers
            )
            assert listed.status == 200, await listed.text()
            items = (await listed.json())["items"]
            if len(items) >= n + 1 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
    allowed = [i for i in items if i["outcome"] == "allowed"]
    refused = [i for i in items if i["outcome"] == "refused"]
    assert allowed[0]["kind"] == "clipboard"
    assert allowed[0]["direction"] == "to_browser"
    assert allowed[0]["sha256"] == hashlib.sha256(b"copied 1").hexdigest()
    assert "clipboard_off" in [i["reason"] for i in refused]
    upload = next(i for i in refused if i["kind"] == "file")
    assert (upload["name"], upload["reason"], upload["size"]) == ("tool.exe", "upload_off", 10)
    assert upload["sha256"] == hashlib.sha256(b"MZ payload").hexdigest()
    async with pools_runtime.db.acquire() as connection:
        rows = await connection.fetch(
            "SELECT outcome, details::text AS text FROM audit_events "
            "WHERE action = 'session.transfer' AND resource_id = $1",
            session_id,
        )
    assert len(rows) == len(items)
    assert {row["outcome"] for row in rows} == {"success", "denied"}
    # Never the content.
    assert not any("MZ payload" in row["text"] or "copied" in row["text"] for row in rows)
    missing = await client.get(
        "/api/v1/sessions/00000000-0000-0000-0000-000000000000/transfers",
        headers=place.admin.headers,
    )
    assert missing.status == 404
