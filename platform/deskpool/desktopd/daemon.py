"""The desktop daemon simulator: the guacd side of the Guacamole protocol, over TCP.

It behaves as guacd 1.6.0 does where a client can tell:

- it waits ``GUACD_TIMEOUT`` (15 s) for ``select``; a ``select`` without exactly one argument, or
  of a protocol it does not support, closes the socket without a word (guacd logs and hangs up);
  ``select`` of a ``$id`` joins that connection, or answers ``error "No such connection." 516``;
- it answers ``args`` with ``VERSION_1_5_0`` and the real argument names of guacd's ``vnc`` or
  ``rdp`` plugin, reads ``size``, ``audio``, ``video``, ``image``, ``timezone`` and ``name``
  until ``connect``, answers ``ready`` with the connection's ``$id``, and only then checks that
  ``connect`` carried one value per argument (closing otherwise, as guacd does);
- a connection without a ``hostname`` fails as guacd's VNC plugin fails to reach its server:
  ``error "Unable to connect to VNC server." 519`` then ``disconnect``;
- then it draws its own desktop (:mod:`deskpool.desktopd.screen`) with ``img`` streams of PNG
  (``blob`` chunks of at most 6048 bytes, then ``end``), ends each frame with
  ``sync,timestamp,frames``, echoes typed keys, follows the mouse, and sends ``nop`` when it has
  been silent for 5 s;
- a user who sends nothing for 15 s gets ``error "User is not responding." 776``; a ``sync``
  acknowledging a frame never sent, or ``disconnect``, ends that user with ``disconnect``;
- read-only users (``read-only`` = ``true``) see everything and change nothing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass, field

from deskpool.desktopd.protocols import PROTOCOL_ARGS, PROTOCOL_VERSION
from deskpool.desktopd.screen import Box, DesktopScreen
from deskpool.guacamole import Instruction, ProtocolError, Status, encode
from deskpool.guacamole.stream import InstructionReader, StreamClosed

__all__ = ["DesktopDaemonSimulator"]

log = logging.getLogger(__name__)

#: ``GUACD_TIMEOUT``: how long guacd waits for each instruction, in seconds.
GUACD_TIMEOUT = 15.0
#: ``GUAC_SOCKET_KEEP_ALIVE_INTERVAL``: silence after which guacd sends ``nop``.
KEEP_ALIVE_INTERVAL = 5.0
#: ``GUAC_PROTOCOL_BLOB_MAX_LENGTH``: the most bytes in one ``blob``.
BLOB_MAX_LENGTH = 6048
#: Shortest time between two frames drawn for input.
FRAME_INTERVAL = 0.04
#: ``GUAC_COMP_OVER``: draw normally.
COMPOSITE_OVER = 14


def now_ms() -> int:
    """guacd's timestamps: milliseconds since the epoch."""
    return int(time.time() * 1000)


@dataclass(eq=False)
class SimulatedUser:
    """One socket joined to a connection."""

    writer: asyncio.StreamWriter
    read_only: bool
    name: str
    last_write: float = field(default_factory=time.monotonic)
    closed: bool = False

    async def send(self, text: str) -> None:
        """Write ``text`` and wait for the socket to take it."""
        if self.closed:
            return
        self.writer.write(text.encode())
        self.last_write = time.monotonic()
        try:
            await self.writer.drain()
        except (ConnectionError, RuntimeError):
            self.closed = True


