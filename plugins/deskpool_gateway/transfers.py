"""The gateway's own enforcement of a tunnel's client policy, on the streams of both directions.

guacd is given the policy as connection arguments (``disable-copy``, ``disable-upload``...:
:func:`deskpool.client_policy.model.guacd_arguments`), and the gateway enforces it again
itself, the way it enforces read-only: whatever a client or guacd sends, a stream the policy
forbids does not cross, and a policy changed while the tunnel is open applies to the next
stream at once (guacd's arguments apply from the next connection).

The Guacamole streams it governs, by opcode (``idx`` a stream index, ``obj`` an object index):

==============================  =====================  ========================================
stream                          opened by              allowed when
==============================  =====================  ========================================
``clipboard,idx,mime``          browser / daemon       that direction is ``text`` and ``mime``
                                                       is ``text/*``; cut at its ``max_bytes``
``file,idx,mime,name``          browser (upload)       ``upload``; cut at ``max_file_bytes``
``put,obj,idx,mime,name``       browser (upload)       ``upload``; cut at ``max_file_bytes``
``file,idx,mime,name``          daemon (download)      ``download`` (``application/pdf`` from
                                                       guacd is a print job: ``printing``;
                                                       its downloads are octet-stream)
``body,obj,idx,mime,name``      daemon (download)      ``download`` (a directory listing, the
                                                       stream-index mimetype, always passes)
``audio,idx,mime``              browser (microphone)   ``microphone``
``audio,idx,mime``              daemon (sound)         ``audio_out``
``filesystem,obj,name``         daemon                 ``upload`` or ``download``
==============================  =====================  ========================================

A refused stream's ``blob`` and ``end`` are dropped with it. The sender is told as guacd tells
it: a browser's refused upload, paste or microphone gets ``ack,idx,<message>,771``
(CLIENT_FORBIDDEN), guacd's refused download or print job gets the same ``ack`` (it stops
sending), and a transfer cut at its limit gets ``ack,idx,<message>,781`` (CLIENT_OVERRUN) after
what fitted (but guacd's clipboard, which takes no ``ack``), then its other side gets ``end``.
The browser, which never sees what the desktop was refused, is told of it (and of a copy or
download cut at its limit) by ``msg,<TRANSFER_NOTICE>,<kind>,<reason>,<name>,<limit>``
(:data:`TRANSFER_NOTICE`, a message code of deskpool's own: guacamole-common-js hands it to
``Guacamole.Client.onmsg`` and otherwise ignores it), so that the console says so in words;
nothing of the content goes with it. Each clipboard transfer, file, print job and refused
stream becomes a :class:`~deskpool.client_policy.model.Transfer` (sizes, name, SHA-256 of
every byte sent, never the content), reported when it ends.

Cost: text with no governed stream open and none of the opening opcodes in it (one regular
expression over the encoded text, about 0.4 ms of CPU per MB) passes untouched. Otherwise its
instructions are walked by their elements' lengths, and only those of governed streams are
decoded; the others are forwarded as the text they came as, never decoded or encoded again.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from deskpool.client_policy.model import ClientPolicy, Direction, Transfer, TransferKind
from deskpool.guacamole import (
    SHORT_INSTRUCTIONS,
    Instruction,
    InstructionParser,
    Status,
    encode,
)

__all__ = ["DIRECTORY_MIMETYPE", "TRANSFER_NOTICE", "StreamGuard"]

#: The mimetype of a directory listing guacd sends as a ``body`` (not a file).
DIRECTORY_MIMETYPE = "application/vnd.glyptodon.guacamole.stream-index+json"
#: What a print job's ``file`` stream from guacd carries.
PRINT_MIMETYPE = "application/pdf"
#: The ``msg`` code telling the browser of a transfer from the desktop refused or cut (guacd's
#: own codes, a user joining or leaving, are 1 and 2).
TRANSFER_NOTICE = 0x4450

#: Encoded opcodes that open a governed stream, as they appear in the text (``4.file,``): one
#: regular expression scans a 64 KiB message about five times faster than five ``in`` tests.
_FROM_BROWSER = re.compile(r"\.(?:clipboard|file|put|audio),")
_FROM_DAEMON = re.compile(r"\.(?:clipboard|file|body|audio|filesystem),")
#: The same opcodes, as the walk over a message's instructions compares them.
_OPENERS_FROM_BROWSER = frozenset({"clipboard", "file", "put", "audio"})
_OPENERS_FROM_DAEMON = frozenset({"clipboard", "file", "body", "audio", "filesystem"})
#: The most digits of an element's length (the protocol parser's own limit).
_MAX_DIGITS = 5
#: What may be an instruction the guard looks at, inside a run of short instructions (an
#: element's text may hold it too: then the run is walked element by element, no harm done).
_SUSPECT_FROM_BROWSER = re.compile(r"\.(?:clipboard|file|put|audio|blob|end),")
_SUSPECT_FROM_DAEMON = re.compile(r"\.(?:clipboard|file|body|audio|filesystem|blob|end),")


@dataclass(slots=True)
class _Stream:
    """One governed stream, as far as it went."""

    kind: TransferKind
    direction: Direction
    limit: int
    refused: str | None
    name: str | None = None
    mimetype: str | None = None
    size: int = 0
    delivered: int = 0
    cut: bool = False
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)

    def transfer(self) -> Transfer:
        outcome = "refused" if self.refused else "cut" if self.cut else "allowed"
        reason = self.refused or ("over_limit" if self.cut else None)
        return Transfer(
            kind=self.kind,
            direction=self.direction,
            size=self.size,
            delivered=self.delivered,
            sha256=self.digest.hexdigest(),
            outcome=outcome,
            reason=reason,
            name=self.name,
            mimetype=self.mimetype,
        )


def _fitting(data: bytes, room: int, text: bool) -> bytes:
    """The first ``room`` bytes of ``data`` (for text, ending on a whole UTF-8 character)."""
    kept = data[: max(room, 0)]
    if text:
        kept = kept.decode("utf-8", "ignore").encode("utf-8")
    return kept


class StreamGuard:
    """A tunnel's client policy applied to what crosses it.

    :param policy: the policy offered to this tunnel's desktop
        (:func:`deskpool.client_policy.model.offered`); :attr:`policy` may be replaced while
        the tunnel is open, and governs every stream opened from then on.
    :param report: called with each finished transfer.
    """

    __slots__ = ("_from_browser", "_from_daemon", "policy", "report")

    def __init__(self, policy: ClientPolicy, report: Callable[[Transfer], None]) -> None:
        self.policy = policy
        self.report = report
        self._from_browser: dict[str, _Stream] = {}
        self._from_daemon: dict[str, _Stream] = {}

    # ------------------------------------------------------------------------------ browser
    def from_browser(self, text: str) -> tuple[str, str]:
        """``(for the daemon, answer for the browser)`` of the browser's complete ``text``."""
        return _governed(
            text,
            self._from_browser,
            (_FROM_BROWSER, _SUSPECT_FROM_BROWSER, _OPENERS_FROM_BROWSER),
            self._browser_instruction,
        )

    def _browser_instruction(
        self, instruction: Instruction, forward: list[str], answer: list[str]
    ) -> None:
        opcode, args = instruction
        streams = self._from_browser
        stream: _Stream | None = None
        if opcode == "clipboard" and len(args) >= 2:
            stream = self._clipboard(Direction.TO_DESKTOP, args[1])
            index = args[0]
        elif opcode == "file" and len(args) >= 3:
            stream = self._upload(args[1], args[2])
            index = args[0]
        elif opcode == "put" and len(args) >= 4:
            stream = self._upload(args[2], args[3])
            index = args[1]
        elif opcode == "audio" and len(args) >= 2:
            refused = None if self.policy.microphone else "microphone_off"
            stream = _Stream(TransferKind.MICROPHONE, Direction.TO_DESKTOP, 0, refused)
            stream.mimetype = args[1]
            index = args[0]
        elif opcode in ("blob", "end") and args and args[0] in streams:
            self._data(streams, instruction, forward, answer)
            return
        if stream is None:
            forward.append(instruction.encode())
            return
        self._opened(streams, index, stream)
        if stream.refused:
            answer.append(encode("ack", index, _refusal(stream), int(Status.CLIENT_FORBIDDEN)))
        else:
            forward.append(instruction.encode())

    def _upload(self, mimetype: str, name: str) -> _Stream:
        files = self.policy.files
        refused = None if files.upload else "upload_off"
        stream = _Stream(TransferKind.FILE, Direction.TO_DESKTOP, files.max_file_bytes, refused)
        stream.name, stream.mimetype = name, mimetype
        return stream

    # ------------------------------------------------------------------------------ daemon
    def from_daemon(self, text: str) -> tuple[str, str]:
        """``(for the browser, answer for the daemon)`` of the daemon's complete ``text``."""
        return _governed(
            text,
            self._from_daemon,
            (_FROM_DAEMON, _SUSPECT_FROM_DAEMON, _OPENERS_FROM_DAEMON),
            self._daemon_instruction,
        )

    def _daemon_instruction(
        self, instruction: Instruction, forward: list[str], answer: list[str]
    ) -> None:
        opcode, args = instruction
        streams = self._from_daemon
        policy = self.policy
        stream: _Stream | None = None
        index = args[0] if args else ""
        if opcode == "clipboard" and len(args) >= 2:
            stream = self._clipboard(Direction.TO_BROWSER, args[1])
        elif opcode == "file" and len(args) >= 3:
            stream = self._download(args[1], args[2], print_job=args[1] == PRINT_MIMETYPE)
        elif opcode == "body" and len(args) >= 4 and args[2] != DIRECTORY_MIMETYPE:
            stream = self._download(args[2], args[3], print_job=False)
            index = args[1]
        elif opcode == "audio" and len(args) >= 2 and not policy.audio_out:
            stream = _Stream(TransferKind.AUDIO, Direction.TO_BROWSER, 0, "audio_off")
            stream.mimetype = args[1]
        elif opcode == "filesystem":
            if policy.files.upload or policy.files.download:
                forward.append(instruction.encode())
            return
        elif opcode in ("blob", "end") and args and args[0] in streams:
            self._data(streams, instruction, forward, answer)
            return
        if stream is None:
            forward.append(instruction.encode())
            return
        self._opened(streams, index, stream)
        if stream.refused:
            if stream.kind is not TransferKind.AUDIO:
                forward.append(_notice(stream))
            # guacd waits for the browser's ack of a download or print job's blob (and stops on
            # an error); its clipboard and sound streams take none.
            if stream.kind in (TransferKind.FILE, TransferKind.PRINT):
                answer.append(encode("ack", index, _refusal(stream), int(Status.CLIENT_FORBIDDEN)))
        else:
            forward.append(instruction.encode())

    def _download(self, mimetype: str, name: str, *, print_job: bool) -> _Stream:
        policy = self.policy
        if print_job:
            refused = None if policy.printing else "printing_off"
            kind = TransferKind.PRINT
        else:
            refused = None if policy.files.download else "download_off"
            kind = TransferKind.FILE
        stream = _Stream(kind, Direction.TO_BROWSER, policy.files.max_file_bytes, refused)
        stream.name, stream.mimetype = name, mimetype
        return stream

    # ------------------------------------------------------------------------------ both
    def _clipboard(self, direction: Direction, mimetype: str) -> _Stream:
        clipboard = (
            self.policy.clipboard_to_desktop
            if direction is Direction.TO_DESKTOP
            else self.policy.clipboard_to_browser
        )
        refused = None
        if not clipboard.allowed:
            refused = "clipboard_off"
        elif not mimetype.startswith("text/"):
            refused = "not_text"
        stream = _Stream(TransferKind.CLIPBOARD, direction, clipboard.max_bytes, refused)
        stream.mimetype = mimetype
        return stream

    def _opened(self, streams: dict[str, _Stream], index: str, stream: _Stream) -> None:
        """Track ``stream`` under ``index`` (a stream left open there is reported first)."""
        previous = streams.pop(index, None)
        if previous is not None:
            self.report(previous.transfer())
        streams[index] = stream

    def _data(
        self,
        streams: dict[str, _Stream],
        instruction: Instruction,
        forward: list[str],
        answer: list[str],
    ) -> None:
        """A ``blob`` or ``end`` of a governed stream: forwarded, cut or dropped."""
        opcode, args = instruction
        index = args[0]
        stream = streams[index]
        if opcode == "end":
            del streams[index]
            if not stream.refused and not stream.cut:
                forward.append(instruction.encode())
            self.report(stream.transfer())
            return
        try:
            data = binascii.a2b_base64(args[1]) if len(args) >= 2 else b""
        except binascii.Error:
            data = b""
        stream.size += len(data)
        stream.digest.update(data)
        if stream.refused or stream.cut:
            return
        if stream.delivered + len(data) <= stream.limit:
            stream.delivered += len(data)
            forward.append(instruction.encode())
            return
        kept = _fitting(
            data, stream.limit - stream.delivered, stream.kind is TransferKind.CLIPBOARD
        )
        stream.cut = True
        if kept:
            stream.delivered += len(kept)
            forward.append(encode("blob", index, base64.b64encode(kept).decode("ascii")))
        forward.append(encode("end", index))
        if stream.direction is Direction.TO_BROWSER:
            forward.append(_notice(stream))
        if stream.direction is Direction.TO_DESKTOP or stream.kind is not TransferKind.CLIPBOARD:
            message = f"FAIL (over the limit of {stream.limit} bytes)"
            answer.append(encode("ack", index, message, int(Status.CLIENT_OVERRUN)))

    def close(self) -> None:
        """The tunnel ended: report the streams still open, as far as they went."""
        for streams in (self._from_browser, self._from_daemon):
            for stream in streams.values():
                self.report(stream.transfer())
            streams.clear()


