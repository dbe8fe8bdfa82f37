"""The simulator's clipboard, drive, print and sound streams, as guacd 1.6.0 speaks them.

A client speaking guacd's protocol opens an RDP (or VNC) connection with the switches of a
pool's client policy (``disable-copy``, ``disable-paste``, ``enable-drive``, ``disable-upload``,
``disable-download``, ``disable-audio``, ``enable-audio-input``, ``enable-printing``), then
sends and receives the streams: what reached the desktop is checked on the simulator, what left
it on what the client received.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.desktopd.daemon import SimulatedConnection
from deskpool.guacamole import Instruction, Status, encode
from deskpool.guacamole.handshake import ClientInfo, perform_handshake
from deskpool.guacamole.stream import InstructionReader

INFO = ClientInfo(width=800, height=600, dpi=96, timezone="UTC", name="Ada Lovelace")
UNSUPPORTED = str(int(Status.UNSUPPORTED))
FORBIDDEN = str(int(Status.CLIENT_FORBIDDEN))
CONTROL = 0xFFE3


class Client:
    """A guacd client: reads what the daemon sends, acknowledges frames, sends instructions."""

    def __init__(self, reader: InstructionReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.received: list[Instruction] = []

    async def send(self, opcode: str, *args: object) -> None:
        self.writer.write(encode(opcode, *args).encode())
        await self.writer.drain()

    async def next(self, opcode: str, *, first: str | None = None) -> Instruction:
        """The next instruction with ``opcode`` (and first argument ``first``), frames acked."""
        async with asyncio.timeout(10):
            while True:
                instruction = await self.reader.read()
                self.received.append(instruction)
                if instruction.opcode == "sync":
                    await self.send("sync", instruction.args[0])
                if instruction.opcode == opcode and (
                    first is None or instruction.args[:1] == (first,)
                ):
                    return instruction

    async def stream(self, index: str, *, ack: bool) -> bytes:
        """The blobs of stream ``index`` until its ``end`` (acknowledging each, when ``ack``)."""
        data = b""
        if ack:
            await self.send("ack", index, "OK", 0)
        async with asyncio.timeout(10):
            while True:
                instruction = await self.reader.read()
                self.received.append(instruction)
                opcode, args = instruction
                if opcode == "sync":
                    await self.send("sync", args[0])
                elif opcode == "blob" and args[0] == index:
                    data += base64.b64decode(args[1])
                    if ack:
                        await self.send("ack", index, "OK", 0)
                elif opcode == "end" and args[0] == index:
                    return data

    async def send_stream(self, opcode: str, index: int, *args: object, data: bytes) -> None:
        await self.send(opcode, index, *args)
        for start in range(0, len(data), 4096):
            await self.send("blob", index, base64.b64encode(data[start : start + 4096]).decode())
        await self.send("end", index)

    async def control(self, letter: str) -> None:
        await self.send("key", CONTROL, 1)
        await self.send("key", ord(letter), 1)
        await self.send("key", ord(letter), 0)
        await self.send("key", CONTROL, 0)

    async def type(self, text: str) -> None:
        for character in text:
            await self.send("key", ord(character), 1)
            await self.send("key", ord(character), 0)


@contextlib.asynccontextmanager
async def connected(
    daemon: DesktopDaemonSimulator, protocol: str = "rdp", **switches: str
) -> AsyncIterator[tuple[Client, SimulatedConnection]]:
    reader, writer = await asyncio.open_connection(daemon.host, daemon.port)
    instructions = InstructionReader(reader)
    target = {"hostname": "demo-01", "port": "", **switches}
    try:
        done = await perform_handshake(instructions, writer, protocol, target, INFO, within=10)
        client = Client(instructions, writer)
        await client.next("sync")
        connection = daemon.connections[done.connection_id]
        assert isinstance(connection, SimulatedConnection)
        yield client, connection
    finally:
        writer.close()


async def settled(client: Client) -> None:
    """Everything sent so far was handled: a frame drawn after it was acknowledged."""
    await client.send("nop")
    await client.next("sync")
    await client.next("sync")


async def test_a_users_clipboard_becomes_the_desktops_and_is_pasted(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    async with connected(desktop_daemon) as (client, connection):
        await client.send_stream("clipboard", 0, "text/plain", data="héllo wörld".encode())
        await client.control("v")
        await settled(client)
        assert connection.transfers.clipboard == "héllo wörld"
        assert connection.screen.clipboard == "héllo wörld"
        assert connection.screen.typed == "héllo wörld"
        assert not [i for i in client.received if i.opcode == "ack"]  # guacd acks none


async def test_a_clipboard_over_256_kib_is_cut_as_guacd_cuts_it(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    async with connected(desktop_daemon) as (client, connection):
        await client.send_stream("clipboard", 2, "text/plain", data=b"x" * 300_000)
        await settled(client)
        assert connection.transfers.clipboard == "x" * 262144


async def test_disable_paste_refuses_the_clipboard_stream(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    async with connected(desktop_daemon, **{"disable-paste": "true"}) as (client, connection):
        await client.send("clipboard", 0, "text/plain")
        ack = await client.next("ack")
        assert ack == Instruction("ack", ("0", "Clipboard unsupported", UNSUPPORTED))
        await client.send("blob", 0, base64.b64encode(b"secret").decode())
        await client.send("end", 0)
        await settled(client)
        assert connection.transfers.clipboard == ""
        assert not connection.transfers.received


async def test_what_the_desktop_copies_reaches_every_user_unless_copy_is_disabled(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    async with connected(desktop_daemon) as (client, _):
        await client.type("copy me")
        await client.control("c")
        clipboard = await client.next("clipboard")
        index, mimetype = clipboard.args
        assert mimetype == "text/plain"
        assert int(index) % 2 == 0  # a user-level stream
        assert await client.stream(index, ack=False) == b"copy me"
    async with connected(desktop_daemon, **{"disable-copy": "true"}) as (client, connection):
        await client.type("secret")
        await client.control("c")
        await settled(client)
        assert connection.transfers.clipboard == "secret"
        assert "clipboard" not in {i.opcode for i in client.received}


async def test_the_drive_lists_takes_uploads_and_gives_downloads(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    async with connected(desktop_daemon, **{"enable-drive": "true"}) as (client, connection):
        assert await client.next("filesystem") == Instruction("filesystem", ("0", "Shared Drive"))
        content = bytes(range(256)) * 40  # 10240 bytes: three download blobs
        await client.send("put", 0, 4, "application/octet-stream", "/notes.bin")
        assert (await client.next("ack")).args == ("4", "OK (STREAM BEGIN)", "0")
        await client.send("blob", 4, base64.b64encode(content).decode()[:8000])
        assert (await client.next("ack")).args == ("4", "OK (DATA RECEIVED)", "0")
        await client.send("blob", 4, base64.b64encode(content).decode()[8000:])
        assert (await client.next("ack")).args == ("4", "OK (DATA RECEIVED)", "0")
        await client.send("end", 4)
        assert (await client.next("ack")).args == ("4", "OK (STREAM END)", "0")
        assert connection.transfers.files == {"/notes.bin": content}

        await client.send_stream("file", 6, "text/plain", "a/b.txt", data=b"dropped")
        while (await client.next("ack", first="6")).args[1] != "OK (STREAM END)":
            pass
        assert connection.transfers.files["/a_b.txt"] == b"dropped"

        await client.send("get", 0, "/")
        body = await client.next("body")
        index = body.args[1]
        assert body.args[2:] == ("application/vnd.glyptodon.guacamole.stream-index+json", "/")
        assert json.loads(await client.stream(index, ack=True)) == {
            "/Download": "application/vnd.glyptodon.guacamole.stream-index+json",
            "/a_b.txt": "application/octet-stream",
            "/notes.bin": "application/octet-stream",
        }
        await client.send("get", 0, "/notes.bin")
        body = await client.next("body")
        assert body.args[2:] == ("application/octet-stream", "/notes.bin")
        blobs_before = len([i for i in client.received if i.opcode == "blob"])
        assert await client.stream(body.args[1], ack=True) == content
        assert len([i for i in client.received if i.opcode == "blob"]) - blobs_before == 3


async def test_the_desktop_saves_a_download_that_advances_with_each_ack(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    async with connected(desktop_daemon, **{"enable-drive": "true"}) as (client, _):
        await client.type("saved text")
        await client.control("s")
        file = await client.next("file")
        assert file.args[1:] == ("application/octet-stream", "typed.txt")
        await asyncio.sleep(0.2)
        assert not [i for i in client.received if i.opcode == "blob" and i.args[0] == file.args[0]]
        assert await client.stream(file.args[0], ack=True) == b"saved text"


async def test_upload_and_download_switches_refuse_as_guacd_does(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    switches = {"enable-drive": "true", "disable-upload": "true", "disable-download": "true"}
    async with connected(desktop_daemon, **switches) as (client, connection):
        connection.transfers.files["/kept.txt"] = b"kept"
        await client.send("put", 0, 4, "text/plain", "/x.txt")
        assert (await client.next("ack")).args == ("4", "FAIL (UPLOAD DISABLED)", FORBIDDEN)
        await client.send("file", 6, "text/plain", "y.txt")
        assert (await client.next("ack")).args == ("6", "FAIL (UPLOAD DISABLED)", FORBIDDEN)
        await client.send("get", 0, "/kept.txt")
        await client.control("s")
        await settled(client)
        assert not {"body", "file"} & {i.opcode for i in client.received}
        assert connection.transfers.files == {"/kept.txt": b"kept"}
    async with connected(desktop_daemon) as (client, connection):  # no drive at all
        await client.send("file", 2, "text/plain", "y.txt")
        assert (await client.next("ack")).args == ("2", "File transfer unsupported", UNSUPPORTED)
        await client.send("put", 0, 4, "text/plain", "/x.txt")
        assert (await client.next("ack")).args == ("4", "Object write unsupported", UNSUPPORTED)
        assert "filesystem" not in {i.opcode for i in client.received}


async def test_a_printed_page_is_a_pdf_file_stream_only_with_printing_enabled(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    async with connected(desktop_daemon, **{"enable-printing": "true"}) as (client, _):
        await client.control("p")
        file = await client.next("file")
        assert file.args[1:] == ("application/pdf", "guacamole-print.pdf")
        pdf = await client.stream(file.args[0], ack=True)
        assert pdf.startswith(b"%PDF-")
        assert b"%%EOF" in pdf[-64:]
    async with connected(desktop_daemon) as (client, _):
        await client.control("p")
        await settled(client)
        assert "file" not in {i.opcode for i in client.received}


async def test_sound_and_microphone_follow_their_switches(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    async with connected(desktop_daemon, **{"enable-audio-input": "true"}) as (client, conn):
        await client.control("g")
        audio = await client.next("audio")
        assert audio.args[1] == "audio/L16;rate=44100,channels=2"
        assert int(audio.args[0]) % 2 == 1  # a connection-level stream
        assert len(await client.stream(audio.args[0], ack=False)) == 44100 // 5 * 4
        await client.send("audio", 8, "audio/L16;rate=44100,channels=1")
        assert (await client.next("ack")).args == ("8", "OK", "0")
        await client.send("blob", 8, base64.b64encode(bytes(400)).decode())
        await client.send("end", 8)
        await settled(client)
        assert [r.kind for r in conn.transfers.received] == ["microphone"]
    async with connected(desktop_daemon, **{"disable-audio": "true"}) as (client, conn):
        await client.control("g")
        await client.send("audio", 8, "audio/L16;rate=44100,channels=1")
        assert (await client.next("ack")).args == ("8", "Audio input unsupported", UNSUPPORTED)
        assert "audio" not in {i.opcode for i in client.received}
    async with connected(desktop_daemon, "vnc") as (client, _):  # VNC: sound only when enabled
        await client.control("g")
        await settled(client)
        assert "audio" not in {i.opcode for i in client.received}


async def test_a_read_only_user_receives_the_clipboard_but_sends_none(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    async with connected(desktop_daemon, **{"read-only": "true"}) as (client, connection):
        await client.send_stream("clipboard", 0, "text/plain", data=b"from a watcher")
        await settled(client)
        assert connection.transfers.clipboard == ""