@dataclass(eq=False)
class SimulatedConnection:
    """A guacd connection (a ``guac_client``): one desktop shared by its users."""

    id: str
    protocol: str
    screen: DesktopScreen
    users: list[SimulatedUser] = field(default_factory=list)
    last_sent_timestamp: int = 0
    dirty: list[Box] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    renderer: asyncio.Task[None] | None = None
    stream_index: int = 0

    async def broadcast(self, text: str) -> None:
        """Send ``text`` to every user still connected."""
        users = [user for user in self.users if not user.closed]
        await asyncio.gather(*(user.send(text) for user in users))

    def frame(self, boxes: list[Box]) -> str:
        """The instructions that draw ``boxes`` and end the frame."""
        parts: list[str] = []
        for box in boxes:
            region = self.screen.region(box)
            self.stream_index = (self.stream_index + 1) % 64
            index = self.stream_index
            parts.append(encode("img", index, COMPOSITE_OVER, 0, "image/png", region.x, region.y))
            data = region.png
            for start in range(0, len(data), BLOB_MAX_LENGTH):
                chunk = base64.b64encode(data[start : start + BLOB_MAX_LENGTH]).decode()
                parts.append(encode("blob", index, chunk))
            parts.append(encode("end", index))
        self.last_sent_timestamp = now_ms()
        parts.append(encode("sync", self.last_sent_timestamp, 1))
        return "".join(parts)

    def mark(self, *boxes: Box | None) -> None:
        """Schedule ``boxes`` for the next frame."""
        self.dirty.extend(box for box in boxes if box is not None)
        self.changed.set()

    async def render(self) -> None:
        """Draw what changed, the clock every second, and keep quiet users' sockets alive."""
        while self.users:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0 - time.time() % 1.0):
                    await self.changed.wait()
            self.changed.clear()
            if not self.dirty:
                self.dirty.append(self.screen.tick(time.time()))
            boxes, self.dirty = self.dirty, []
            await self.broadcast(self.frame(boxes))
            quiet = [u for u in self.users if time.monotonic() - u.last_write > KEEP_ALIVE_INTERVAL]
            await asyncio.gather(*(user.send(encode("nop")) for user in quiet))
            await asyncio.sleep(FRAME_INTERVAL)


class HandshakeFailed(Exception):
    """The handshake ends here; ``reply`` is what guacd sends before hanging up."""

    def __init__(self, reason: str, reply: str = "") -> None:
        super().__init__(reason)
        self.reply = reply


