"""The simulator's VNC bridge against a real X server served by a real VNC server (x11vnc).

Xvfb shows a blue root window and an xterm; x11vnc serves it with and without a VNC password.
The clipboard crosses the bridge both ways: read and set on the X server with ``xclip``.
A client speaking guacd's protocol to the simulator draws what it receives (``size``, PNG
``img`` streams, ``copy``) on a canvas of its own: the canvas becomes the screen ``xwd`` reads,
pixel for pixel. Keys it types reach the xterm once its pointer is over it (the X server gives
the keyboard to the window under the pointer), and a wrong password ends cleanly as guacd ends
it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from PIL import Image, ImageChops

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.desktopd.rfb import CopyRect, Update
from deskpool.desktopd.vnc import BridgedConnection, VncBridge
from deskpool.guacamole import Instruction, Status, encode
from deskpool.guacamole.handshake import ClientInfo, perform_handshake
from deskpool.guacamole.stream import InstructionReader, StreamClosed
from deskpool.testing.processes import until
from deskpool.testing.x11 import ROOT_COLOUR, VncServer, XDisplay, vnc_server, x_display

INFO = ClientInfo(width=1024, height=768, dpi=96, timezone="UTC", name="Ada Lovelace")
PASSWORD = "s3cret-pw"
#: The xterm's place on the screen: away from the pointer's start at 0,0.
XTERM_AT = (200, 150)
#: Seconds between two ``nop`` of a viewer (guacamole-common-js's keep-alive).
KEEP_ALIVE = 5.0


class Canvas:
    """What a Guacamole client draws from the instructions of layer 0."""

    def __init__(self) -> None:
        self.image = Image.new("RGB", (1, 1))
        self.streams: dict[str, tuple[int, int, list[bytes]]] = {}
        self.copies = 0
        self.last_sync = ""

    def apply(self, instruction: Instruction) -> None:
        opcode, args = instruction
        if opcode == "size" and args[0] == "0":
            resized = Image.new("RGB", (int(args[1]), int(args[2])))
            resized.paste(self.image, (0, 0))
            self.image = resized
        elif opcode == "img":
            assert args[1:4] == ("14", "0", "image/png"), args
            self.streams[args[0]] = (int(args[4]), int(args[5]), [])
        elif opcode == "blob" and args[0] in self.streams:
            self.streams[args[0]][2].append(base64.b64decode(args[1]))
        elif opcode == "end" and args[0] in self.streams:
            x, y, chunks = self.streams.pop(args[0])
            self.image.paste(Image.open(io.BytesIO(b"".join(chunks))).convert("RGB"), (x, y))
        elif opcode == "copy":
            sx, sy, w, h, mode, dst, dx, dy = map(int, args[1:])
            assert (args[0], mode, dst) == ("0", 14, 0), args
            self.image.paste(self.image.crop((sx, sy, sx + w, sy + h)), (dx, dy))
            self.copies += 1
        elif opcode == "sync":
            self.last_sync = args[0]


class Viewer:
    """A guacd client of the simulator: it draws, acknowledges frames, and can type.

    Like guacamole-common-js it sends ``nop`` every :data:`KEEP_ALIVE` seconds: guacd (and
    the simulator) drops a user silent for 15 s, and a still screen sends no frame to answer.
    """

    def __init__(self, reader: InstructionReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.canvas = Canvas()
        self.received: list[Instruction] = []
        self.synced = asyncio.Event()
        self.ended = asyncio.Event()

    async def follow(self) -> None:
        with contextlib.suppress(StreamClosed, ConnectionError):
            while True:
                instruction = await self.reader.read()
                self.received.append(instruction)
                self.canvas.apply(instruction)
                if instruction.opcode == "sync":
                    await self.send("sync", instruction.args[0])
                    self.synced.set()
        self.ended.set()

    async def keep_alive(self) -> None:
        with contextlib.suppress(ConnectionError):
            while not self.ended.is_set():
                await asyncio.sleep(KEEP_ALIVE)
                await self.send("nop")

    async def send(self, opcode: str, *args: object) -> None:
        self.writer.write(encode(opcode, *args).encode())
        await self.writer.drain()

    async def type(self, text: str) -> None:
        for character in text:
            keysym = 0xFF0D if character == "\n" else ord(character)
            await self.send("key", keysym, 1)
            await self.send("key", keysym, 0)


@contextlib.asynccontextmanager
async def viewing(
    daemon: DesktopDaemonSimulator, server: VncServer, password: str = "", **switches: str
) -> AsyncIterator[Viewer]:
    reader, writer = await asyncio.open_connection(daemon.host, daemon.port)
    instructions = InstructionReader(reader)
    target = {"hostname": "127.0.0.1", "port": str(server.port), "password": password}
    target |= switches
    await perform_handshake(instructions, writer, "vnc", target, INFO, within=10)
    viewer = Viewer(instructions, writer)
    following = asyncio.create_task(viewer.follow())
    pinging = asyncio.create_task(viewer.keep_alive())
    try:
        yield viewer
    finally:
        writer.close()
        for task in (following, pinging):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@pytest.fixture
async def bridging_daemon() -> AsyncIterator[DesktopDaemonSimulator]:
    daemon = DesktopDaemonSimulator("127.0.0.1", 0, vnc_bridge=VncBridge.loopback())
    await daemon.start()
    try:
        yield daemon
    finally:
        await daemon.stop()


@pytest.fixture
async def display(tmp_path: Path) -> AsyncIterator[XDisplay]:
    async with x_display(640, 480) as display:
        yield display


async def xterm_reading_a_line(display: XDisplay, into: Path) -> None:
    """An xterm that shows a banner and writes the line typed into it to ``into``, mapped."""
    script = f'echo DESKPOOL VNC BRIDGE; read line; printf %s "$line" > {into}; exec sleep 600'
    x, y = XTERM_AT
    display.spawn("xterm", "-geometry", f"40x8+{x}+{y}", "-e", "sh", "-c", script)

    async def mapped() -> bool:
        return b"xterm" in (await display.run("xwininfo", "-root", "-children")).lower()

    await until(mapped, "the xterm is on the screen", seconds=60, every=0.2)


async def canvas_shows_the_screen(viewer: Viewer, display: XDisplay) -> None:
    async def same() -> bool:
        screen = await display.screenshot()
        picture = viewer.canvas.image
        return picture.size == screen.size and not ImageChops.difference(picture, screen).getbbox()

    await until(same, "the bridged picture is the X screen", seconds=60, every=0.2)


async def test_the_bridge_shows_the_x_screen_and_types_into_it(
    bridging_daemon: DesktopDaemonSimulator, display: XDisplay, tmp_path: Path
) -> None:
    typed = tmp_path / "typed.txt"
    await xterm_reading_a_line(display, typed)
    async with vnc_server(display) as server, viewing(bridging_daemon, server) as viewer:
        await canvas_shows_the_screen(viewer, display)
        assert viewer.received[0] == Instruction("size", ("0", "640", "480"))
        assert viewer.canvas.image.getpixel((5, 5)) == ROOT_COLOUR
        await viewer.synced.wait()  # input only after the first frame was acknowledged
        await viewer.send("mouse", XTERM_AT[0] + 60, XTERM_AT[1] + 40, 0)
        await viewer.type("hello from deskpool\n")
        await until(
            lambda: asyncio.to_thread(lambda: typed.exists() and typed.read_text()),
            "the typed line reached the xterm",
            seconds=60,
            every=0.2,
        )
        assert typed.read_text() == "hello from deskpool"
        await canvas_shows_the_screen(viewer, display)


@pytest.mark.parametrize(
    ("version", "password"),
    [("3.8", PASSWORD), ("3.7", PASSWORD), ("3.3", PASSWORD), ("3.7", None), ("3.3", None)],
)
async def test_each_rfb_version_with_and_without_vnc_authentication(
    bridging_daemon: DesktopDaemonSimulator, display: XDisplay, version: str, password: str | None
) -> None:
    async with (
        vnc_server(display, password=password, rfb_version=version) as server,
        viewing(bridging_daemon, server, password or "") as viewer,
    ):
        await canvas_shows_the_screen(viewer, display)
        assert viewer.canvas.image.getcolors() == [(640 * 480, ROOT_COLOUR)]
        (connection,) = bridging_daemon.connections.values()
        assert isinstance(connection, BridgedConnection)
        assert connection.client.version == tuple(map(int, version.split(".")))


async def test_a_server_that_goes_away_ends_the_connection_as_guacd_does(
    bridging_daemon: DesktopDaemonSimulator, display: XDisplay
) -> None:
    async with vnc_server(display) as server, viewing(bridging_daemon, server) as viewer:
        await canvas_shows_the_screen(viewer, display)
        server.process.kill()
        async with asyncio.timeout(30):
            await viewer.ended.wait()
        status = str(int(Status.UPSTREAM_ERROR))
        assert viewer.received[-2:] == [
            Instruction("error", ("Connection closed.", status)),
            Instruction("disconnect", ()),
        ]


async def test_a_copy_rect_becomes_a_copy_that_draws_what_the_bridge_holds(
    bridging_daemon: DesktopDaemonSimulator, display: XDisplay, tmp_path: Path
) -> None:
    await xterm_reading_a_line(display, tmp_path / "unused.txt")
    async with vnc_server(display) as server, viewing(bridging_daemon, server) as viewer:
        await canvas_shows_the_screen(viewer, display)
        (connection,) = bridging_daemon.connections.values()
        assert isinstance(connection, BridgedConnection)
        # x11vnc sends no CopyRect without a window manager: the bridge applies one as a
        # server's, and the client's canvas follows the instructions it yields.
        canvas = Canvas()
        canvas.image = connection.framebuffer.copy()
        text = connection.apply(Update((CopyRect(20, 20, 200, 60, *XTERM_AT),)))
        stream = asyncio.StreamReader()
        stream.feed_data(text.encode())
        stream.feed_eof()
        instructions = InstructionReader(stream)
        with contextlib.suppress(StreamClosed):
            while True:
                canvas.apply(await instructions.read())
        assert canvas.copies == 1
        assert not ImageChops.difference(canvas.image, connection.framebuffer).getbbox()
        assert connection.framebuffer.crop((20, 20, 220, 80)) != Image.new(
            "RGB", (200, 60), ROOT_COLOUR
        )


@pytest.mark.parametrize("password", ["wrong-password", ""])
async def test_a_refused_password_ends_as_guacd_ends_it(
    bridging_daemon: DesktopDaemonSimulator, display: XDisplay, password: str
) -> None:
    async with (
        vnc_server(display, password=PASSWORD) as server,
        viewing(bridging_daemon, server, password) as viewer,
    ):
        async with asyncio.timeout(30):
            await viewer.ended.wait()
        status = str(int(Status.UPSTREAM_NOT_FOUND))
        assert viewer.received == [
            Instruction("error", ("Unable to connect to VNC server.", status)),
            Instruction("disconnect", ()),
        ]
    assert not bridging_daemon.connections


async def test_unbridged_hosts_still_get_the_simulated_desktop(
    bridging_daemon: DesktopDaemonSimulator,
) -> None:
    reader, writer = await asyncio.open_connection(bridging_daemon.host, bridging_daemon.port)
    instructions = InstructionReader(reader)
    try:
        target = {"hostname": "demo-01", "port": "5900", "password": ""}
        await perform_handshake(instructions, writer, "vnc", target, INFO, within=10)
        async with asyncio.timeout(10):
            first = await instructions.read()
        assert first == Instruction("name", ("demo-01",))
    finally:
        writer.close()


def test_which_hosts_are_bridged() -> None:
    bridge = VncBridge.of(["127.0.0.0/8", "fd00::/8"])
    assert bridge.covers("127.0.0.1")
    assert bridge.covers("localhost")
    assert bridge.covers("[fd00::5]")
    assert not bridge.covers("10.0.0.1")
    assert not bridge.covers("demo-01")
    assert not VncBridge().covers("127.0.0.1")
    with pytest.raises(ValueError):
        VncBridge.of(["not-a-network"])


@contextlib.asynccontextmanager
async def clipboard_viewer(
    daemon: DesktopDaemonSimulator, display: XDisplay, **switches: str
) -> AsyncIterator[Viewer]:
    """A viewer of ``display`` through x11vnc and the bridge, once its first frame was shown."""
    async with vnc_server(display) as server, viewing(daemon, server, **switches) as viewer:
        await canvas_shows_the_screen(viewer, display)
        await viewer.synced.wait()
        yield viewer


async def test_the_users_clipboard_reaches_the_x_clipboard_through_x11vnc(
    bridging_daemon: DesktopDaemonSimulator, display: XDisplay
) -> None:
    async with clipboard_viewer(bridging_daemon, display, **UTF8) as viewer:
        # A user's clipboard stream becomes ClientCutText, which x11vnc puts on the X
        # CLIPBOARD selection. x11vnc takes the selection only once its selection window
        # exists (made in its event loop, a moment after a viewer connects; until then it
        # keeps the text in CUT_BUFFER0 only): the user copies again until it holds.
        async def in_x() -> bool:
            await viewer.send("clipboard", 0, "text/plain")
            await viewer.send("blob", 0, base64.b64encode("to the desktop é".encode()).decode())
            await viewer.send("end", 0)
            return await display.clipboard() == "to the desktop é"

        await until(in_x, "the X clipboard holds what the user sent", seconds=30, every=0.2)


async def test_the_x_clipboard_reaches_the_user_through_x11vnc(
    bridging_daemon: DesktopDaemonSimulator, display: XDisplay
) -> None:
    async with clipboard_viewer(bridging_daemon, display, **UTF8) as viewer:
        # An X program copies; x11vnc sends ServerCutText; the user gets a clipboard stream.
        await display.set_clipboard("from the desktop ü")

        async def out() -> bool:
            assert not viewer.ended.is_set(), f"the user was dropped: {viewer.received[-3:]}"
            return "from the desktop ü" in clipboard_texts(viewer.received)

        await until(out, "the user received the X clipboard", X11VNC_FIRST_SEND, every=0.2)


async def test_disable_copy_and_paste_hold_the_clipboard_at_the_bridge(
    bridging_daemon: DesktopDaemonSimulator, display: XDisplay
) -> None:
    switches = {"disable-copy": "true", "disable-paste": "true"}
    async with clipboard_viewer(bridging_daemon, display, **switches) as viewer:
        (connection,) = bridging_daemon.connections.values()
        await display.set_clipboard("kept in the desktop")
        await viewer.send("clipboard", 0, "text/plain")
        await viewer.send("blob", 0, base64.b64encode(b"kept out").decode())
        await viewer.send("end", 0)

        async def refused() -> bool:
            return Instruction("ack", ("0", "Clipboard unsupported", "256")) in viewer.received

        await until(refused, "the clipboard stream was refused", seconds=30, every=0.2)
        assert await display.clipboard() == "kept in the desktop"

        # x11vnc does send the X clipboard (the bridge holds it): the user gets no stream.
        async def reached_the_bridge() -> bool:
            return connection.transfers.clipboard == "kept in the desktop"

        await until(reached_the_bridge, "x11vnc sent the X clipboard", X11VNC_FIRST_SEND, 0.2)
        await asyncio.sleep(0.5)  # the bridge's users would have had it by now
        assert not viewer.ended.is_set(), viewer.received[-3:]
        assert not clipboard_texts(viewer.received)


#: How long x11vnc may take to send the X clipboard to a new viewer, in seconds: it sends none
#: until 15 s after a viewer connected (its ``sel_waittime``, which no option changes), then asks
#: for the selection every second or two. Meanwhile a viewer keeps its connection alive
#: (:data:`KEEP_ALIVE`): a silent one is dropped at 15 s, as guacd drops it, which is how this
#: test lost the race in 4 of 6 runs before the viewer sent ``nop``.
X11VNC_FIRST_SEND = 40.0


#: X programs (xclip here) put UTF-8 in the STRING selection x11vnc reads and writes:
#: clipboard-encoding UTF-8 carries it unchanged (guacd's default, ISO8859-1, would not).
UTF8 = {"clipboard-encoding": "UTF-8"}


def clipboard_texts(received: list[Instruction]) -> list[str]:
    """The texts of the complete clipboard streams among ``received``."""
    open_streams: dict[str, bytes] = {}
    texts: list[str] = []
    for opcode, args in list(received):
        if opcode == "clipboard":
            open_streams[args[0]] = b""
        elif opcode == "blob" and args[0] in open_streams:
            open_streams[args[0]] += base64.b64decode(args[1])
        elif opcode == "end" and args[0] in open_streams:
            texts.append(open_streams.pop(args[0]).decode())
    return texts
