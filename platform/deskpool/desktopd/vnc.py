"""The simulator's VNC bridge: a real VNC server's screen, sent as guacd would send it.

A development and test bridge, not a replacement for guacd (production runs guacd): it lets
``deskpool dev --hypervisor libvirt`` and the test suite show a real VM's (or an X server's)
console in the browser on a machine without guacd.

The simulator bridges only when told to: :class:`VncBridge` lists the networks whose VNC
servers are real (``python -m deskpool.desktopd --bridge-vnc 127.0.0.0/8``; ``deskpool dev
--hypervisor libvirt`` bridges loopback). A ``vnc`` connection whose ``hostname`` is an IP
address in one of them (or ``localhost`` when loopback is listed) is bridged; every other
connection, such as the simulator driver's made-up hosts, gets the simulated desktop. Names
are never resolved, so a made-up host costs no DNS lookup.

A bridged connection connects to ``hostname``:``port`` (5900 when empty) with ``password``
(RFB 3.8, 3.7 or 3.3; no authentication or VNC Authentication; see :mod:`deskpool.desktopd.rfb`)
and then:

- sends ``size`` of the server's framebuffer and the whole framebuffer as one PNG ``img``
  stream, then ``sync``; a user joining later receives the same from the current picture;
- for each FramebufferUpdate: each Raw rectangle as a PNG ``img`` stream, each CopyRect as
  ``copy`` within the default layer, a DesktopSize as ``size`` and the whole new framebuffer,
  then ``sync``, then asks for the next incremental update;
- passes a user's ``key`` (X11 keysyms in both protocols) as a KeyEvent and ``mouse`` as a
  PointerEvent (Guacamole's button mask is RFB's: left 1, middle 2, right 4, wheel up 8,
  wheel down 16); ``size`` is ignored, as guacd does with servers that cannot resize;
- the clipboard both ways, as guacd's ``clipboard.c``: a user's clipboard stream, once ended, is
  sent as ClientCutText (unless ``disable-paste``), and the server's ServerCutText reaches every
  user as a ``clipboard`` stream (unless ``disable-copy``); the text is converted between UTF-8
  and the ``clipboard-encoding`` argument (ISO8859-1 when empty, or UTF-8), at most 256 KiB;
- when the server cannot be reached or refuses the password, the user gets what guacd sends:
  ``error "Unable to connect to VNC server." 519`` then ``disconnect``; when it goes away
  later, ``error "Connection closed." 515`` then ``disconnect``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import ipaddress
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from PIL import Image

from deskpool.desktopd.frames import DesktopConnection, Viewer
from deskpool.desktopd.rfb import (
    CopyRect,
    CutText,
    DesktopSize,
    RawRect,
    RfbClient,
    RfbError,
    Update,
)
from deskpool.guacamole import Status, encode

__all__ = ["BridgeFailed", "BridgedConnection", "VncBridge", "bridge_vnc"]

log = logging.getLogger(__name__)

#: The VNC port when the connection's ``port`` is empty.
DEFAULT_PORT = 5900
#: How long the bridge waits for the VNC server's handshake.
CONNECT_TIMEOUT = 10.0
#: ``COMPOSITE_OVER`` of ``copy``: guacd copies with ``GUAC_COMP_OVER``.
COPY_MODE = 14
#: How often the render loop looks for quiet users when the server sends nothing.
IDLE_CHECK = 1.0

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class VncBridge:
    """Which VNC servers the simulator bridges: those at an IP address in ``networks``.

    :param networks: e.g. ``("127.0.0.0/8", "::1/128")``; empty (the default): none.
    """

    networks: tuple[Network, ...] = ()

    @classmethod
    def of(cls, networks: Iterable[str]) -> VncBridge:
        """Parse network texts (``10.0.0.0/8``, ``127.0.0.1``).

        :raises ValueError: one is not a network.
        """
        return cls(tuple(ipaddress.ip_network(text.strip(), strict=False) for text in networks))

    @classmethod
    def loopback(cls) -> VncBridge:
        """Bridge the VNC servers on this machine's loopback (what libvirt's VNC listens on)."""
        return cls.of(("127.0.0.0/8", "::1/128"))

    def covers(self, hostname: str) -> bool:
        """Whether the VNC server at ``hostname`` is bridged."""
        host = hostname.strip().strip("[]")
        if host == "localhost":
            host = "127.0.0.1"
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in network for network in self.networks)


class BridgeFailed(Exception):
    """The VNC server could not be bridged; ``reply`` is what the user receives."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reply = encode(
            "error", "Unable to connect to VNC server.", int(Status.UPSTREAM_NOT_FOUND)
        ) + encode("disconnect")


async def bridge_vnc(connection_id: str, values: dict[str, str]) -> BridgedConnection:
    """Connect to the VNC server of a connection's ``values`` (its ``connect`` arguments).

    :raises BridgeFailed: it cannot be reached, does not speak RFB, or refused the password.
    """
    hostname = values["hostname"].strip().strip("[]")
    port_text = values.get("port", "").strip()
    try:
        port = int(port_text) if port_text else DEFAULT_PORT
    except ValueError as error:
        raise BridgeFailed(f"port {port_text!r} is not a number") from error
    try:
        client = await RfbClient.connect(
            hostname, port, values.get("password", ""), within=CONNECT_TIMEOUT
        )
    except RfbError as error:
        raise BridgeFailed(str(error)) from error
    log.info(
        "desktop daemon simulator: bridging VNC server %s:%d (RFB %d.%d, %dx%d)",
        hostname,
        port,
        *client.version,
        client.width,
        client.height,
    )
    client.request_update(incremental=False)
    await client.flush()
    encoding = "utf-8" if values.get("clipboard-encoding") == "UTF-8" else "latin-1"
    return BridgedConnection(connection_id, "vnc", client=client, encoding=encoding)


