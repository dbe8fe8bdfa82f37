"""What leaves and enters a simulated desktop besides pixels: clipboard, files, sound, print.

It speaks these streams as guacd 1.6.0 does (libguac's ``user-handlers.c``, the VNC and RDP
plugins' ``clipboard.c``, ``upload.c``, ``download.c``, ``ls.c``, ``print-job.c``):

- **Clipboard** (``clipboard``, ``blob``, ``end``). A user's ``text/plain`` stream replaces the
  desktop's clipboard when it ends (at most :data:`CLIPBOARD_LIMIT`, 256 KiB; more is cut, as
  ``guac_common_clipboard_append`` cuts it); with ``disable-paste`` the stream is refused with
  ``ack <stream> "Clipboard unsupported" 256`` (guacd sets no clipboard handler). When the desktop
  copies, every user gets a ``clipboard`` stream of its own (an even, user-level index) with
  ``blob`` blocks of 4096 bytes and ``end``, unless ``disable-copy``.
- **Files** (RDP with ``enable-drive``): right after the first frame each user is sent
  ``filesystem 0 "Shared Drive"``. ``get 0 <path>`` of a folder answers ``body`` with the
  stream-index type and, once acknowledged, the JSON listing and ``end``; of a file, ``body``
  ``application/octet-stream`` and, at each successful ``ack``, 4096 more bytes, then ``end``
  (nothing at all with ``disable-download``). ``put 0 <stream> <type> <path>`` and ``file
  <stream> <type> <name>`` (into the drive's root) are acknowledged ``OK (STREAM BEGIN)``, each
  ``blob`` ``OK (DATA RECEIVED)``, ``end`` ``OK (STREAM END)``; with ``disable-upload``
  ``FAIL (UPLOAD DISABLED)`` 771. Without a drive, ``file`` and ``put`` are refused
  ``File transfer unsupported`` / ``Object write unsupported`` 256. A file the desktop saves to
  its ``Download`` folder reaches the user as a ``file`` stream that advances at each ``ack``.
- **Printing** (RDP with ``enable-printing``): a printed page reaches the user as a ``file``
  stream of ``application/pdf`` named ``guacamole-print.pdf``, 6048 bytes per ``ack``.
- **Sound**: the desktop's sound is an ``audio`` stream of ``audio/L16;rate=44100,channels=2``
  on a client-level (odd) index, its PCM in ``blob`` instructions, then ``end`` (RDP unless
  ``disable-audio``; VNC with ``enable-audio``). A user's microphone stream (``audio`` from the
  user) is acknowledged ``OK`` with ``enable-audio-input`` (RDP), else refused
  ``Audio input unsupported`` 256.

A read-only user sends nothing here but ``ack``. Every transfer that reached the desktop is kept
in :attr:`Transfers.received` (and the drive's files in :attr:`Transfers.files`) so tests can
check what got through.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from deskpool.guacamole import Instruction, Status, encode

__all__ = [
    "CLIPBOARD_LIMIT",
    "STREAM_OPCODES",
    "Switches",
    "Transfers",
]

#: ``GUAC_COMMON_CLIPBOARD_MAX_LENGTH``: the most bytes of clipboard guacd 1.6.0 keeps.
CLIPBOARD_LIMIT = 262144
#: ``GUAC_COMMON_CLIPBOARD_BLOCK_SIZE``: bytes per ``blob`` of a clipboard stream.
CLIPBOARD_BLOCK = 4096
#: Bytes per ``blob`` of a download (``download.c`` reads 4096 at a time).
DOWNLOAD_BLOCK = 4096
#: Bytes per ``blob`` of a print job (``print-job.c`` reads 6048 at a time).
PRINT_BLOCK = 6048
#: ``GUAC_USER_STREAM_INDEX_MIMETYPE``: the type of a folder's listing.
STREAM_INDEX_MIMETYPE = "application/vnd.glyptodon.guacamole.stream-index+json"
#: The name guacd's RDP plugin gives its drive's filesystem object.
DRIVE_NAME = "Shared Drive"
#: ``GUAC_RDP_PRINT_JOB_DEFAULT_FILENAME``.
PRINT_FILENAME = "guacamole-print.pdf"
#: The folder whose files guacd's RDP drive sends to the user.
DOWNLOAD_FOLDER = "/Download"
#: The desktop's sound format (guacd's RDP and PulseAudio output).
AUDIO_MIMETYPE = "audio/L16;rate=44100,channels=2"
#: The opcodes this module handles (after the handshake).
STREAM_OPCODES = frozenset({"clipboard", "blob", "end", "ack", "get", "put", "file", "audio"})


class StreamUser(Protocol):
    """A user's socket, as the transfers see it."""

    async def send(self, text: str) -> None:
        """Write ``text`` and wait for the socket to take it."""


