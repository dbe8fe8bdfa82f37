"""Timeouts, heartbeats, disconnect requests, shadowing and the drain at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest
from tests.support.gateway import (
    GatewayHarness,
)

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.guacamole import Instruction, Status, encode
from deskpool.guacamole.stream import InstructionReader
from deskpool.sessions.tunnel import SessionEndReason
from deskpool.testing.processes import until
from deskpool_gateway import supervisor


@pytest.fixture(autouse=True)
def fast_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor, "SWEEP_INTERVAL", 0.05)


async def test_idle_timeout_of_the_pool_policy(gateway: GatewayHarness) -> None:
    token = gateway.broker.issue(idle_timeout=0.6)
    client = await gateway.open(token)
    await client.until("sync")
    for _ in range(3):  # pings and frame acknowledgements are not user input
        await client.ping(1)
        await client.send("sync", 0)
    closed = await client.closed()
    assert closed.status == Status.SESSION_TIMEOUT
    session_id = gateway.broker.grant_of(token).session_id
    assert await gateway.broker.wait_ended(session_id) is SessionEndReason.IDLE_TIMEOUT


async def test_typing_keeps_a_session_from_idling(
    gateway: GatewayHarness, desktop_daemon: DesktopDaemonSimulator
) -> None:
    idle_timeout = 0.5
    token = gateway.broker.issue(idle_timeout=idle_timeout)
    client = await gateway.open(token)
    await client.until("sync")
    screen = desktop_daemon.connections[gateway.connection_of(token)].screen
    # Type for three idle timeouts, each key a round trip: the daemon draws it and ends the frame
    # with a sync, which the tunnel delivers; a close from the gateway raises TunnelClosed.
    typed = ""
    typing_until = time.monotonic() + 3 * idle_timeout
    while time.monotonic() < typing_until:
        key = "abc"[len(typed) % 3]
        await client.send("key", ord(key), 1)
        await client.send("key", ord(key), 0)
        typed += key
        async with asyncio.timeout(10):
            await client.until("sync")
            while screen.typed != typed:
                await client.until("sync")
        with contextlib.suppress(TimeoutError):  # a pause spent reading what the tunnel sends
            async with asyncio.timeout(idle_timeout / 4):
                while True:
                    await client.read()
    assert screen.typed == typed
    assert gateway.broker.grant_of(token).session_id not in gateway.broker.ended
    await client.ws.close()


async def test_the_gateway_ceiling_applies_when_the_policy_sets_none(
    start_gateway: Callable[..., Any],
) -> None:
    harness: GatewayHarness = await start_gateway(GATEWAY_MAX_SESSION_DURATION="1s")
    token = harness.broker.issue()
    client = await harness.open(token)
    assert (await client.closed()).status == Status.SESSION_CLOSED
    session_id = harness.broker.grant_of(token).session_id
    assert await harness.broker.wait_ended(session_id) is SessionEndReason.MAX_DURATION


async def test_maximum_duration_of_the_pool_policy(gateway: GatewayHarness) -> None:
    token = gateway.broker.issue(max_duration=0.5)
    client = await gateway.open(token)
    await client.send("key", 97, 1)
    assert (await client.closed()).status == Status.SESSION_CLOSED


async def test_a_disconnect_request_closes_the_tunnel_at_once(gateway: GatewayHarness) -> None:
    token = gateway.broker.issue()
    session_id = gateway.broker.grant_of(token).session_id
    client = await gateway.open(token)
    await client.until("sync")
    gateway.broker.request_disconnect(session_id)
    closed = await client.closed(within=3)
    assert closed.status == Status.SESSION_CLOSED
    assert await gateway.broker.wait_ended(session_id) is SessionEndReason.ADMIN_DISCONNECT


async def test_heartbeats_report_bytes_and_activity(start_gateway: Callable[..., Any]) -> None:
    harness: GatewayHarness = await start_gateway(GATEWAY_LEASE_DURATION="300ms")
    token = harness.broker.issue()
    session_id = harness.broker.grant_of(token).session_id
    client = await harness.open(token)
    await client.until("sync")
    await client.send("key", 97, 1)
    await client.until("sync")
    await harness.broker.wait_heartbeat()
    gateway_id, counters = harness.broker.heartbeats[-1]
    assert gateway_id == harness.component.gateway_id
    assert counters[session_id].bytes_to_browser > 0
    assert counters[session_id].bytes_to_desktop > 0
    await client.ws.close()


async def test_a_session_the_heartbeat_hands_back_is_closed(
    start_gateway: Callable[..., Any],
) -> None:
    """A relayed session the broker ended as lost and cannot reopen: the gateway closes it."""
    harness: GatewayHarness = await start_gateway(GATEWAY_LEASE_DURATION="300ms")
    token = harness.broker.issue()
    session_id = harness.broker.grant_of(token).session_id
    client = await harness.open(token)
    await client.until("sync")
    harness.broker.lost.add(session_id)
    closed = await client.closed(within=3)
    assert closed.status == Status.SESSION_CLOSED
    assert await harness.broker.wait_ended(session_id) is SessionEndReason.GATEWAY_LOST


async def test_a_vanished_browser_is_a_client_timeout(
    gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor, "RECEIVE_TIMEOUT", 0.5)
    client = await gateway.open(gateway.broker.issue())
    assert (await client.closed()).status == Status.CLIENT_TIMEOUT


async def test_a_silent_daemon_is_an_upstream_timeout(
    start_gateway: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor, "RECEIVE_TIMEOUT", 0.5)

    async def mute_guacd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        instructions = InstructionReader(reader)
        await instructions.expect("select")
        writer.write(encode("args", "VERSION_1_5_0", "hostname").encode())
        while (await instructions.read()).opcode != "connect":
            pass
        writer.write(encode("ready", "$mute").encode())
        await reader.read()

    server = await asyncio.start_server(mute_guacd, "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        harness: GatewayHarness = await start_gateway(DESKTOPD_ADDRESS=f"127.0.0.1:{port}")
        client = await harness.open(harness.broker.issue())

        async def keep_pinging() -> None:
            with contextlib.suppress(ConnectionError):
                while True:
                    await client.ping(1)
                    await asyncio.sleep(0.1)

        pinging = asyncio.create_task(keep_pinging())
        closed = await client.closed()
        pinging.cancel()
        assert closed.status == Status.UPSTREAM_TIMEOUT


async def test_an_administrator_shadows_a_session_read_only(
    gateway: GatewayHarness, desktop_daemon: DesktopDaemonSimulator
) -> None:
    owner, connection_id, shadow = await gateway.watched()
    frame = (await shadow.until("sync"))[-1].args[0]
    join = desktop_daemon.handshakes[-1]
    assert join[0] == Instruction("select", (connection_id,))
    connection = desktop_daemon.connections[connection_id]
    watcher = connection.users[-1]
    # The daemon reads the watcher's key, then the watcher's acknowledgement of a frame.
    await shadow.send("key", ord("x"), 1)
    await shadow.send("sync", frame)

    async def acknowledged() -> bool:
        return watcher.acknowledged == int(frame)

    await until(acknowledged, "the daemon read the watcher's sync")
    assert connection.screen.typed == ""
    await owner.send("key", ord("y"), 1)
    async with asyncio.timeout(10):
        while connection.screen.typed != "y":
            await owner.until("sync")
    await shadow.ws.close()
    await owner.ws.close()


async def test_shutdown_drains_then_closes_open_tunnels(
    start_gateway: Callable[..., Any],
) -> None:
    harness: GatewayHarness = await start_gateway(GATEWAY_SHUTDOWN_TIMEOUT="300ms")
    token = harness.broker.issue()
    client = await harness.open(token)
    await client.until("sync")
    stopping = asyncio.create_task(harness.component.stop())
    closed = await client.closed()
    await stopping
    assert closed.status == Status.UPSTREAM_UNAVAILABLE
    session_id = harness.broker.grant_of(token).session_id
    assert harness.broker.ended[session_id][0] is SessionEndReason.GATEWAY_SHUTDOWN
    assert harness.broker.released == [harness.component.gateway_id]
