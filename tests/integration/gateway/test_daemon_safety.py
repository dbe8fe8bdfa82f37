"""What the gateway does so that a real guacd neither crashes, nor waits, nor lingers (issue 21).

The desktop daemon simulator behaves like guacd 1.6.0 here: input that reaches it before its
first frame kills the connection silently, and it records ``disconnect``. Its ``connect_gate``,
cleared, holds every new connection before its first frame, so a test knows the browser's
input reached the gateway while the daemon was still connecting.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tests.support.gateway import (
    GatewayHarness,
)

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.desktopd.daemon import SimulatedUser
from deskpool.guacamole import Instruction, Status, encode
from deskpool.guacamole.stream import InstructionReader, StreamClosed
from deskpool.sessions.tunnel import SessionEndReason
from deskpool.testing.processes import until
from deskpool.testing.tunnels import WebSocketTunnelClient
from deskpool_gateway import supervisor
from deskpool_gateway.relay import Tunnel

#: Everything a console sends as soon as it can: its size, typing, the mouse, a clipboard.
EARLY_INPUT = [
    ("size", 1280, 800),
    ("key", ord("a"), 1),
    ("key", ord("a"), 0),
    ("mouse", 10, 20, 1),
    ("clipboard", 7, "text/plain"),
    ("blob", 7, "aGVsbG8="),
    ("end", 7),
]


@pytest.fixture(autouse=True)
def fast_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor, "SWEEP_INTERVAL", 0.05)


async def eventually(condition: Callable[[], object], what: str) -> Any:
    """Wait, with a generous deadline, until ``condition()`` is true (and return it)."""

    async def check() -> object:
        return condition()

    return await until(check, what, seconds=10)


def tunnel_of(gateway: GatewayHarness, token: str) -> Tunnel:
    tunnels = gateway.component.supervisor
    assert tunnels is not None
    return tunnels.tunnels[gateway.broker.grant_of(token).session_id]


async def owner_of(
    gateway: GatewayHarness, daemon: DesktopDaemonSimulator, token: str
) -> SimulatedUser:
    """The daemon's user of the tunnel opened with ``token``, once it is connected."""
    session_id = gateway.broker.grant_of(token).session_id
    connection_id = await eventually(
        lambda: gateway.broker.connected.get(session_id), "the session is connected"
    )
    return daemon.user_of(connection_id)


async def test_input_sent_right_after_the_tunnel_id_waits_for_the_first_frame(
    gateway: GatewayHarness, desktop_daemon: DesktopDaemonSimulator
) -> None:
    for _ in range(8):
        await _open_with_early_input(gateway, desktop_daemon)


async def _open_with_early_input(gateway: GatewayHarness, daemon: DesktopDaemonSimulator) -> None:
    daemon.connect_gate.clear()
    token = gateway.broker.issue()
    client = await gateway.open(token)
    await client.tunnel_id()
    for instruction in EARLY_INPUT:
        await client.send(*instruction)
    expected = "".join(encode(*instruction) for instruction in EARLY_INPUT)
    tunnel = tunnel_of(gateway, token)
    await eventually(lambda: tunnel.input.held == len(expected), "the gateway holds it all")
    user = await owner_of(gateway, daemon, token)
    assert user.received == []  # nothing reached the daemon yet
    daemon.connect_gate.set()
    await client.until("sync")
    await eventually(lambda: len(user.received) >= len(EARLY_INPUT), "input forwarded")
    assert user.received[: len(EARLY_INPUT)] == [
        Instruction(opcode, tuple(str(arg) for arg in args)) for opcode, *args in EARLY_INPUT
    ]
    assert not user.crashed
    screen = daemon.connections[user.connection_id].screen
    await eventually(lambda: screen.typed == "a" and screen.width == 1280, "input applied")
    await client.ws.close()


async def test_a_client_that_sends_size_right_after_the_tunnel_id_opens_every_time(
    gateway: GatewayHarness, desktop_daemon: DesktopDaemonSimulator
) -> None:
    """The client that failed 8 of 8 opens against guacd 1.6.0, with guacd's timing."""
    for _ in range(8):
        await _open_sending_size_at_once(gateway, desktop_daemon)


