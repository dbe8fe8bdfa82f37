"""Recording a tunnel: what the daemon sends the browser, handed to the recording writer.

The relay hands the recorder each message of complete instructions it sends the browser, as the
very bytes it sends (:meth:`Recorder.output`), and, with ``include_keys``, the browser's input
(:meth:`Recorder.input`: its ``key`` instructions are recorded as guacd records them, with the
time in milliseconds). Each goes straight to the tunnel's
:class:`~deskpool_gateway.recording_writer.RecordingChannel`: one copy into the ring the
gateway's recording writer process reads, which cuts the chunks, seals and writes them. A writer
that cannot keep up stops the recording (marked ``truncated``), never the relay.
"""

from __future__ import annotations

import time
import uuid

from deskpool.guacamole import InstructionParser, ProtocolError
from deskpool.recordings.model import key_instruction
from deskpool_gateway.recording_writer import RecordingChannel

__all__ = ["Recorder"]


class Recorder:
    """The recording of one tunnel.

    :param channel: the recording's channel to the gateway's recording writer.
    :param include_keys: record the user's key events too.
    """

    def __init__(self, channel: RecordingChannel, *, include_keys: bool) -> None:
        self.channel = channel
        self.include_keys = include_keys
        self._keys = InstructionParser()

    @property
    def recording_id(self) -> uuid.UUID:
        """The recording the broker started with the session."""
        return self.channel.recording_id

    @property
    def stopped(self) -> bool:
        """Whether recording stopped before the tunnel (nothing more is recorded)."""
        return self.channel.stopped

    @property
    def truncated(self) -> bool:
        """Whether the recording misses part of the session."""
        return self.channel.truncated

    def output(self, data: bytes) -> None:
        """Record complete instructions the browser is sent (never waits)."""
        if not self.channel.stopped:
            self.channel.put(data)

    def input(self, text: str) -> None:
        """Record the ``key`` instructions of the browser's input (with ``include_keys``)."""
        if not self.include_keys or self.channel.stopped or "3.key," not in text:
            return
        try:
            instructions = self._keys.feed_instructions(text)
        except ProtocolError:
            return
        now = int(time.time() * 1000)
        for instruction in instructions:
            if instruction.opcode == "key" and len(instruction.args) >= 2:
                self.output(key_instruction(instruction.args[0], instruction.args[1], now).encode())

    async def close(self) -> None:
        """End the recording: waits until what was handed over is kept and counted."""
        await self.channel.close()
