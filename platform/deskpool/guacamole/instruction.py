"""Guacamole instructions: encoding, and an incremental parser with guacd's limits.

An instruction is a list of elements, the first being the opcode, each written
``LENGTH.VALUE`` where ``LENGTH`` is the number of Unicode code points of ``VALUE`` (not bytes,
not UTF-16 units), separated by ``,`` and terminated by ``;``. Python strings index by code
point, so the parser works on decoded text; :class:`Utf8Decoder` turns a byte stream into text
without ever splitting a character.

The limits are libguac's (``parser-constants.h``): an element of at most
``GUAC_INSTRUCTION_MAX_LENGTH`` (8192) code points, a length prefix of at most
``GUAC_INSTRUCTION_MAX_DIGITS`` (5) digits, at most ``GUAC_INSTRUCTION_MAX_ELEMENTS`` (128)
elements, opcode included. The whole instruction is held to the same 8192 code points, as
guacamole-common's ``GuacamoleParser`` (the parser of Guacamole's own tunnel) holds it: no
instruction guacd or guacamole-common-js sends is longer (blobs are cut at 6048 bytes, 8064
base64 characters).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable
from typing import NamedTuple

from deskpool.guacamole.status import Status

__all__ = [
    "INTERNAL_OPCODE",
    "MAX_DIGITS",
    "MAX_ELEMENTS",
    "MAX_INSTRUCTION_LENGTH",
    "MAX_LENGTH",
    "SHORT_INSTRUCTIONS",
    "Instruction",
    "InstructionParser",
    "ProtocolError",
    "Utf8Decoder",
    "encode",
]

#: ``GUAC_INSTRUCTION_MAX_LENGTH``: the longest element, in code points.
MAX_LENGTH = 8192
#: ``GUAC_INSTRUCTION_MAX_DIGITS``: the most digits of one length prefix.
MAX_DIGITS = 5
#: ``GUAC_INSTRUCTION_MAX_ELEMENTS``: the most elements of one instruction, opcode included.
MAX_ELEMENTS = 128
#: The longest instruction, prefixes and separators included, in code points.
MAX_INSTRUCTION_LENGTH = 8192
#: The opcode of tunnel-internal instructions (``Guacamole.Tunnel.INTERNAL_DATA_OPCODE``).
INTERNAL_OPCODE = ""

#: A run of complete instructions whose elements are all shorter than 10 code points (a
#: one-digit length): most of a display stream's small drawing instructions. One regular
#: expression match skips them at C speed; each alternative fixes its element's length, so
#: the match is exact, and 128 such elements (at most 12 code points each) stay far below
#: every limit.
_SHORT_ELEMENT = "(?:" + "|".join(f"{n}\\.(?s:.{{{n}}})" for n in range(10)) + ")"
_SHORT_RUN = re.compile(f"(?:(?:{_SHORT_ELEMENT},){{0,{MAX_ELEMENTS - 1}}}{_SHORT_ELEMENT};)+")
#: The same, for other walkers of instructions (the gateway's stream guard).
SHORT_INSTRUCTIONS = _SHORT_RUN


class ProtocolError(Exception):
    """Input that breaks the protocol or guacd's limits.

    :param message: what is wrong (safe to log; never contains the input).
    :param status: the status a client sending it is closed with: ``CLIENT_BAD_REQUEST`` for
        malformed input, ``CLIENT_OVERRUN`` for input over a limit.
    """

    def __init__(self, message: str, status: Status) -> None:
        super().__init__(message)
        self.status = status


def _malformed(message: str) -> ProtocolError:
    return ProtocolError(message, Status.CLIENT_BAD_REQUEST)


def _overrun(message: str) -> ProtocolError:
    return ProtocolError(message, Status.CLIENT_OVERRUN)


def encode(opcode: str, *args: object) -> str:
    """The instruction ``opcode,args...;`` in the protocol's text form.

    Arguments that are not strings are written with ``str`` (integers, mostly).
    """
    parts = [f"{len(opcode)}.{opcode}"]
    for arg in args:
        text = arg if isinstance(arg, str) else str(arg)
        parts.append(f"{len(text)}.{text}")
    return ",".join(parts) + ";"


class Instruction(NamedTuple):
    """One parsed instruction."""

    opcode: str
    args: tuple[str, ...] = ()

    def encode(self) -> str:
        """The instruction in the protocol's text form."""
        return encode(self.opcode, *self.args)

    @classmethod
    def parse(cls, text: str) -> Instruction:
        """Parse exactly one complete instruction.

        :raises ProtocolError: ``text`` is not exactly one valid instruction.
        """
        parser = InstructionParser()
        found = parser.feed_instructions(text)
        if len(found) != 1 or parser.pending:
            raise _malformed("expected exactly one complete instruction")
        return found[0]


