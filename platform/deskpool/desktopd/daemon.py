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
- its remote desktop client then connects, which takes ``connect_delay`` seconds (and waits
  for :attr:`DesktopDaemonSimulator.connect_gate`, which tests may clear to hold every new
  connection before its first frame); a ``size`` or any input that arrives before the first
  ``sync`` kills the connection as it kills guacd 1.6.0's (a segfault of the connection's
  process in libvncclient): no more output, ever, while the socket stays open, as guacd's parent
  process keeps it, until the peer closes it; only ``nop``, ``sync`` and ``disconnect`` are safe;
- then it draws its own desktop (:mod:`deskpool.desktopd.screen`) with ``img`` streams of PNG
  (``blob`` chunks of at most 6048 bytes, then ``end``), ends each frame with
  ``sync,timestamp,frames``, echoes typed keys, follows the mouse, and sends ``nop`` when it has
  been silent for 5 s;
- a user who sends nothing for 15 s gets ``error "User is not responding." 776``; a ``sync``
  acknowledging a frame never sent, or ``disconnect``, ends that user with ``disconnect``;
- read-only users (``read-only`` = ``true``) see everything and change nothing;
- it speaks guacd's clipboard, drive (``filesystem``, ``get``, ``body``, ``put``, ``file``,
  ``ack``), print and sound streams as the connection's arguments allow
  (:mod:`deskpool.desktopd.transfers`); on the simulated desktop, Control with C, V, S, P or G
  copies the typed text, pastes the clipboard, saves a download, prints or plays a tone;
- told to, it shows two faults of guacd 1.6.0 (:mod:`deskpool.desktopd.faults`): a connection
  whose process dies mid-session (:meth:`DesktopDaemonSimulator.kill_connection`: its sockets
  close without ``disconnect``, and the next connection to that desktop finds it as it was),
  and RDP logins refused (:attr:`DesktopDaemonSimulator.refuse_logins`: a lone ``sync`` 0.05 s
  after ``ready``, then nothing drawn).

Every user is kept in :attr:`DesktopDaemonSimulator.users` with the instructions it sent after
the handshake, whether it sent ``disconnect`` and whether its connection crashed, so tests can
check what reached the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
import uuid
from collections import deque
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field

from deskpool.desktopd.faults import REFUSED_LOGIN_SYNC_DELAY, LoginRefusal
from deskpool.desktopd.frames import KEEP_ALIVE_INTERVAL, DesktopConnection, Viewer
from deskpool.desktopd.protocols import PROTOCOL_ARGS, PROTOCOL_VERSION
from deskpool.desktopd.screen import Box, DesktopScreen, Region
from deskpool.desktopd.transfers import STREAM_OPCODES, Switches, Transfers, beep
from deskpool.desktopd.vnc import BridgeFailed, VncBridge, bridge_vnc
from deskpool.guacamole import Instruction, ProtocolError, Status, encode
from deskpool.guacamole.stream import InstructionReader, StreamClosed

__all__ = ["DesktopDaemonSimulator"]

log = logging.getLogger(__name__)

#: ``GUACD_TIMEOUT``: how long guacd waits for each instruction, in seconds.
GUACD_TIMEOUT = 15.0
#: Shortest time between two frames drawn for input.
FRAME_INTERVAL = 0.04
#: Control and a letter on the simulated desktop: copy the typed text (a clipboard stream to
#: every user), paste the clipboard into it, save it as ``typed.txt`` in the drive's Download
#: folder (a ``file`` stream to the user), print the screen (a PDF ``file`` stream), play a tone
#: (an ``audio`` stream).
SHORTCUTS = {"c": "copy", "v": "paste", "s": "save", "p": "print", "g": "play"}
#: Control_L and Control_R.
CONTROL_KEYS = frozenset({0xFFE3, 0xFFE4})
#: What guacd 1.6.0 handles safely before the connection's first frame.
SAFE_BEFORE_FIRST_FRAME = frozenset({"nop", "sync", "disconnect"})