def _true(values: Mapping[str, str], name: str) -> bool:
    return values.get(name, "") == "true"


@dataclass(frozen=True)
class Switches:
    """What a connection's ``connect`` arguments allow, as guacd 1.6.0 reads them."""

    copy: bool = True
    paste: bool = True
    drive: bool = False
    upload: bool = True
    download: bool = True
    audio: bool = True
    microphone: bool = False
    printing: bool = False

    @classmethod
    def of(cls, protocol: str, values: Mapping[str, str]) -> Switches:
        """The switches of a ``vnc`` or ``rdp`` connection's argument values."""
        if protocol == "rdp":
            return cls(
                copy=not _true(values, "disable-copy"),
                paste=not _true(values, "disable-paste"),
                drive=_true(values, "enable-drive"),
                upload=not _true(values, "disable-upload"),
                download=not _true(values, "disable-download"),
                audio=not _true(values, "disable-audio"),
                microphone=_true(values, "enable-audio-input"),
                printing=_true(values, "enable-printing"),
            )
        return cls(
            copy=not _true(values, "disable-copy"),
            paste=not _true(values, "disable-paste"),
            drive=False,
            audio=_true(values, "enable-audio"),
        )


@dataclass
class _Outbound:
    """A stream to a user that advances at each successful ``ack``."""

    data: bytes
    block: int
    offset: int = 0
    #: Send everything at the first ``ack`` (a folder's listing, as ``ls.c`` does).
    whole: bool = False


@dataclass
class _Inbound:
    """A stream from a user: what it is and what arrived so far."""

    kind: str  # clipboard, upload or microphone
    name: str = ""
    data: bytearray = field(default_factory=bytearray)


@dataclass
class _UserStreams:
    next_index: int = 0
    inbound: dict[str, _Inbound] = field(default_factory=dict)
    outbound: dict[str, _Outbound] = field(default_factory=dict)

    def allocate(self) -> str:
        """An even (user-level) stream index, as ``guac_user_alloc_stream`` gives."""
        index = self.next_index
        self.next_index = (self.next_index + 2) % 128
        return str(index)


@dataclass(frozen=True)
class Received:
    """What reached the desktop: ``kind`` is ``clipboard``, ``upload`` or ``microphone``."""

    kind: str
    name: str
    data: bytes


def _ack(stream: str, message: str, status: Status) -> str:
    return encode("ack", stream, message, int(status))


def _blobs(stream: str, data: bytes, block: int) -> str:
    return "".join(
        encode("blob", stream, base64.b64encode(data[i : i + block]).decode())
        for i in range(0, len(data), block)
    )


def beep(seconds: float = 0.2, frequency: float = 440.0) -> bytes:
    """A sine tone as 16-bit little-endian stereo PCM at 44100 Hz."""
    count = int(44100 * seconds)
    samples = (int(8000 * math.sin(2 * math.pi * frequency * n / 44100)) for n in range(count))
    return b"".join(struct.pack("<hh", s, s) for s in samples)


