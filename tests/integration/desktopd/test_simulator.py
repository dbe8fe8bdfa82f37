"""The desktop daemon simulator speaks guacd's side of the protocol, handshake included."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
from collections.abc import AsyncIterator, Callable

import pytest
from PIL import Image

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.desktopd.protocols import VNC_ARGS
from deskpool.guacamole import Instruction, Status, encode
from deskpool.guacamole.handshake import (
    ClientInfo,
    HandshakeError,
    negotiate_version,
    perform_handshake,
)
from deskpool.guacamole.stream import InstructionReader, StreamClosed
from deskpool.testing import processes


@contextlib.asynccontextmanager
async def daemon_socket(
    daemon: DesktopDaemonSimulator,
) -> AsyncIterator[tuple[InstructionReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection(daemon.host, daemon.port)
    try:
        yield InstructionReader(reader), writer
    finally:
        writer.close()


async def until(reader: InstructionReader, opcode: str) -> list[Instruction]:
    """Every instruction up to and including the first ``opcode``."""
    seen = []
    async with asyncio.timeout(10):
        while True:
            seen.append(await reader.read())
            if seen[-1].opcode == opcode:
                return seen


INFO = ClientInfo(width=800, height=600, dpi=96, timezone="Europe/Paris", name="Ada Lovelace")
TARGET = {"hostname": "demo-01", "port": "5900", "password": "s3cret"}


async def test_handshake_draws_the_desktop_with_png_streams(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    async with daemon_socket(desktop_daemon) as (reader, writer):
        done = await perform_handshake(reader, writer, "vnc", TARGET, INFO, within=5)
        assert done.connection_id.startswith("$")
        assert done.version == (1, 5, 0)
        assert done.arg_names == VNC_ARGS
        frame = await until(reader, "sync")
    received = desktop_daemon.handshakes[-1]
    assert [i.opcode for i in received] == [
        "select", "size", "audio", "video", "image", "timezone", "name", "connect"
    ]  # fmt: skip
    connect = received[-1]
    assert connect.args[0] == "VERSION_1_5_0"
    assert dict(zip(VNC_ARGS, connect.args[1:], strict=True))["hostname"] == "demo-01"
    assert received[1] == Instruction("size", ("800", "600", "96"))
    assert frame[0] == Instruction("name", ("demo-01",))
    assert frame[1] == Instruction("size", ("0", "800", "600"))
    # The whole desktop, in img streams drawn in order: the layout of its size first, then
    # what this desktop draws on it (as guacd sends a frame's changed rectangles).
    images = [i for i in frame if i.opcode == "img"]
    assert images[0] == frame[2]
    assert all(i.args[1:4] == ("14", "0", "image/png") for i in images)
    assert images[0].args[4:6] == ("0", "0")
    blobs = [i for i in frame if i.opcode == "blob"]
    assert all(len(base64.b64decode(b.args[1])) <= 6048 for b in blobs)
    shown = Image.new("RGB", (800, 600))
    for image in images:
        stream = image.args[0]
        png = b"".join(base64.b64decode(b.args[1]) for b in blobs if b.args[0] == stream)
        picture = Image.open(io.BytesIO(png))
        if image is images[0]:
            assert picture.size == (800, 600)
        shown.paste(picture, (int(image.args[4]), int(image.args[5])))
        assert Instruction("end", (stream,)) in frame
    assert len(shown.getcolors(1 << 16) or []) > 3  # drawn, not blank
    assert frame[-2].opcode == "end"
    assert frame[-1].opcode == "sync"


async def test_typing_is_echoed_and_joining_read_only_sees_the_same_desktop(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    async with daemon_socket(desktop_daemon) as (reader, writer):
        done = await perform_handshake(reader, writer, "vnc", TARGET, INFO, within=5)
        await until(reader, "sync")
        writer.write((encode("key", ord("h"), 1) + encode("key", ord("h"), 0)).encode())
        writer.write(encode("mouse", 100, 120, 1).encode())
        await until(reader, "sync")
        connection = desktop_daemon.connections[done.connection_id]
        assert connection.screen.typed == "h"
        assert connection.screen.clicks == [(100, 120)]
        async with daemon_socket(desktop_daemon) as (joined, join_writer):
            shadow = await perform_handshake(
                joined, join_writer, done.connection_id, {"read-only": "true"}, INFO, within=5
            )
            assert shadow.connection_id == done.connection_id
            (frame,) = (await until(joined, "sync"))[-1].args[:1]
            # The daemon reads the read-only user's key, then its acknowledgement of a frame.
            join_writer.write((encode("key", ord("x"), 1) + encode("sync", frame)).encode())
            shadow_user = connection.users[-1]

            async def acknowledged() -> bool:
                return shadow_user.acknowledged == int(frame)

            await processes.until(acknowledged, "the daemon read the read-only user's sync")
            assert connection.screen.typed == "h"
            writer.write(encode("key", ord("i"), 1).encode())
            await until(reader, "sync")
        assert connection.screen.typed == "hi"


@pytest.mark.parametrize(
    ("selection", "status"),
    [
        ("$nope", Status.RESOURCE_NOT_FOUND),  # the join of an unknown connection
        ("telnet", Status.UPSTREAM_ERROR),  # an unsupported protocol: it hangs up
    ],
)
async def test_a_refused_handshake_says_why(
    desktop_daemon: DesktopDaemonSimulator, selection: str, status: Status
) -> None:
    async with daemon_socket(desktop_daemon) as (reader, writer):
        with pytest.raises(HandshakeError) as raised:
            await perform_handshake(reader, writer, selection, {}, INFO, within=5)
    assert raised.value.status is status


async def test_a_connection_with_no_hostname_is_upstream_not_found(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    async with daemon_socket(desktop_daemon) as (reader, writer):
        done = await perform_handshake(reader, writer, "rdp", {}, INFO, within=5)
        assert done.connection_id.startswith("$")
        assert await reader.read() == Instruction(
            "error", ("Unable to connect to RDP server.", str(int(Status.UPSTREAM_NOT_FOUND)))
        )
        assert (await reader.read()).opcode == "disconnect"


async def test_a_sync_for_a_frame_never_sent_or_disconnect_ends_the_user(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    for ending in (encode("sync", 99999999999999), encode("disconnect")):
        async with daemon_socket(desktop_daemon) as (reader, writer):
            await perform_handshake(reader, writer, "vnc", TARGET, INFO, within=5)
            await until(reader, "sync")
            writer.write(ending.encode())
            await until(reader, "disconnect")
            with pytest.raises(StreamClosed):
                await until(reader, "never")
    assert desktop_daemon.connections == {}


async def test_a_silent_user_is_told_it_is_not_responding() -> None:
    daemon = DesktopDaemonSimulator(user_timeout=0.3)
    await daemon.start()
    try:
        async with daemon_socket(daemon) as (reader, writer):
            await perform_handshake(reader, writer, "vnc", TARGET, INFO, within=5)
            seen = await until(reader, "error")
            assert seen[-1].args == ("User is not responding.", str(int(Status.CLIENT_TIMEOUT)))
    finally:
        await daemon.stop()


def test_version_negotiation_takes_the_lower_version() -> None:
    assert negotiate_version("VERSION_1_5_0") == (1, 5, 0)
    assert negotiate_version("VERSION_1_1_0") == (1, 1, 0)
    assert negotiate_version("VERSION_2_0_0") == (1, 5, 0)
    assert negotiate_version("hostname") is None


async def test_a_daemon_without_version_gets_no_timezone_or_name() -> None:
    received: list[bytes] = []

    async def old_guacd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.readuntil(b";"))
        writer.write(encode("args", "hostname", "port").encode())
        received.append(await reader.readuntil(b"connect,"))
        received.append(await reader.readuntil(b";"))
        writer.write(encode("ready", "$old").encode())
        await writer.drain()

    server = await asyncio.start_server(old_guacd, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        done = await perform_handshake(
            InstructionReader(reader), writer, "vnc", {"hostname": "h"}, INFO, within=5
        )
        writer.close()
    assert done.version == (1, 0, 0)
    sent = b"".join(received).decode()
    assert "timezone" not in sent
    assert "4.name" not in sent
    assert sent.endswith(encode("connect", "h", ""))


@pytest.mark.parametrize(
    "early",
    [encode("size", 1280, 800), encode("mouse", 10, 20, 0), encode("key", ord("a"), 1)],
    ids=["size", "mouse", "key"],
)
async def test_input_before_the_first_frame_kills_the_connection_silently(
    desktop_daemon: DesktopDaemonSimulator, early: str
) -> None:
    """What guacd 1.6.0 does, and what the gateway's holding prevents: no gateway here."""
    desktop_daemon.connect_gate.clear()  # the remote desktop has not connected yet
    async with daemon_socket(desktop_daemon) as (reader, writer):
        done = await perform_handshake(reader, writer, "vnc", TARGET, INFO, within=5)
        writer.write((encode("nop") + early).encode())
        await writer.drain()
        user = desktop_daemon.user_of(done.connection_id)
        await until_true(lambda: user.crashed, "the connection crashed")
        assert done.connection_id not in desktop_daemon.connections
        assert not user.writer.is_closing()  # guacd's parent keeps the socket open
        # The remote desktop connects now, but the connection is dead: nothing is drawn.
        desktop_daemon.connect_gate.set()
        writer.write(encode("disconnect").encode())
        await writer.drain()
        await until_true(lambda: user.disconnected, "the daemon recorded disconnect")
        writer.write_eof()
        after_ready = await everything_until_closed(reader)
    assert after_ready == []  # not even its own disconnect
    opcodes = [i.opcode for i in user.received]
    assert opcodes == ["nop", Instruction.parse(early).opcode, "disconnect"]