async def _open_sending_size_at_once(
    gateway: GatewayHarness, daemon: DesktopDaemonSimulator
) -> None:
    token = gateway.broker.issue()
    client = await gateway.open(token)
    await client.tunnel_id()
    await client.send("size", 1280, 800)
    await client.until("sync")
    user = await owner_of(gateway, daemon, token)
    screen = daemon.connections[user.connection_id].screen
    await eventually(lambda: screen.width == 1280, "the desktop resized")
    assert not user.crashed
    await client.ws.close()


async def test_held_input_over_the_limit_ends_the_tunnel(
    start_gateway: Callable[..., Awaitable[GatewayHarness]],
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    harness = await start_gateway(GATEWAY_HELD_INPUT_LIMIT="2048")
    desktop_daemon.connect_gate.clear()
    token = harness.broker.issue()
    client = await harness.open(token)
    await client.tunnel_id()
    user = await owner_of(harness, desktop_daemon, token)
    for x in range(200):  # about 4,000 characters
        await client.send("mouse", x, x, 0)
    closed = await client.closed()
    assert closed.status == Status.CLIENT_OVERRUN
    assert closed.code == 1009
    session_id = harness.broker.grant_of(token).session_id
    assert await harness.broker.wait_ended(session_id) is SessionEndReason.CLIENT_CLOSED
    await eventually(lambda: user.disconnected, "the daemon was sent disconnect")
    assert user.received == [Instruction("disconnect")]
    assert not user.crashed


async def test_a_daemon_that_draws_nothing_is_an_upstream_timeout(
    start_gateway: Callable[..., Awaitable[GatewayHarness]],
    desktop_daemon: DesktopDaemonSimulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only the first-frame rule can close this tunnel: not the 15 s silence rules.
    monkeypatch.setattr(supervisor, "RECEIVE_TIMEOUT", 3600.0)
    harness = await start_gateway(GATEWAY_FIRST_FRAME_TIMEOUT="500ms")
    desktop_daemon.connect_gate.clear()
    token = harness.broker.issue()
    client = await harness.open(token)
    await client.tunnel_id()
    await client.send("size", 1280, 800)
    closed = await client.closed(within=30)
    assert closed.status == Status.UPSTREAM_TIMEOUT
    assert closed.code == 1011
    session_id = harness.broker.grant_of(token).session_id
    assert await harness.broker.wait_ended(session_id) is SessionEndReason.DAEMON_ERROR
    user = await owner_of(harness, desktop_daemon, token)
    await eventually(lambda: user.disconnected, "the daemon was sent disconnect")
    assert user.received == [Instruction("disconnect")]  # the held size was never sent


async def test_a_daemon_that_draws_in_time_is_not_timed_out(
    start_gateway: Callable[..., Awaitable[GatewayHarness]],
) -> None:
    harness = await start_gateway(GATEWAY_FIRST_FRAME_TIMEOUT="1s")
    client = await harness.open(harness.broker.issue())
    await client.until("sync")
    frames = 0
    while frames < 3:  # the clock redraws every second: well past the first-frame bound
        await client.until("sync")
        await client.send("nop")
        frames += 1
    assert not client.ws.closed
    await client.ws.close()


async def _browser_closes(client: WebSocketTunnelClient, harness: GatewayHarness) -> None:
    await client.ws.close()


async def _binary_message(client: WebSocketTunnelClient, harness: GatewayHarness) -> None:
    await client.ws.send_bytes(b"\x00")
    assert (await client.closed()).status == Status.CLIENT_BAD_TYPE


async def _malformed_input(client: WebSocketTunnelClient, harness: GatewayHarness) -> None:
    await client.ws.send_str("4.key,x;")
    assert (await client.closed()).status == Status.CLIENT_BAD_REQUEST


async def _admin_disconnect(client: WebSocketTunnelClient, harness: GatewayHarness) -> None:
    assert client.uuid is not None
    harness.broker.request_disconnect(uuid.UUID(client.uuid))


async def _limit(client: WebSocketTunnelClient, harness: GatewayHarness) -> None:
    pass  # the grant's idle timeout or maximum duration (1.5 s) ends it


async def _shutdown(client: WebSocketTunnelClient, harness: GatewayHarness) -> None:
    await harness.component.stop()


@pytest.mark.parametrize(
    ("end", "reason"),
    [
        (_browser_closes, SessionEndReason.CLIENT_CLOSED),
        (_binary_message, SessionEndReason.CLIENT_CLOSED),
        (_malformed_input, SessionEndReason.CLIENT_CLOSED),
        (_admin_disconnect, SessionEndReason.ADMIN_DISCONNECT),
        (_limit, SessionEndReason.IDLE_TIMEOUT),
        (_limit, SessionEndReason.MAX_DURATION),
        (_shutdown, SessionEndReason.GATEWAY_SHUTDOWN),
    ],
    ids=["browser-closes", "binary", "malformed", "admin", "idle", "max-duration", "shutdown"],
)
async def test_the_daemon_is_sent_disconnect_however_the_tunnel_ends(
    start_gateway: Callable[..., Awaitable[GatewayHarness]],
    desktop_daemon: DesktopDaemonSimulator,
    end: Callable[[WebSocketTunnelClient, GatewayHarness], Awaitable[None]],
    reason: SessionEndReason,
) -> None:
    harness = await start_gateway(GATEWAY_SHUTDOWN_TIMEOUT="100ms")
    limits = {
        SessionEndReason.IDLE_TIMEOUT: {"idle_timeout": 1.5},
        SessionEndReason.MAX_DURATION: {"max_duration": 1.5},
    }
    client, token = await harness.synced(**limits.get(reason, {}))
    user = await owner_of(harness, desktop_daemon, token)
    await end(client, harness)
    session_id = harness.broker.grant_of(token).session_id
    assert await harness.broker.wait_ended(session_id) is reason
    await eventually(lambda: user.disconnected, "the daemon was sent disconnect")
    assert user.received[-1] == Instruction("disconnect")


async def test_a_handshake_that_times_out_ends_with_disconnect_too(
    start_gateway: Callable[..., Awaitable[GatewayHarness]],
) -> None:
    after_connect: list[str] = []
    hung_up = asyncio.Event()

    async def guacd_that_never_gets_ready(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        instructions = InstructionReader(reader)
        await instructions.expect("select")
        writer.write(encode("args", "VERSION_1_5_0", "hostname").encode())
        while (await instructions.read()).opcode != "connect":
            pass
        with contextlib.suppress(StreamClosed):
            while True:
                after_connect.append((await instructions.read()).opcode)
        hung_up.set()

    server = await asyncio.start_server(guacd_that_never_gets_ready, "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        harness = await start_gateway(
            DESKTOPD_ADDRESS=f"127.0.0.1:{port}", GATEWAY_HANDSHAKE_TIMEOUT="500ms"
        )
        client = await harness.open(harness.broker.issue())
        assert (await client.closed()).status == Status.UPSTREAM_TIMEOUT
        async with asyncio.timeout(10):
            await hung_up.wait()
    assert after_connect == ["disconnect"]


async def test_a_read_only_tunnel_forwards_no_input(
    gateway: GatewayHarness, desktop_daemon: DesktopDaemonSimulator
) -> None:
    owner, connection_id, shadow = await gateway.watched()
    frame = await shadow.until("sync")
    watcher = next(u for u in desktop_daemon.users if u.read_only)
    for instruction in [
        *EARLY_INPUT,
        ("touch", 0, 10, 10, 5, 5, 0, 1),
        ("argv", 8, "text/plain", "password"),
        ("file", 9, "text/plain", "notes.txt"),
        ("pipe", 10, "text/plain", "pipe"),
        ("put", 1, 11, "text/plain", "x"),
        ("get", 1, "x"),
        ("audio", 12, "audio/L16;rate=44100,channels=2"),
    ]:
        await shadow.send(*instruction)
    await shadow.send("sync", frame[-1].args[0])  # acknowledging a frame passes
    await shadow.send("nop")
    await shadow.ws.close()
    await eventually(lambda: watcher.disconnected, "the watcher's disconnect reached the daemon")
    assert [i.opcode for i in watcher.received] == ["sync", "nop", "disconnect"]
    screen = desktop_daemon.connections[connection_id].screen
    assert screen.typed == ""
    assert screen.clicks == []
    await owner.ws.close()