class InstructionParser:
    """Splits a text stream into complete instructions, enforcing guacd's limits.

    Feed it text as it arrives; it keeps an incomplete instruction for the next feed and
    resumes where it stopped (an instruction fed one character at a time costs no rescans).
    After a :class:`ProtocolError` the parser is unusable, as guacd's is.

    :param max_instruction_length: the longest instruction accepted, in code points.
    """

    __slots__ = (
        "_buffer",
        "_count",
        "_elements",
        "_failed",
        "_instruction_start",
        "_max",
        "_position",
    )

    def __init__(self, *, max_instruction_length: int = MAX_INSTRUCTION_LENGTH) -> None:
        self._max = max_instruction_length
        self._buffer = ""
        #: Where the next element's length prefix starts, relative to the buffer.
        self._position = 0
        #: Elements of the current instruction complete so far.
        self._count = 0
        #: (start, end) of each complete element of the current instruction, when collecting.
        self._elements: list[tuple[int, int]] = []
        self._failed = False
        #: Where the current (incomplete) instruction starts, relative to the buffer.
        self._instruction_start = 0

    @property
    def pending(self) -> int:
        """Code points of an incomplete instruction held for the next feed."""
        return len(self._buffer)

    def take_pending(self) -> str:
        """Return the incomplete instruction held so far and start afresh without it."""
        pending = self._buffer
        self._buffer = ""
        self._position = self._count = self._instruction_start = 0
        self._elements = []
        return pending

    def feed(self, text: str) -> str:
        """Append ``text``; return the complete instructions it finishes, as one string.

        The returned text is every complete instruction now buffered, in order, exactly as
        received; what follows the last ``;`` stays buffered.

        :raises ProtocolError: the stream breaks the protocol or a limit.
        """
        end = self._scan(text, None)
        complete = self._buffer[:end]
        self._buffer = self._buffer[end:]
        self._position -= end
        return complete

    def feed_instructions(self, text: str) -> list[Instruction]:
        """Append ``text``; return the instructions it finishes, parsed.

        :raises ProtocolError: the stream breaks the protocol or a limit.
        """
        found: list[Instruction] = []
        end = self._scan(text, found)
        self._buffer = self._buffer[end:]
        self._position -= end
        self._elements = [(a - end, b - end) for a, b in self._elements]
        return found

    def _scan(self, text: str, found: list[Instruction] | None) -> int:
        """Scan the buffer plus ``text``; return where the last complete instruction ends."""
        if self._failed:
            raise _malformed("the stream already broke the protocol")
        buffer = self._buffer + text if self._buffer else text
        self._buffer = buffer
        size = len(buffer)
        position = self._position
        count = self._count
        elements = self._elements
        start = self._instruction_start
        complete = 0
        limit = self._max
        short_run = _SHORT_RUN.match if found is None else None
        try:
            while position < size:
                if short_run is not None and not count:
                    run = short_run(buffer, position)
                    if run is not None:
                        position = start = complete = run.end()
                        if position >= size:
                            break
                dot = buffer.find(".", position, position + MAX_DIGITS + 1)
                if dot < 0:
                    digits = buffer[position : position + MAX_DIGITS + 1]
                    if len(digits) > MAX_DIGITS:
                        if digits.isascii() and digits.isdigit():
                            raise _overrun("element length has more than 5 digits")
                        raise _malformed("element length is not a number")
                    if digits and not (digits.isascii() and digits.isdigit()):
                        raise _malformed("element length is not a number")
                    break
                digits = buffer[position:dot]
                if digits and not (digits.isascii() and digits.isdigit()):
                    raise _malformed("element length is not a number")
                length = int(digits) if digits else 0
                if length > MAX_LENGTH:
                    raise _overrun("element longer than 8192 characters")
                end = dot + 1 + length
                if end - start >= limit:
                    raise _overrun("instruction longer than 8192 characters")
                if end >= size:
                    break
                count += 1
                if count > MAX_ELEMENTS:
                    raise _overrun("instruction has more than 128 elements")
                terminator = buffer[end]
                if found is not None:
                    elements.append((dot + 1, end))
                if terminator == ",":
                    position = end + 1
                elif terminator == ";":
                    position = complete = end + 1
                    if found is not None:
                        found.append(_instruction(buffer, elements))
                        elements.clear()
                    count = 0
                    start = position
                else:
                    raise _malformed("element not followed by ',' or ';'")
            if size - start > limit:
                raise _overrun("instruction longer than 8192 characters")
        except ProtocolError:
            self._failed = True
            raise
        self._position = position
        self._count = count
        self._instruction_start = start - complete
        return complete


def _instruction(buffer: str, elements: Iterable[tuple[int, int]]) -> Instruction:
    values = [buffer[a:b] for a, b in elements]
    return Instruction(values[0], tuple(values[1:]))


class Utf8Decoder:
    """Decodes a UTF-8 byte stream chunk by chunk; a character split across chunks waits."""

    __slots__ = ("_decoder",)

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")

    def decode(self, data: bytes) -> str:
        """The text ``data`` completes.

        :raises ProtocolError: ``data`` is not UTF-8 (status ``CLIENT_BAD_REQUEST``).
        """
        try:
            return self._decoder.decode(data)
        except UnicodeDecodeError:
            raise _malformed("the stream is not UTF-8") from None