@dataclass(eq=False)
class SimulatedUser:
    """One socket joined to a connection."""

    writer: asyncio.StreamWriter
    read_only: bool
    name: str
    connection_id: str = ""
    last_write: float = field(default_factory=time.monotonic)
    closed: bool = False
    #: The timestamp of the latest frame this user acknowledged with ``sync``: everything the
    #: user sent before that ``sync`` has been read (and applied, unless read-only).
    acknowledged: int = 0
    #: Every instruction received after the handshake, in order.
    received: list[Instruction] = field(default_factory=list)
    #: Whether the user has been sent its first frame (its first ``sync``).
    drawn: bool = False
    #: Whether the user sent ``disconnect``.
    disconnected: bool = False
    #: Whether its connection crashed (input before the first frame).
    crashed: bool = False
    #: Whether its connection's process died (:meth:`DesktopDaemonSimulator.kill_connection`,
    #: or a refused login's ``close``): its socket was closed without a word.
    killed: bool = False
    #: The refusal of its login, when the remote desktop refuses it (RDP only).
    refusal: LoginRefusal | None = None

    async def send(self, text: str) -> None:
        """Write ``text`` and wait for the socket to take it (nothing once crashed or dead)."""
        if self.closed or self.crashed or self.killed:
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
    #: Whether a Control key is down.
    control: bool = False
    #: Streams the desktop's actions are sending.
    actions: set[asyncio.Task[object]] = field(default_factory=set)

    def frame(self, boxes: Iterable[Box]) -> str:
        """The instructions that draw ``boxes`` and end the frame."""
        return self.drawing(map(self.screen.region, boxes))

    def drawing(self, regions: Iterable[Region]) -> str:
        """The instructions that draw ``regions``, in order, and end the frame."""
        parts = [self.image(r.x, r.y, r.png) for r in regions]
        return "".join(parts) + self.end_frame()

    def welcome(self) -> str:
        """The desktop's name and size, and the whole desktop."""
        screen = self.screen
        return (
            encode("name", screen.vm_name)
            + encode("size", 0, screen.width, screen.height)
            + self.drawing(screen.whole())
        )

    def input(self, opcode: str, args: tuple[str, ...], user: Viewer | None = None) -> None:
        """Echo keys, follow the mouse, resize; Control with a letter acts (:data:`SHORTCUTS`)."""
        screen = self.screen
        numbers = [int(arg) for arg in args if arg.lstrip("-").isdigit()]
        if opcode == "key" and len(numbers) >= 2:
            keysym, pressed = numbers[0], numbers[1] == 1
            if keysym in CONTROL_KEYS:
                self.control = pressed
            elif self.control and chr(keysym & 0xFF).lower() in SHORTCUTS and keysym < 0x100:
                if pressed:
                    self._act(SHORTCUTS[chr(keysym).lower()], user)
            else:
                self.mark(screen.key(keysym, pressed))
        elif opcode == "mouse" and len(numbers) >= 3:
            self.mark(*screen.mouse(numbers[0], numbers[1], numbers[2]))
        elif opcode == "size" and len(numbers) >= 2:
            self.mark(screen.resize(*_size(args)))

    def pasted(self, text: str) -> None:
        """Show the desktop's new clipboard."""
        self.mark(self.screen.show_clipboard(text))

    def _act(self, action: str, user: Viewer | None) -> None:
        """What Control with a letter does on the simulated desktop (see :data:`SHORTCUTS`)."""
        screen, transfers = self.screen, self.transfers
        if action == "paste":
            self.mark(screen.paste(transfers.clipboard))
            return
        users: list[Viewer] = [u for u in self.users if not u.closed]
        work: Coroutine[object, object, object]
        if action == "copy":
            self.mark(screen.show_clipboard(screen.typed))
            work = transfers.copy(list(users), screen.typed)
        elif action == "play":
            work = transfers.play(list(users), beep())
        elif user is None:
            return
        elif action == "save":
            work = transfers.save_download(user, "typed.txt", screen.typed.encode())
        else:
            work = transfers.print_pdf(user, screen.pdf())
        task = asyncio.get_running_loop().create_task(work)
        self.actions.add(task)
        task.add_done_callback(self.actions.discard)

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
    :param connect_delay: seconds a new connection takes before its first frame (guacd's VNC
        or RDP client connecting); input before it kills the connection, as in guacd 1.6.0.
    :param reuse_port: listen with ``SO_REUSEPORT``, so several simulator processes can share
        one address and the kernel spreads new sockets over them (as guacd spreads its
        connections over processes); joining a connection (``select $id``) then works only
        when the joining socket lands in the process holding that connection.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        user_timeout: float = 15.0,
        vnc_bridge: VncBridge | None = None,
        connect_delay: float = 0.1,
        reuse_port: bool = False,
    ):
        self.host = host
        self.port = port
        self.reuse_port = reuse_port
        self.user_timeout = user_timeout
        self.vnc_bridge = vnc_bridge or VncBridge()
        #: Seconds a new connection's remote desktop client takes to connect (then it draws).
        self.connect_delay = connect_delay
        #: New connections draw their first frame only while it is set (it is, by default).
        self.connect_gate = asyncio.Event()
        self.connect_gate.set()
        self.connections: dict[str, DesktopConnection] = {}
        #: RDP logins the remote desktops refuse (``None``: none; tests set it).
        self.refuse_logins: LoginRefusal | None = None
        #: The screens of connections whose process died, by host: the remote desktop kept
        #: the session, and the next connection to that host shows it again.
        self.resumable: dict[str, DesktopScreen] = {}
        #: The latest users, handshake done (for tests and diagnosis).
        self.users: deque[SimulatedUser] = deque(maxlen=100)
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
        self._server = await asyncio.start_server(
            self._accept, self.host, self.port, reuse_port=self.reuse_port or None
        )
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
        self.users.append(user)
        connecting = None if user.drawn else asyncio.create_task(self._connect(connection, user))
        try:
            await self._user_loop(instructions, connection, user)
        finally:
            if connecting is not None:
                connecting.cancel()
            user.closed = True
            if user in connection.users:
                connection.users.remove(user)
            connection.transfers.left(user)
            if not connection.users:
                self.connections.pop(connection.id, None)
                connection.changed.set()
                await connection.close()

    def user_of(self, connection_id: str) -> SimulatedUser:
        """The first user of ``connection_id`` (its owner) among the latest users."""
        return next(user for user in self.users if user.connection_id == connection_id)

    def kill_connection(self, connection_id: str, *, reset: bool = False) -> list[SimulatedUser]:
        """The process of ``connection_id`` dies: its users' sockets close without a word.

        As when guacd's child process of a connection is killed: no ``error``, no
        ``disconnect``, the sockets simply close. The remote desktop keeps the session: the next
        connection to the same host shows the same screen (what was typed included).
        Returns the users whose socket was closed.

        :param reset: the sockets are reset (TCP RST) rather than closed (FIN), as the kernel
            does when the dead process left input unread in them; a real guacd's death gives
            either, by chance.
        """
        return self._die(connection_id, keep_screen=True, reset=reset)

    def _die(
        self, connection_id: str, *, keep_screen: bool, reset: bool = False
    ) -> list[SimulatedUser]:
        connection = self.connections.pop(connection_id, None)
        if keep_screen and isinstance(connection, SimulatedConnection):
            self.resumable[connection.screen.vm_name] = connection.screen
        log.warning("desktop daemon simulator: connection %s died", connection_id)
        killed = [u for u in self.users if u.connection_id == connection_id and not u.closed]
        for user in killed:
            user.killed = True
            if reset:
                sock = user.writer.get_extra_info("socket")
                if sock is not None:
                    # A zero linger makes the close a reset.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            user.writer.transport.abort()
        return killed

    async def _connect(self, connection: DesktopConnection, user: SimulatedUser) -> None:
        """The new connection's remote desktop client connects, then it draws its first frame."""
        if user.refusal is not None:
            await self._refuse_login(connection, user, user.refusal)
            return
        await asyncio.sleep(self.connect_delay)
        await self.connect_gate.wait()
        if not user.crashed:
            await self._draw_first_frame(connection, user)

    async def _refuse_login(
        self, connection: DesktopConnection, user: SimulatedUser, refusal: LoginRefusal
    ) -> None:
        """As guacd 1.6.0 shows a refused RDP login: a lone ``sync``, then nothing drawn."""
        await asyncio.sleep(REFUSED_LOGIN_SYNC_DELAY)
        await user.send(connection.end_frame())
        if refusal.then == "close":
            await asyncio.sleep(refusal.close_after)
            self._die(connection.id, keep_screen=False)
            return
        while not user.closed:  # guacd's socket keeps itself alive with nop
            await asyncio.sleep(KEEP_ALIVE_INTERVAL)
            await user.send(encode("nop"))

    @staticmethod
    async def _draw_first_frame(connection: DesktopConnection, user: SimulatedUser) -> None:
        """``user`` joins the users frames are sent to, with the whole desktop as one frame."""
        connection.users.append(user)
        user.drawn = True
        await user.send(connection.welcome())
        await connection.transfers.joined(user)
        if connection.renderer is None or connection.renderer.done():
            connection.renderer = asyncio.create_task(connection.render())

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
        user = SimulatedUser(
            writer, values.get("read-only") == "true", user_name, connection_id=connection_id
        )
        refusal = self.refuse_logins
        if existing is None and refusal and refusal.refuses(protocol, values["hostname"]):
            user.refusal = refusal
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
                screen = self.resumable.pop(values["hostname"], None) or DesktopScreen(
                    width, height, values["hostname"], user_name, protocol
                )
                if (screen.width, screen.height) != (width, height):
                    screen.resize(width, height)
                connection = SimulatedConnection(connection_id, protocol, screen=screen)
            connection.transfers = Transfers(
                Switches.of(protocol, values), on_clipboard=connection.pasted
            )
            self.connections[connection_id] = connection
        else:  # a join: the connection is up, its display is sent at once
            await self._draw_first_frame(connection, user)
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
            user.received.append(instruction)
            opcode, args = instruction
            if opcode == "disconnect":
                user.disconnected = True
                break
            if not user.drawn and opcode not in SAFE_BEFORE_FIRST_FRAME:
                await self._crash(instructions, connection, user, opcode)
                return
            if opcode == "sync":
                if (
                    not args
                    or not args[0].isdigit()
                    or int(args[0]) > connection.last_sent_timestamp
                ):
                    break
                user.acknowledged = int(args[0])
            elif opcode in STREAM_OPCODES:
                await connection.transfers.handle(user, instruction, read_only=user.read_only)
            elif not user.read_only:
                connection.input(opcode, args, user)
        await user.send(encode("disconnect"))

    async def _crash(
        self,
        instructions: InstructionReader,
        connection: DesktopConnection,
        user: SimulatedUser,
        opcode: str,
    ) -> None:
        """Die as guacd 1.6.0's connection process dies; the socket stays open, silent."""
        log.warning(
            "desktop daemon simulator: %r before connection %s drew its first frame: the "
            "connection crashed (guacd 1.6.0 segfaults here)",
            opcode,
            connection.id,
        )
        user.crashed = True
        self.connections.pop(connection.id, None)
        with contextlib.suppress(StreamClosed):
            while True:
                instruction = await instructions.read()
                user.received.append(instruction)
                user.disconnected = user.disconnected or instruction.opcode == "disconnect"


def _size(args: tuple[str, ...]) -> tuple[int, int]:
    """Width and height from ``size`` arguments, within 64..8192 (1024x768 when absent)."""
    try:
        width, height = int(args[0]), int(args[1])
    except (ValueError, IndexError):
        return 1024, 768
    return min(max(width, 64), 8192), min(max(height, 64), 8192)