_Handler = Callable[[Instruction, list[str], list[str]], None]


#: A side's opening opcodes as found in text, what may be a governed instruction, and the
#: opening opcodes as compared.
_Side = tuple[re.Pattern[str], re.Pattern[str], frozenset[str]]


def _governed(
    text: str, streams: dict[str, _Stream], side: _Side, handle: _Handler
) -> tuple[str, str]:
    """``(forwarded, answered)`` of ``text``: untouched unless a governed stream is involved.

    Only the instructions that open a governed stream (``opcodes``) or carry one's ``blob`` or
    ``end`` are decoded and handed to ``handle``; every other instruction is forwarded as the
    very text it came as (a desktop's display between two clipboard blobs is neither decoded
    nor encoded again). Text the walk cannot follow goes through the protocol's parser whole.
    """
    openers, suspect, opcodes = side
    if not streams and openers.search(text) is None:
        return text, ""
    walked = _walk(text, suspect)
    if walked is None:
        return _parsed(text, handle)
    forward: list[str] = []
    answer: list[str] = []
    untouched = 0
    for start, end, spans in walked:
        opcode = text[spans[0][0] : spans[0][1]]
        if opcode not in opcodes:
            if opcode not in ("blob", "end") or len(spans) < 2:
                continue
            if text[spans[1][0] : spans[1][1]] not in streams:
                continue
        if untouched < start:
            forward.append(text[untouched:start])
        handle(Instruction(opcode, tuple(text[a:b] for a, b in spans[1:])), forward, answer)
        untouched = end
    if not untouched:
        return text, "".join(answer)
    forward.append(text[untouched:])
    return "".join(forward), "".join(answer)