async def test_the_same_input_after_the_first_frame_is_handled(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    desktop_daemon.connect_gate.clear()
    async with daemon_socket(desktop_daemon) as (reader, writer):
        done = await perform_handshake(reader, writer, "vnc", TARGET, INFO, within=5)
        desktop_daemon.connect_gate.set()
        await until(reader, "sync")
        writer.write((encode("size", 1280, 800) + encode("key", ord("a"), 1)).encode())
        frame = await until(reader, "sync")
        user = desktop_daemon.user_of(done.connection_id)
        assert not user.crashed
        await until_true(
            lambda: desktop_daemon.connections[done.connection_id].screen.typed == "a", "typed"
        )
        assert desktop_daemon.connections[done.connection_id].screen.width == 1280
        assert frame[-1].opcode == "sync"


async def test_the_daemon_records_disconnect(desktop_daemon: DesktopDaemonSimulator) -> None:
    async with daemon_socket(desktop_daemon) as (reader, writer):
        done = await perform_handshake(reader, writer, "vnc", TARGET, INFO, within=5)
        await until(reader, "sync")
        user = desktop_daemon.user_of(done.connection_id)
        assert not user.disconnected
        writer.write(encode("disconnect").encode())
        await until(reader, "disconnect")
    assert user.disconnected
    assert user.received[-1] == Instruction("disconnect")


async def everything_until_closed(reader: InstructionReader) -> list[Instruction]:
    """Every instruction the daemon sends until it closes the socket."""
    received: list[Instruction] = []
    async with asyncio.timeout(10):
        while True:
            try:
                received.append(await reader.read())
            except StreamClosed:
                return received


async def until_true(condition: Callable[[], bool], what: str) -> None:
    """Wait (a generous deadline) until the simulator's state satisfies ``condition``."""

    async def check() -> bool:
        return condition()

    await processes.until(check, what, seconds=10)
