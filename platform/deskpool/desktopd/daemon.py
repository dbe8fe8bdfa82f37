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
- a ``vnc`` connection whose ``hostname`` the simulator was told to bridge (``vnc_bridge``, see
  :mod:`deskpool.desktopd.vnc`) shows that real VNC server instead of the simulated desktop;
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
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from deskpool.desktopd.frames import DesktopConnection
from deskpool.desktopd.protocols import PROTOCOL_ARGS, PROTOCOL_VERSION
from deskpool.desktopd.screen import Box, DesktopScreen
from deskpool.desktopd.vnc import BridgeFailed, VncBridge, bridge_vnc
from deskpool.guacamole import Instruction, ProtocolError, Status, encode
from deskpool.guacamole.stream import InstructionReader, StreamClosed

__all__ = ["DesktopDaemonSimulator"]

log = logging.getLogger(__name__)

#: ``GUACD_TIMEOUT``: how long guacd waits for each instruction, in seconds.
GUACD_TIMEOUT = 15.0
#: Shortest time between two frames drawn for input.
FRAME_INTERVAL = 0.04


@dataclass(eq=False)
class SimulatedUser:
    """One socket joined to a connection."""

    writer: asyncio.StreamWriter
    read_only: bool
    name: str
    last_write: float = field(default_factory=time.monotonic)
    closed: bool = False
    #: The timestamp of the latest frame this user acknowledged with ``sync``: everything the
    #: user sent before that ``sync`` has been read (and applied, unless read-only).
    acknowledged: int = 0

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
class SimulatedConnection(DesktopConnection):
    """A guacd connection (a ``guac_client``) showing the simulator's own desktop."""

    screen: DesktopScreen
    dirty: list[Box] = field(default_factory=list)

    def frame(self, boxes: Iterable[Box]) -> str:
        """The instructions that draw ``boxes`` and end the frame."""
        parts = [self.image(r.x, r.y, r.png) for r in map(self.screen.region, boxes)]
        return "".join(parts) + self.end_frame()

    def welcome(self) -> str:
        """The desktop's name and size, and the whole desktop."""
        screen = self.screen
        return (
            encode("name", screen.vm_name)
            + encode("size", 0, screen.width, screen.height)
            + self.frame([(0, 0, screen.width, screen.height)])
        )

    def input(self, opcode: str, args: tuple[str, ...]) -> None:
        """Echo keys, follow the mouse, resize."""
        screen = self.screen
        numbers = [int(arg) for arg in args if arg.lstrip("-").isdigit()]
        if opcode == "key" and len(numbers) >= 2:
            self.mark(screen.key(numbers[0], numbers[1] == 1))
        elif opcode == "mouse" and len(numbers) >= 3:
            self.mark(*screen.mouse(numbers[0], numbers[1], numbers[2]))
        elif opcode == "size" and len(numbers) >= 2:
            self.mark(screen.resize(*_size(args)))

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
            await self.keep_alive()
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
    :param vnc_bridge: the VNC servers to bridge instead of drawing a simulated desktop (none
        by default; see :class:`deskpool.desktopd.vnc.VncBridge`).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        user_timeout: float = 15.0,
        vnc_bridge: VncBridge | None = None,
    ):
        self.host = host
        self.port = port
        self.user_timeout = user_timeout
        self.vnc_bridge = vnc_bridge or VncBridge()
        self.connections: dict[str, DesktopConnection] = {}
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
                await connection.close()

    async def _read(self, instructions: InstructionReader, seen: list[Instruction]) -> Instruction:
        async with asyncio.timeout(GUACD_TIMEOUT):
            instruction = await instructions.read()
        seen.append(instruction)
        return instruction

    async def _handshake(
        self, instructions: InstructionReader, writer: asyncio.StreamWriter, seen: list[Instruction]
    ) -> tuple[DesktopConnection, SimulatedUser]:
        select = await self._read(instructions, seen)
        if select.opcode != "select" or len(select.args) != 1:
            raise HandshakeFailed("expected select with one argument")
        identifier = select.args[0]
        existing: DesktopConnection | None = None
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
            if protocol == "vnc" and self.vnc_bridge.covers(values["hostname"]):
                try:
                    connection = await bridge_vnc(connection_id, values)
                except BridgeFailed as failed:
                    raise HandshakeFailed(str(failed), failed.reply) from failed
            else:
                screen = DesktopScreen(width, height, values["hostname"], user_name, protocol)
                connection = SimulatedConnection(connection_id, protocol, screen=screen)
            self.connections[connection_id] = connection
        connection.users.append(user)
        await user.send(connection.welcome())
        if connection.renderer is None or connection.renderer.done():
            connection.renderer = asyncio.create_task(connection.render())
        return connection, user

    async def _user_loop(
        self, instructions: InstructionReader, connection: DesktopConnection, user: SimulatedUser
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
                user.acknowledged = int(args[0])
            elif not user.read_only:
                connection.input(opcode, args)
        await user.send(encode("disconnect"))


def _size(args: tuple[str, ...]) -> tuple[int, int]:
    """Width and height from ``size`` arguments, within 64..8192 (1024x768 when absent)."""
    try:
        width, height = int(args[0]), int(args[1])
    except (ValueError, IndexError):
        return 1024, 768
    return min(max(width, 64), 8192), min(max(height, 64), 8192)
