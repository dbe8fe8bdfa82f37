"""A small RFB (VNC) client: what the desktop daemon simulator's VNC bridge needs, nothing more.

It follows RFC 6143 (RFB 3.8) and accepts servers that speak 3.3 or 3.7:

- security: *None* (1) and *VNC Authentication* (2): the 16-byte challenge encrypted with DES
  in ECB mode, the key being the password's first 8 bytes (padded with zeros), each byte's bits
  reversed, as RFB's reference implementation has always done (RFC 6143 section 7.2.2);
- the client asks for 32 bits per pixel, depth 24, little-endian true colour with red at bit 16,
  green at 8 and blue at 0, so a Raw rectangle's pixels are ``BGRX`` bytes;
- encodings: Raw (0), CopyRect (1) and the DesktopSize pseudo-encoding (-223);
- client messages: SetPixelFormat, SetEncodings, FramebufferUpdateRequest, KeyEvent (an X11
  keysym, as Guacamole's ``key`` carries), PointerEvent (a button mask whose bits 0-4 are the
  left, middle and right buttons and the wheel up and down, as in Guacamole's ``mouse``) and
  ClientCutText (the clipboard, in Latin-1 unless told otherwise, as RFC 6143 section 7.5.6
  says);
- server messages: FramebufferUpdate, SetColourMapEntries (read and ignored: the pixel format
  is true colour), Bell (ignored) and ServerCutText (the server's clipboard changed: returned
  as :class:`CutText`).

It is the transport of a development and test bridge, not a VNC viewer: no other encoding, no
TLS or VeNCrypt security types, no extended clipboard.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import struct
from dataclasses import dataclass

from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
from cryptography.hazmat.primitives.ciphers import Cipher, modes

__all__ = [
    "COPY_RECT",
    "DESKTOP_SIZE",
    "RAW",
    "AuthenticationFailed",
    "CopyRect",
    "CutText",
    "DesktopSize",
    "RawRect",
    "RfbClient",
    "RfbError",
    "Update",
    "vnc_auth_response",
]

#: Encodings (RFC 6143 section 7.7).
RAW = 0
COPY_RECT = 1
DESKTOP_SIZE = -223
#: Security types (section 7.1.2).
SECURITY_NONE = 1
SECURITY_VNC = 2
#: Client-to-server message types (section 7.5).
SET_PIXEL_FORMAT = 0
SET_ENCODINGS = 2
FRAMEBUFFER_UPDATE_REQUEST = 3
KEY_EVENT = 4
POINTER_EVENT = 5
CLIENT_CUT_TEXT = 6
#: Server-to-client message types (section 7.6).
FRAMEBUFFER_UPDATE = 0
SET_COLOUR_MAP_ENTRIES = 1
BELL = 2
SERVER_CUT_TEXT = 3
#: bits-per-pixel 32, depth 24, little-endian, true colour, maxima 255, shifts 16/8/0.
PIXEL_FORMAT = struct.pack(">BBBBHHHBBB3x", 32, 24, 0, 1, 255, 255, 255, 16, 8, 0)
BYTES_PER_PIXEL = 4
#: The most bytes of a reason or cut text read (a server sending more is not believed).
TEXT_LIMIT = 1 << 20

VERSION = re.compile(rb"RFB (\d{3})\.(\d{3})\n")


class RfbError(Exception):
    """The server broke the protocol, refused us, or went away."""


class AuthenticationFailed(RfbError):
    """The server refused the password (or wanted one we do not have)."""


@dataclass(frozen=True)
class RawRect:
    """New pixels for a rectangle: ``BGRX`` bytes, row by row."""

    x: int
    y: int
    width: int
    height: int
    pixels: bytes


@dataclass(frozen=True)
class CopyRect:
    """Copy the rectangle at ``src_x``, ``src_y`` of the framebuffer to ``x``, ``y``."""

    x: int
    y: int
    width: int
    height: int
    src_x: int
    src_y: int


@dataclass(frozen=True)
class DesktopSize:
    """The framebuffer now has this size (its content follows in later rectangles)."""

    width: int
    height: int


Rect = RawRect | CopyRect | DesktopSize


@dataclass(frozen=True)
class CutText:
    """The server's clipboard changed (ServerCutText), as bytes in the wire's encoding."""

    data: bytes


@dataclass(frozen=True)
class Update:
    """One FramebufferUpdate: its rectangles in the order they apply."""

    rects: tuple[Rect, ...]


def _reversed_bits(byte: int) -> int:
    return int(f"{byte:08b}"[::-1], 2)


def vnc_auth_response(password: str, challenge: bytes) -> bytes:
    """The answer to VNC Authentication's 16-byte ``challenge`` for ``password``.

    DES (here TripleDES with the same key three times, which is single DES) in ECB mode over the two
    8-byte halves; the key is the password's first 8 bytes, zero-padded, each bit-reversed.
    """
    if len(challenge) != 16:
        raise ValueError("a VNC Authentication challenge has 16 bytes")
    raw = password.encode("latin-1", "replace")[:8].ljust(8, b"\0")
    key = bytes(_reversed_bits(byte) for byte in raw)
    encryptor = Cipher(TripleDES(key * 3), modes.ECB()).encryptor()
    return encryptor.update(challenge) + encryptor.finalize()


class RfbClient:
    """A connected, initialised RFB session; make one with :meth:`connect`.

    :attr:`width`, :attr:`height` and :attr:`name` are the server's framebuffer and desktop
    name (``width``/``height`` follow DesktopSize rectangles as :meth:`read_update` meets them).
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        version: tuple[int, int],
        width: int,
        height: int,
        name: str,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.version = version
        self.width = width
        self.height = height
        self.name = name

    @classmethod
    async def connect(
        cls, host: str, port: int, password: str = "", *, within: float = 10.0
    ) -> RfbClient:
        """Connect, agree on a version, authenticate and initialise (shared session).

        :raises AuthenticationFailed: the server refused the password, or asked for one and
            ``password`` is empty.
        :raises RfbError: anything else went wrong (including no answer ``within`` seconds).
        """
        try:
            async with asyncio.timeout(within):
                reader, writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError) as error:
            raise RfbError(f"cannot reach {host}:{port}: {error}") from error
        try:
            async with asyncio.timeout(within):
                return await cls._initialise(reader, writer, password)
        except BaseException as error:
            writer.close()
            if isinstance(error, TimeoutError):
                raise RfbError("the VNC server did not finish its handshake in time") from error
            if isinstance(error, (OSError, asyncio.IncompleteReadError)):
                raise RfbError(f"the VNC server closed the connection: {error}") from error
            raise

    @classmethod
    async def _initialise(
        cls, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, password: str
    ) -> RfbClient:
        greeting = await reader.readexactly(12)
        match = VERSION.fullmatch(greeting)
        if match is None:
            raise RfbError("not an RFB server")
        server = (int(match[1]), int(match[2]))
        if server < (3, 3):
            raise RfbError(f"RFB {server[0]}.{server[1]} is not supported")
        # 3.4-3.6 are read as 3.3 (as RFC 6143 says); anything newer than 3.8 as 3.8.
        version = (3, 8) if server >= (3, 8) else (3, 7) if server >= (3, 7) else (3, 3)
        writer.write(b"RFB %03d.%03d\n" % version)
        if version >= (3, 7):
            count = (await reader.readexactly(1))[0]
            if count == 0:
                raise RfbError(f"the VNC server refused: {await _read_text(reader)}")
            offered = set(await reader.readexactly(count))
            if password and SECURITY_VNC in offered:
                chosen = SECURITY_VNC
            elif SECURITY_NONE in offered:
                chosen = SECURITY_NONE
            elif SECURITY_VNC in offered:
                raise AuthenticationFailed("the VNC server wants a password")
            else:
                raise RfbError(f"no supported security type among {sorted(offered)}")
            writer.write(bytes([chosen]))
        else:
            (chosen,) = struct.unpack(">I", await reader.readexactly(4))
            if chosen == 0:
                raise RfbError(f"the VNC server refused: {await _read_text(reader)}")
            if chosen == SECURITY_VNC and not password:
                raise AuthenticationFailed("the VNC server wants a password")
            if chosen not in (SECURITY_NONE, SECURITY_VNC):
                raise RfbError(f"unsupported security type {chosen}")
        if chosen == SECURITY_VNC:
            challenge = await reader.readexactly(16)
            writer.write(vnc_auth_response(password, challenge))
        if chosen == SECURITY_VNC or version >= (3, 8):
            (result,) = struct.unpack(">I", await reader.readexactly(4))
            if result != 0:
                reason = await _read_text(reader) if version >= (3, 8) else ""
                raise AuthenticationFailed(
                    f"the VNC server refused the authentication{': ' if reason else ''}{reason}"
                )
        writer.write(b"\x01")  # ClientInit: shared, so other viewers stay connected.
        width, height = struct.unpack(">HH", await reader.readexactly(4))
        await reader.readexactly(16)  # the server's pixel format: ours replaces it below
        name = (await _read_text(reader)).strip()
        client = cls(reader, writer, version, width, height, name)
        writer.write(struct.pack(">B3x", SET_PIXEL_FORMAT) + PIXEL_FORMAT)
        encodings = (COPY_RECT, RAW, DESKTOP_SIZE)
        writer.write(
            struct.pack(f">BxH{len(encodings)}i", SET_ENCODINGS, len(encodings), *encodings)
        )
        await writer.drain()
        return client

    # ------------------------------------------------------------------------------ to the server
    def request_update(self, *, incremental: bool) -> None:
        """Ask for the whole framebuffer (only what changed, when ``incremental``)."""
        self.writer.write(
            struct.pack(
                ">BBHHHH", FRAMEBUFFER_UPDATE_REQUEST, incremental, 0, 0, self.width, self.height
            )
        )

    def key(self, keysym: int, pressed: bool) -> None:
        """Press or release the key of an X11 ``keysym``."""
        self.writer.write(struct.pack(">BBxxI", KEY_EVENT, pressed, keysym & 0xFFFFFFFF))

    def pointer(self, x: int, y: int, mask: int) -> None:
        """Move the pointer to ``x``, ``y`` with the buttons of ``mask`` down."""
        x = min(max(x, 0), 0xFFFF)
        y = min(max(y, 0), 0xFFFF)
        self.writer.write(struct.pack(">BBHH", POINTER_EVENT, mask & 0xFF, x, y))

    def cut_text(self, data: bytes) -> None:
        """Give the server's clipboard ``data`` (ClientCutText; Latin-1 by the RFB spec)."""
        self.writer.write(struct.pack(">B3xI", CLIENT_CUT_TEXT, len(data)) + data)

    async def flush(self) -> None:
        """Wait until the server's socket took what was written."""
        await self.writer.drain()

    async def close(self) -> None:
        """Close the socket."""
        self.writer.close()
        with contextlib.suppress(OSError, asyncio.CancelledError):
            await self.writer.wait_closed()

    # ------------------------------------------------------------------------------ from the server
    async def read_update(self) -> Update | CutText:
        """The next FramebufferUpdate or ServerCutText (other server messages are dropped).

        :raises RfbError: the server closed the connection or sent something this client
            cannot read.
        """
        try:
            while True:
                kind = (await self.reader.readexactly(1))[0]
                if kind == FRAMEBUFFER_UPDATE:
                    return await self._read_rects()
                if kind == SET_COLOUR_MAP_ENTRIES:
                    _, count = struct.unpack(">xHH", await self.reader.readexactly(5))
                    await self.reader.readexactly(6 * count)
                elif kind == BELL:
                    continue
                elif kind == SERVER_CUT_TEXT:
                    await self.reader.readexactly(3)
                    return CutText(await _read_bytes(self.reader))
                else:
                    raise RfbError(f"unknown server message type {kind}")
        except (OSError, asyncio.IncompleteReadError) as error:
            raise RfbError(f"the VNC server closed the connection: {error}") from error

    async def _read_rects(self) -> Update:
        (count,) = struct.unpack(">xH", await self.reader.readexactly(3))
        rects: list[Rect] = []
        for _ in range(count):
            header = await self.reader.readexactly(12)
            x, y, width, height, encoding = struct.unpack(">HHHHi", header)
            if encoding == RAW:
                size = width * height * BYTES_PER_PIXEL
                rects.append(RawRect(x, y, width, height, await self.reader.readexactly(size)))
            elif encoding == COPY_RECT:
                src_x, src_y = struct.unpack(">HH", await self.reader.readexactly(4))
                rects.append(CopyRect(x, y, width, height, src_x, src_y))
            elif encoding == DESKTOP_SIZE:
                self.width, self.height = width, height
                rects.append(DesktopSize(width, height))
            else:
                raise RfbError(f"the VNC server used encoding {encoding}, which was not asked for")
        return Update(tuple(rects))


async def _read_bytes(reader: asyncio.StreamReader) -> bytes:
    """A ``U32`` length and that many bytes."""
    (length,) = struct.unpack(">I", await reader.readexactly(4))
    if length > TEXT_LIMIT:
        raise RfbError(f"a text of {length} bytes is more than this client reads")
    return await reader.readexactly(length)


async def _read_text(reader: asyncio.StreamReader) -> str:
    """A ``U32`` length and that many bytes of text (Latin-1, as RFB's strings are)."""
    return (await _read_bytes(reader)).decode("latin-1")
