"""Recording a tunnel: what the daemon sends the browser, kept off the relay path.

The relay hands the recorder each message of complete instructions it sends the browser
(:meth:`Recorder.output`) and, with ``include_keys``, the browser's input
(:meth:`Recorder.input`: its ``key`` instructions are recorded as guacd records them, with the
time in milliseconds). Both only append to a buffer: nothing waits. The buffer is cut into a
chunk when it reaches :data:`CHUNK_BYTES` or when it waited ``RECORDINGS_CHUNK_SECONDS``, and the
chunk goes into a bounded queue that one writer task per tunnel empties through the broker
(:class:`~deskpool.sessions.tunnel.RecordingSink`: sealed by the recording store in a thread),
every chunk that waited in one call (at most :data:`BATCH_CHUNKS`).
So a gateway killed mid-session loses at most the last ``RECORDINGS_CHUNK_SECONDS`` and what
was queued. A queue that is full (the store is slower than the session) or a store that fails
stops the recording (marked ``truncated``), never the relay.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from deskpool.guacamole import InstructionParser, ProtocolError
from deskpool.recordings.model import key_instruction
from deskpool.sessions.tunnel import RecordingSink

__all__ = ["BATCH_CHUNKS", "CHUNK_BYTES", "Recorder"]

log = logging.getLogger(__name__)

#: Most bytes of one chunk (below the secret store's 64 KiB limit on what one seal holds).
CHUNK_BYTES = 60 * 1024
#: Chunks waiting for the writer at most.
QUEUE_CHUNKS = 64
#: Most chunks written in one call to the sink.
BATCH_CHUNKS = 64


class Recorder:
    """The recording of one tunnel.

    :param recording_id: the recording the broker started with the session.
    :param sink: where chunks are written.
    :param include_keys: record the user's key events too.
    :param chunk_seconds: longest time output waits in memory.
    """

    def __init__(
        self,
        recording_id: uuid.UUID,
        sink: RecordingSink,
        *,
        include_keys: bool,
        chunk_seconds: float,
        queue_chunks: int = QUEUE_CHUNKS,
    ) -> None:
        self.recording_id = recording_id
        self.sink = sink
        self.include_keys = include_keys
        self.chunk_seconds = chunk_seconds
        self.truncated = False
        self.stopped = False
        self._parts: list[str] = []
        self._size = 0
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=queue_chunks)
        self._task: asyncio.Task[None] | None = None
        self._keys = InstructionParser()

    def start(self) -> None:
        """Start the writer task."""
        self._task = asyncio.create_task(self._write(), name=f"recording {self.recording_id}")

    def output(self, text: str) -> None:
        """Record complete instructions the browser is sent (never waits)."""
        if self.stopped:
            return
        self._parts.append(text)
        self._size += len(text)
        if self._size >= CHUNK_BYTES:
            self._cut()

    def input(self, text: str) -> None:
        """Record the ``key`` instructions of the browser's input (with ``include_keys``)."""
        if not self.include_keys or self.stopped or "3.key," not in text:
            return
        try:
            instructions = self._keys.feed_instructions(text)
        except ProtocolError:
            return
        now = int(time.time() * 1000)
        for instruction in instructions:
            if instruction.opcode == "key" and len(instruction.args) >= 2:
                self.output(key_instruction(instruction.args[0], instruction.args[1], now))

    def _cut(self) -> None:
        """Queue what is buffered as chunks (each at most :data:`CHUNK_BYTES`)."""
        if not self._parts or self.stopped:
            return
        data = "".join(self._parts).encode()
        self._parts.clear()
        self._size = 0
        for offset in range(0, len(data), CHUNK_BYTES):
            try:
                self._queue.put_nowait(data[offset : offset + CHUNK_BYTES])
            except asyncio.QueueFull:
                log.warning(
                    "recording %s: the store falls behind; recording stopped", self.recording_id
                )
                self._stop()
                return

    def _stop(self) -> None:
        self.stopped = True
        self.truncated = True
        self._parts.clear()

    async def _write(self) -> None:
        index = 0
        ended = False
        while not ended:
            try:
                data = await asyncio.wait_for(self._queue.get(), self.chunk_seconds)
            except TimeoutError:
                self._cut()
                continue
            # Every chunk that waited while the last ones were written goes in one call: one
            # thread handoff, one append and sync, one row update (a writer that falls behind
            # catches up in larger writes instead of giving up).
            batch: list[bytes] = []
            while data is not None:
                batch.append(data)
                if len(batch) >= BATCH_CHUNKS or self._queue.empty():
                    break
                data = self._queue.get_nowait()
            ended = data is None
            if not batch:
                break
            try:
                await self.sink.record_chunks(self.recording_id, index, batch)
            except Exception as error:
                log.warning(
                    "recording %s: chunks %d-%d not written (%s); recording stopped",
                    self.recording_id,
                    index,
                    index + len(batch) - 1,
                    type(error).__name__,
                )
                self._stop()
                break
            index += len(batch)
        try:
            await self.sink.recording_ended(self.recording_id, truncated=self.truncated)
        except Exception as error:
            log.warning("recording %s: end not recorded: %s", self.recording_id, error)

    async def close(self) -> None:
        """Write what is buffered, then end the recording (waits for the writer)."""
        if self._task is None:
            return
        self._cut()
        if not self._task.done():
            await self._queue.put(None)
        await self._task