class DesktopDaemonSimulator:
    """A TCP server speaking the guacd side of the protocol.

    :param host: address to listen on.
    :param port: port to listen on (0: any free port; see :attr:`port`).
    :param user_timeout: seconds a user may stay silent (guacd: 15).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, user_timeout: float = 15.0):
        self.host = host
        self.port = port
        self.user_timeout = user_timeout
        self.connections: dict[str, SimulatedConnection] = {}
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        #: The instructions of the latest handshakes, as received (for tests and diagnosis).
        self.handshakes: deque[list[Instruction]] = deque(maxlen=100)

    @property
    def address(self) -> str:
        """``host:port`` it listens on."""
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        """Listen."""
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("desktop daemon simulator listening on %s", self.address)

    async def stop(self) -> None:
        """Stop listening and end every connection."""
        if self._server is not None:
            self._server.close()
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, StreamClosed, ProtocolError, TimeoutError) as error:
            log.debug("desktop daemon simulator: a socket ended: %s", error)
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        instructions = InstructionReader(reader)
        seen: list[Instruction] = []
        self.handshakes.append(seen)
        try:
            connection, user = await self._handshake(instructions, writer, seen)
        except HandshakeFailed as failed:
            log.debug("desktop daemon simulator: handshake failed: %s", failed)
            if failed.reply:
                writer.write(failed.reply.encode())
                await writer.drain()
            return
        try:
            await self._user_loop(instructions, connection, user)
        finally:
            user.closed = True
            connection.users.remove(user)
            if not connection.users:
                self.connections.pop(connection.id, None)
                connection.changed.set()

    async def _read(self, instructions: InstructionReader, seen: list[Instruction]) -> Instruction:
        async with asyncio.timeout(GUACD_TIMEOUT):
            instruction = await instructions.read()
        seen.append(instruction)
        return instruction

    async def _handshake(
        self, instructions: InstructionReader, writer: asyncio.StreamWriter, seen: list[Instruction]
    ) -> tuple[SimulatedConnection, SimulatedUser]:
        select = await self._read(instructions, seen)
        if select.opcode != "select" or len(select.args) != 1:
            raise HandshakeFailed("expected select with one argument")
        identifier = select.args[0]
        existing: SimulatedConnection | None = None
        if identifier.startswith("$"):
            existing = self.connections.get(identifier)
            if existing is None:
                raise HandshakeFailed(
                    "no such connection",
                    encode("error", "No such connection.", int(Status.RESOURCE_NOT_FOUND)),
                )
            protocol = existing.protocol
        elif identifier in PROTOCOL_ARGS:
            protocol = identifier
        else:
            raise HandshakeFailed(f"support for protocol {identifier!r} is not installed")
        names = PROTOCOL_ARGS[protocol]
        writer.write(encode("args", PROTOCOL_VERSION, *names).encode())
        await writer.drain()
        info: dict[str, tuple[str, ...]] = {}
        while True:
            instruction = await self._read(instructions, seen)
            if instruction.opcode == "connect":
                break
            if instruction.opcode == "size" and len(instruction.args) < 2:
                raise HandshakeFailed("size lacked required arguments")
            info[instruction.opcode] = instruction.args
        connection_id = existing.id if existing else f"${uuid.uuid4()}"
        writer.write(encode("ready", connection_id).encode())
        await writer.drain()
        if len(instruction.args) != len(names) + 1:
            raise HandshakeFailed("connect did not carry one value per argument")
        values = dict(zip(names, instruction.args[1:], strict=True))
        user_name = (info.get("name") or ("",))[0] or values.get("username", "")
        user = SimulatedUser(writer, values.get("read-only") == "true", user_name)
        width, height = _size(info.get("size", ()))
        connection = existing
        if connection is None:
            if not values.get("hostname"):
                raise HandshakeFailed(
                    "no hostname",
                    encode(
                        "error",
                        f"Unable to connect to {protocol.upper()} server.",
                        int(Status.UPSTREAM_NOT_FOUND),
                    )
                    + encode("disconnect"),
                )
            screen = DesktopScreen(width, height, values["hostname"], user_name, protocol)
            connection = SimulatedConnection(connection_id, protocol, screen)
            self.connections[connection_id] = connection
        connection.users.append(user)
        screen = connection.screen
        await user.send(
            encode("name", screen.vm_name)
            + encode("size", 0, screen.width, screen.height)
            + connection.frame([(0, 0, screen.width, screen.height)])
        )
        if connection.renderer is None or connection.renderer.done():
            connection.renderer = asyncio.create_task(connection.render())
        return connection, user

    async def _user_loop(
        self, instructions: InstructionReader, connection: SimulatedConnection, user: SimulatedUser
    ) -> None:
        while not user.closed:
            try:
                async with asyncio.timeout(self.user_timeout):
                    instruction = await instructions.read()
            except TimeoutError:
                code = int(Status.CLIENT_TIMEOUT)
                await user.send(encode("error", "User is not responding.", code))
                break
            opcode, args = instruction
            if opcode == "disconnect":
                break
            if opcode == "sync":
                if (
                    not args
                    or not args[0].isdigit()
                    or int(args[0]) > connection.last_sent_timestamp
                ):
                    break
            elif not user.read_only:
                self._input(connection, opcode, args)
        await user.send(encode("disconnect"))

    @staticmethod
    def _input(connection: SimulatedConnection, opcode: str, args: tuple[str, ...]) -> None:
        screen = connection.screen
        numbers = [int(arg) for arg in args if arg.lstrip("-").isdigit()]
        if opcode == "key" and len(numbers) >= 2:
            connection.mark(screen.key(numbers[0], numbers[1] == 1))
        elif opcode == "mouse" and len(numbers) >= 3:
            connection.mark(*screen.mouse(numbers[0], numbers[1], numbers[2]))
        elif opcode == "size" and len(numbers) >= 2:
            connection.mark(screen.resize(*_size(args)))


def _size(args: tuple[str, ...]) -> tuple[int, int]:
    """Width and height from ``size`` arguments, within 64..8192 (1024x768 when absent)."""
    try:
        width, height = int(args[0]), int(args[1])
    except (ValueError, IndexError):
        return 1024, 768
    return min(max(width, 64), 8192), min(max(height, 64), 8192)
