"""Reading and writing instructions over an asyncio stream (the guacd side of a socket).

:class:`InstructionReader` is what both ends of a daemon connection use during the handshake:
the gateway reading ``args`` and ``ready``, the simulator reading ``select`` to ``connect``.
After the handshake a relay takes over with :meth:`InstructionReader.detach`, which hands back
whatever was already read past the last instruction returned, so nothing is lost or reordered.
"""

from __future__ import annotations

import asyncio
from collections import deque

from deskpool.guacamole.instruction import (
    Instruction,
    InstructionParser,
    ProtocolError,
    Utf8Decoder,
)
from deskpool.guacamole.status import Status

__all__ = ["InstructionReader", "StreamClosed"]

#: Bytes asked of the stream per read.
READ_SIZE = 65536


class StreamClosed(Exception):
    """The peer closed the stream (``partial`` when it did so inside an instruction)."""

    def __init__(self, partial: bool) -> None:
        super().__init__("the stream ended inside an instruction" if partial else "end of stream")
        self.partial = partial


class InstructionReader:
    """Reads whole instructions from ``reader``.

    :param reader: the stream.
    """

    __slots__ = ("_parser", "_queue", "_reader", "decoder")

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self._parser = InstructionParser()
        self._queue: deque[Instruction] = deque()
        self.decoder = Utf8Decoder()

    async def read(self) -> Instruction:
        """The next instruction (wrap the call in ``asyncio.timeout`` to bound the wait).

        :raises StreamClosed: the stream ended first.
        :raises ProtocolError: the stream broke the protocol or guacd's limits.
        """
        if self._queue:
            return self._queue.popleft()
        while not self._queue:
            data = await self._reader.read(READ_SIZE)
            if not data:
                raise StreamClosed(partial=bool(self._parser.pending))
            self._queue.extend(self._parser.feed_instructions(self.decoder.decode(data)))
        return self._queue.popleft()

    async def expect(self, opcode: str) -> Instruction:
        """The next instruction, which must have ``opcode``.

        :raises ProtocolError: another instruction came (status ``UPSTREAM_ERROR``); an
            ``error`` or ``disconnect`` is returned as is, for the caller to report.
        """
        instruction = await self.read()
        if instruction.opcode not in (opcode, "error", "disconnect"):
            raise ProtocolError(
                f"expected {opcode!r}, received {instruction.opcode!r}", Status.UPSTREAM_ERROR
            )
        return instruction

    def detach(self) -> str:
        """The text read past the last instruction returned (complete instructions first)."""
        queued = "".join(instruction.encode() for instruction in self._queue)
        self._queue.clear()
        return queued + self._parser.take_pending()
