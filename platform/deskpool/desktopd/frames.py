"""What every desktop backend of the simulator shares: a connection's users and its frames.

A connection (guacd's ``guac_client``) is one desktop shared by its users. Its backend decides
what the desktop is: the simulator's own drawing (:class:`deskpool.desktopd.daemon.
SimulatedConnection`) or a real VNC server bridged (:mod:`deskpool.desktopd.vnc`). Either way
the users receive the same instructions guacd sends: ``img`` streams of PNG (``blob`` chunks of
at most 6048 bytes, then ``end``), ``copy`` within the default layer, ``size``, and each frame
ended by ``sync,timestamp,frames``.
"""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import dataclass, field
from typing import Protocol

from deskpool.desktopd.transfers import Switches, Transfers
from deskpool.guacamole import encode

__all__ = [
    "BLOB_MAX_LENGTH",
    "COMPOSITE_OVER",
    "KEEP_ALIVE_INTERVAL",
    "DesktopConnection",
    "Viewer",
    "now_ms",
]

#: ``GUAC_PROTOCOL_BLOB_MAX_LENGTH``: the most bytes in one ``blob``.
BLOB_MAX_LENGTH = 6048
#: ``GUAC_COMP_OVER``: draw normally.
COMPOSITE_OVER = 14
#: ``GUAC_SOCKET_KEEP_ALIVE_INTERVAL``: silence after which guacd sends ``nop``.
KEEP_ALIVE_INTERVAL = 5.0


def now_ms() -> int:
    """guacd's timestamps: milliseconds since the epoch."""
    return int(time.time() * 1000)


class Viewer(Protocol):
    """A user's socket, as a connection sees it."""

    writer: asyncio.StreamWriter
    closed: bool
    last_write: float

    async def send(self, text: str) -> None:
        """Write ``text`` and wait for the socket to take it."""


@dataclass(eq=False)
class DesktopConnection:
    """A connection's users and the instructions of its frames; backends subclass it."""

    id: str
    protocol: str
    users: list[Viewer] = field(default_factory=list, kw_only=True)
    last_sent_timestamp: int = field(default=0, kw_only=True)
    changed: asyncio.Event = field(default_factory=asyncio.Event, kw_only=True)
    renderer: asyncio.Task[None] | None = field(default=None, kw_only=True)
    stream_index: int = field(default=0, kw_only=True)
    #: Its clipboard, drive, print and sound streams (:mod:`deskpool.desktopd.transfers`).
    transfers: Transfers = field(default_factory=lambda: Transfers(Switches()), kw_only=True)

    async def broadcast(self, text: str) -> None:
        """Send ``text`` to every user still connected."""
        users = [user for user in self.users if not user.closed]
        await asyncio.gather(*(user.send(text) for user in users))

    async def keep_alive(self) -> None:
        """``nop`` to the users who heard nothing for :data:`KEEP_ALIVE_INTERVAL`."""
        quiet = [u for u in self.users if time.monotonic() - u.last_write > KEEP_ALIVE_INTERVAL]
        await asyncio.gather(*(user.send(encode("nop")) for user in quiet))

    def image(self, x: int, y: int, png: bytes) -> str:
        """An ``img`` stream drawing ``png`` at ``x``, ``y`` of the default layer."""
        # Odd indexes, as guacd's client-level streams: a user's own streams (clipboard,
        # downloads) have even ones, so an image never closes one of them.
        self.stream_index = (self.stream_index + 1) % 64
        index = 2 * self.stream_index + 1
        parts = [encode("img", index, COMPOSITE_OVER, 0, "image/png", x, y)]
        for start in range(0, len(png), BLOB_MAX_LENGTH):
            chunk = base64.b64encode(png[start : start + BLOB_MAX_LENGTH]).decode()
            parts.append(encode("blob", index, chunk))
        parts.append(encode("end", index))
        return "".join(parts)

    def end_frame(self) -> str:
        """The ``sync`` that ends a frame (users acknowledge it with theirs)."""
        self.last_sent_timestamp = now_ms()
        return encode("sync", self.last_sent_timestamp, 1)

    def welcome(self) -> str:
        """What a user who just joined receives: the whole desktop, as one frame."""
        raise NotImplementedError

    def input(self, opcode: str, args: tuple[str, ...], user: Viewer | None = None) -> None:
        """``user``'s ``key``, ``mouse`` or ``size`` (never a read-only user's)."""
        raise NotImplementedError

    def pasted(self, text: str) -> None:
        """A user's clipboard stream ended: ``text`` is the desktop's clipboard now."""

    async def render(self) -> None:
        """Send frames to the users until none is left."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release what the backend holds (the last user left)."""