def _walk(
    text: str, suspect: re.Pattern[str]
) -> list[tuple[int, int, list[tuple[int, int]]]] | None:
    """The instructions of ``text`` the guard may look at: ``(start, end, element spans)``.

    None if ``text`` is malformed. Element lengths are read, never the elements, and a run of
    short instructions (:data:`~deskpool.guacamole.SHORT_INSTRUCTIONS`: a display's drawing)
    with nothing ``suspect`` in it is skipped in one match: the walk costs little per byte.
    """
    walked: list[tuple[int, int, list[tuple[int, int]]]] = []
    position, size = 0, len(text)
    # Up to where the text is walked element by element (a suspect was seen in a short run).
    careful = 0
    while position < size:
        if position >= careful:
            run = SHORT_INSTRUCTIONS.match(text, position)
            if run is not None:
                seen = suspect.search(text, position, run.end())
                if seen is None:
                    position = run.end()
                    continue
                careful = seen.end()
        start = position
        spans: list[tuple[int, int]] = []
        while True:
            dot = text.find(".", position, position + _MAX_DIGITS + 1)
            digits = text[position:dot]
            if dot < 0 or not (digits.isascii() and digits.isdigit()):
                return None
            begin = dot + 1
            finish = begin + int(digits)
            if finish >= size:
                return None
            spans.append((begin, finish))
            separator = text[finish]
            position = finish + 1
            if separator == ";":
                break
            if separator != ",":
                return None
        walked.append((start, position, spans))
    return walked


def _parsed(text: str, handle: _Handler) -> tuple[str, str]:
    """``(forwarded, answered)`` of ``text`` through the protocol's parser (every instruction)."""
    forward: list[str] = []
    answer: list[str] = []
    for instruction in InstructionParser().feed_instructions(text):
        handle(instruction, forward, answer)
    return "".join(forward), "".join(answer)


def _notice(stream: _Stream) -> str:
    """The browser's word of a transfer from the desktop refused or cut (``TRANSFER_NOTICE``)."""
    limit = stream.limit if stream.cut else 0
    reason = stream.refused or "over_limit"
    return encode("msg", TRANSFER_NOTICE, stream.kind.value, reason, stream.name or "", limit)


def _refusal(stream: _Stream) -> str:
    """The ``ack`` message of a refused stream, as guacd words its own (``FAIL (...)``)."""
    return f"FAIL ({(stream.refused or 'refused').replace('_', ' ')})"