@dataclass(eq=False)
class BridgedConnection(DesktopConnection):
    """A connection whose desktop is a real VNC server's framebuffer."""

    client: RfbClient
    #: The clipboard's encoding on the wire (``clipboard-encoding``).
    encoding: str = "latin-1"
    framebuffer: Image.Image = field(init=False)
    updates: asyncio.Queue[Update | CutText | RfbError] = field(default_factory=asyncio.Queue)
    reading: asyncio.Task[None] | None = None
    flushes: set[asyncio.Task[None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.framebuffer = Image.new("RGB", (self.client.width, self.client.height))

    # ------------------------------------------------------------------------------ frames
    def _png(self, box: tuple[int, int, int, int]) -> bytes:
        buffer = io.BytesIO()
        self.framebuffer.crop(box).save(buffer, "PNG", compress_level=1)
        return buffer.getvalue()

    def _whole(self) -> str:
        width, height = self.framebuffer.size
        return encode("size", 0, width, height) + self.image(0, 0, self._png((0, 0, width, height)))

    def welcome(self) -> str:
        """The framebuffer's size and picture as they are now, as one frame."""
        return self._whole() + self.end_frame()

    def apply(self, update: Update) -> str:
        """Apply ``update`` to the framebuffer; the instructions that do the same on a client."""
        parts: list[str] = []
        for rect in update.rects:
            if isinstance(rect, DesktopSize):
                resized = Image.new("RGB", (max(rect.width, 1), max(rect.height, 1)))
                resized.paste(self.framebuffer, (0, 0))
                self.framebuffer = resized
                parts.append(self._whole())
            elif isinstance(rect, RawRect):
                if rect.width == 0 or rect.height == 0:
                    continue
                size = (rect.width, rect.height)
                pixels = Image.frombuffer("RGB", size, rect.pixels, "raw", "BGRX", 0, 1)
                self.framebuffer.paste(pixels, (rect.x, rect.y))
                box = (rect.x, rect.y, rect.x + rect.width, rect.y + rect.height)
                parts.append(self.image(rect.x, rect.y, self._png(box)))
            elif isinstance(rect, CopyRect):
                source = (rect.src_x, rect.src_y, rect.src_x + rect.width, rect.src_y + rect.height)
                self.framebuffer.paste(self.framebuffer.crop(source), (rect.x, rect.y))
                source_args = (rect.src_x, rect.src_y, rect.width, rect.height)
                parts.append(encode("copy", 0, *source_args, COPY_MODE, 0, rect.x, rect.y))
        return "".join(parts)

    async def render(self) -> None:
        """Turn the server's updates into frames until the last user leaves or the server goes."""
        if self.reading is None:
            self.reading = asyncio.create_task(self._read())
        while self.users:
            try:
                async with asyncio.timeout(IDLE_CHECK):
                    first = await self.updates.get()
            except TimeoutError:
                await self.keep_alive()
                continue
            pending = [first]
            while not self.updates.empty():
                pending.append(self.updates.get_nowait())
            parts: list[str] = []
            updated = False
            for item in pending:
                if isinstance(item, RfbError):
                    log.info("desktop daemon simulator: the VNC server went away: %s", item)
                    code = int(Status.UPSTREAM_ERROR)
                    await self.broadcast(
                        "".join(parts)
                        + encode("error", "Connection closed.", code)
                        + encode("disconnect")
                    )
                    for user in self.users:  # guacd closes its users' sockets when it stops
                        user.closed = True
                        user.writer.close()
                    return
                if isinstance(item, CutText):
                    text = item.data.decode(self.encoding, "replace")
                    await self.transfers.copy(list(self.users), text)
                    continue
                parts.append(self.apply(item))
                updated = True
            if not updated:
                continue
            await self.broadcast("".join(parts) + self.end_frame())
            await self.keep_alive()

    async def _read(self) -> None:
        """Read updates into the queue, asking for the next after each."""
        client = self.client
        try:
            while True:
                update = await client.read_update()
                await self.updates.put(update)
                if isinstance(update, Update):
                    client.request_update(incremental=True)
                await client.flush()
        except RfbError as error:
            await self.updates.put(error)
        except (OSError, RuntimeError) as error:
            await self.updates.put(RfbError(str(error)))

    # ------------------------------------------------------------------------------ input
    def pasted(self, text: str) -> None:
        """A user's clipboard, as ClientCutText (sent with the next input or update request)."""
        self.client.cut_text(text.encode(self.encoding, "replace"))
        flushing = asyncio.get_running_loop().create_task(self.client.flush())
        self.flushes.add(flushing)
        flushing.add_done_callback(self.flushes.discard)

    def input(self, opcode: str, args: tuple[str, ...], user: Viewer | None = None) -> None:
        """``key`` as a KeyEvent, ``mouse`` as a PointerEvent; ``size`` is ignored."""
        try:
            numbers = [int(arg) for arg in args]
        except ValueError:
            return
        if opcode == "key" and len(numbers) >= 2:
            self.client.key(numbers[0], numbers[1] == 1)
        elif opcode == "mouse" and len(numbers) >= 3:
            self.client.pointer(numbers[0], numbers[1], numbers[2])

    async def close(self) -> None:
        """Stop reading and close the VNC connection."""
        if self.reading is not None:
            self.reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.reading
        await self.client.close()