class Transfers:
    """The clipboard, drive, print and sound streams of one connection.

    :param switches: what the connection's arguments allow.
    :param on_clipboard: called with the desktop's new clipboard text when a user's clipboard
        stream ends (a bridged VNC server is sent it as ClientCutText).
    """

    def __init__(
        self, switches: Switches, on_clipboard: Callable[[str], None] | None = None
    ) -> None:
        self.switches = switches
        self.on_clipboard = on_clipboard
        #: The desktop's clipboard text.
        self.clipboard = ""
        #: The drive's files by path (``/name``).
        self.files: dict[str, bytes] = {}
        #: Every transfer that reached the desktop, in order.
        self.received: list[Received] = []
        self._users: dict[StreamUser, _UserStreams] = {}
        self._audio_index = 1

    def _of(self, user: StreamUser) -> _UserStreams:
        return self._users.setdefault(user, _UserStreams())

    def left(self, user: StreamUser) -> None:
        """Forget a user who left."""
        self._users.pop(user, None)

    async def joined(self, user: StreamUser) -> None:
        """A user saw the first frame: expose the drive (``filesystem``) when there is one."""
        self._of(user)
        if self.switches.drive:
            await user.send(encode("filesystem", 0, DRIVE_NAME))

    # -------------------------------------------------------------------------- from users
    async def handle(self, user: StreamUser, instruction: Instruction, *, read_only: bool) -> None:
        """Handle one of :data:`STREAM_OPCODES` from ``user`` (a read-only user: ``ack`` only)."""
        opcode, args = instruction
        if opcode == "ack":
            if len(args) >= 3:
                await self._acknowledged(user, args[0], args[2])
            return
        if read_only or not args:
            return
        streams = self._of(user)
        if opcode == "clipboard":
            paste = self.switches.paste
            await self._open(user, streams, args[0], "clipboard", paste, "Clipboard unsupported")
        elif opcode == "file" and len(args) >= 3:
            name = "/" + args[2].replace("/", "_").replace("\\", "_")
            await self._upload(user, streams, args[0], name, "File transfer unsupported")
        elif opcode == "put" and len(args) >= 4:
            await self._upload(user, streams, args[1], args[3], "Object write unsupported")
        elif opcode == "audio":
            microphone = self.switches.microphone
            refusal = "Audio input unsupported"
            await self._open(user, streams, args[0], "microphone", microphone, refusal)
            if self.switches.microphone:
                await user.send(_ack(args[0], "OK", Status.SUCCESS))
        elif opcode == "get" and len(args) >= 2 and self.switches.drive:
            await self._get(user, streams, args[1])
        elif opcode == "blob" and len(args) >= 2:
            await self._blob(user, streams, args[0], args[1])
        elif opcode == "end":
            await self._end(user, streams, args[0])

    async def _open(
        self,
        user: StreamUser,
        streams: _UserStreams,
        index: str,
        kind: str,
        allowed: bool,
        refusal: str,
        name: str = "",
    ) -> None:
        streams.inbound.pop(index, None)
        if not allowed:
            await user.send(_ack(index, refusal, Status.UNSUPPORTED))
            return
        streams.inbound[index] = _Inbound(kind, name)

    async def _upload(
        self, user: StreamUser, streams: _UserStreams, index: str, name: str, refusal: str
    ) -> None:
        if not self.switches.drive:
            await self._open(user, streams, index, "upload", False, refusal)
        elif not self.switches.upload:
            streams.inbound.pop(index, None)
            await user.send(_ack(index, "FAIL (UPLOAD DISABLED)", Status.CLIENT_FORBIDDEN))
        else:
            await self._open(user, streams, index, "upload", True, refusal, name)
            await user.send(_ack(index, "OK (STREAM BEGIN)", Status.SUCCESS))

    async def _blob(self, user: StreamUser, streams: _UserStreams, index: str, text: str) -> None:
        inbound = streams.inbound.get(index)
        if inbound is None:
            await user.send(_ack(index, "Invalid stream index", Status.CLIENT_BAD_REQUEST))
            return
        try:
            data = base64.b64decode(text, validate=True)
        except binascii.Error:
            data = b""
        if inbound.kind == "clipboard":
            inbound.data += data[: CLIPBOARD_LIMIT - len(inbound.data)]
        else:
            inbound.data += data
        if inbound.kind == "upload":
            await user.send(_ack(index, "OK (DATA RECEIVED)", Status.SUCCESS))

    async def _end(self, user: StreamUser, streams: _UserStreams, index: str) -> None:
        inbound = streams.inbound.pop(index, None)
        if inbound is None:
            await user.send(_ack(index, "Invalid stream index", Status.CLIENT_BAD_REQUEST))
            return
        data = bytes(inbound.data)
        self.received.append(Received(inbound.kind, inbound.name, data))
        if inbound.kind == "clipboard":
            self.clipboard = data.decode("utf-8", "replace")
            if self.on_clipboard is not None:
                self.on_clipboard(self.clipboard)
        elif inbound.kind == "upload":
            self.files[inbound.name] = data
            await user.send(_ack(index, "OK (STREAM END)", Status.SUCCESS))

    async def _get(self, user: StreamUser, streams: _UserStreams, path: str) -> None:
        folder = path.rstrip("/") or ""
        names = {name for name in self.files if name.startswith(folder + "/")}
        if path in ("/", DOWNLOAD_FOLDER) or (names and path not in self.files):
            listing: dict[str, str] = {}
            if not folder:
                listing[DOWNLOAD_FOLDER] = STREAM_INDEX_MIMETYPE
            for name in sorted(names):
                if "/" not in name[len(folder) + 1 :]:
                    listing[name] = "application/octet-stream"
            index = streams.allocate()
            listed = json.dumps(listing).encode()
            streams.outbound[index] = _Outbound(listed, DOWNLOAD_BLOCK, whole=True)
            await user.send(encode("body", 0, index, STREAM_INDEX_MIMETYPE, path))
        elif path in self.files and self.switches.download:
            index = streams.allocate()
            streams.outbound[index] = _Outbound(self.files[path], DOWNLOAD_BLOCK)
            await user.send(encode("body", 0, index, "application/octet-stream", path))

    async def _acknowledged(self, user: StreamUser, index: str, status: str) -> None:
        streams = self._users.get(user)
        outbound = streams.outbound.get(index) if streams else None
        if streams is None or outbound is None:
            return
        if status != str(int(Status.SUCCESS)):
            del streams.outbound[index]
            return
        if outbound.offset >= len(outbound.data):
            del streams.outbound[index]
            await user.send(encode("end", index))
            return
        if outbound.whole:
            del streams.outbound[index]
            await user.send(_blobs(index, outbound.data, outbound.block) + encode("end", index))
            return
        chunk = outbound.data[outbound.offset : outbound.offset + outbound.block]
        outbound.offset += len(chunk)
        await user.send(_blobs(index, chunk, len(chunk)))

    # -------------------------------------------------------------------------- from the desktop
    async def copy(self, users: list[StreamUser], text: str) -> None:
        """The desktop copied ``text``: every user gets a clipboard stream (unless disabled)."""
        self.clipboard = text
        if not self.switches.copy:
            return
        data = text.encode()[:CLIPBOARD_LIMIT]
        for user in users:
            index = self._of(user).allocate()
            await user.send(
                encode("clipboard", index, "text/plain")
                + _blobs(index, data, CLIPBOARD_BLOCK)
                + encode("end", index)
            )

    async def save_download(self, user: StreamUser, name: str, data: bytes) -> bool:
        """The desktop saved ``name`` in its ``Download`` folder: offer it to ``user``.

        Returns whether it was offered (a drive, downloads allowed).
        """
        if not (self.switches.drive and self.switches.download):
            return False
        return await self._offer(user, "application/octet-stream", name, data, DOWNLOAD_BLOCK)

    async def print_pdf(self, user: StreamUser, pdf: bytes) -> bool:
        """The desktop printed: offer the PDF to ``user``; whether printing is on."""
        if not self.switches.printing:
            return False
        return await self._offer(user, "application/pdf", PRINT_FILENAME, pdf, PRINT_BLOCK)

    async def _offer(
        self, user: StreamUser, mimetype: str, name: str, data: bytes, block: int
    ) -> bool:
        streams = self._of(user)
        index = streams.allocate()
        streams.outbound[index] = _Outbound(data, block)
        await user.send(encode("file", index, mimetype, name))
        return True

    async def play(self, users: list[StreamUser], pcm: bytes) -> bool:
        """The desktop plays ``pcm``: an ``audio`` stream to every user; whether sound is on."""
        if not self.switches.audio:
            return False
        index = str(self._audio_index)
        self._audio_index = (self._audio_index + 2) % 128
        text = (
            encode("audio", index, AUDIO_MIMETYPE)
            + _blobs(index, pcm, PRINT_BLOCK)
            + encode("end", index)
        )
        for user in users:
            await user.send(text)
        return True
