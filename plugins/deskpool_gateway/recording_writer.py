"""The gateway's side of its recording writer: a ring of shared memory and a control socket.

One :class:`RecordingWriter` per gateway process starts the writer process
(:mod:`deskpool_gateway.recording_process`) when the first recorded tunnel opens, and a new one
when the last one died. Each recording is a :class:`RecordingChannel`. Handing it what the
relay sends a browser (:meth:`RecordingChannel.put`) copies those bytes into the ring and queues
a 17-byte message (the messages of one turn of the event loop go in one write): that is all the
relay pays for recording, and it never waits. The writer cuts, seals, writes and syncs in its
own process, on CPU time the relay leaves, and answers which chunks are kept (with their sizes)
and how much of the ring is free again.

Each channel counts its kept chunks in the recording's row through the session broker
(:class:`~deskpool.sessions.tunnel.RecordingSink`): one update for every chunk kept since the
last, at most every :data:`COUNT_INTERVAL` while the recording goes on and at once when it
ends; then it ends the recording. A recording stops, ``truncated``, rather than slow the relay:
when more than :data:`QUEUE_BYTES` of it wait in the ring or the ring is full (the writer is
slower than the sessions), when the store refuses a chunk, or when the writer process dies. A
gateway killed mid-session loses only the chunks kept since their last count (the writer keeps
everything it was handed).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import mmap
import os
import socket
import sys
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence

from deskpool.sessions.tunnel import RecordingSink
from deskpool_gateway.recording_process import (
    DONE,
    FAILED,
    FREED,
    KEPT,
    READY,
    Reply,
    close_message,
    config_message,
    data_message,
    open_message,
    read_replies,
)

__all__ = [
    "COUNT_INTERVAL",
    "QUEUE_BYTES",
    "RING_BYTES",
    "RecordingChannel",
    "RecordingWriter",
]

log = logging.getLogger(__name__)

#: Bytes of shared memory between the gateway and its writer (how far the writer may lag behind
#: the relays, all recordings together: a burst this large is recorded whole however busy the
#: machine, and written once the relays leave the writer CPU time). Made when the writer starts.
RING_BYTES = 128 * 1024 * 1024
#: Most bytes of one recording in the ring (so that one recording cannot take all of it).
QUEUE_BYTES = 64 * 1024 * 1024
#: Least seconds between two counts of a recording's kept chunks while it goes on.
COUNT_INTERVAL = 1.0
#: Least seconds between two starts of the writer process (one that dies at once is not
#: restarted for every tunnel).
RESTART_PAUSE = 5.0
#: Seconds a stopping gateway gives its writer to write what it was handed.
STOP_TIMEOUT = 30.0
#: What the writer process runs (``-m`` would import its module a second time: the package
#: imports it too).
WRITER_MAIN = "import sys; from deskpool_gateway.recording_process import main; sys.exit(main())"
#: Times an ending recording's count is tried before its last chunks are given up.
COUNT_TRIES = 3
#: The writer's memory allocator keeps what it freed instead of handing it back to the system
#: at once: every chunk it seals is about 60 KiB, allocated and freed thousands of times a
#: second, and memory the system hands out anew costs a page fault per page (``brk``,
#: ``munmap`` and faults showed in the writer's profile; with this and ``gc.freeze`` the
#: writer's CPU per MB recorded went from 2.3-2.7 to 1.6-2.1 ms in ``bench/gateway.py``).
WRITER_MALLOC = {
    "MALLOC_TRIM_THRESHOLD_": str(64 * 1024 * 1024),
    "MALLOC_MMAP_THRESHOLD_": str(4 * 1024 * 1024),
}


class RecordingChannel:
    """One recording: its bytes go to the writer, and its chunks are counted once kept.

    :param recording_id: the recording the broker started with the session.
    :param sink: where kept chunks are counted and the recording is ended.
    """

    def __init__(
        self,
        recording_id: uuid.UUID,
        sink: RecordingSink,
        *,
        queue_bytes: int = QUEUE_BYTES,
        count_interval: float = COUNT_INTERVAL,
    ) -> None:
        self.recording_id = recording_id
        self.sink = sink
        self.queue_bytes = queue_bytes
        self.count_interval = count_interval
        #: The writer this channel hands bytes to, and its number there (``None``: none).
        self.writer: _WriterProcess | None = None
        self.number = 0
        #: Bytes handed to the writer; chunks counted in the row.
        self.handed = 0
        self.counted = 0
        self.stopped = False
        self.truncated = False
        self._in_ring: deque[tuple[int, int]] = deque()  # (end position, size), not yet read
        self._ring_bytes = 0
        self._kept: list[int] = []  # sizes of the chunks kept, not yet counted
        self._finished = False  # the writer kept all it will keep of this recording
        self._wake = asyncio.Event()
        self._ending = asyncio.Event()
        self._task = asyncio.create_task(self._count(), name=f"recording {recording_id}")

    def put(self, data: bytes) -> bool:
        """Hand over the next bytes of the recording; never waits.

        :returns: ``False`` when the recording stopped (truncated) instead.
        """
        if self.stopped:
            return False
        writer = self.writer
        if writer is None:
            self.stop("no recording writer runs")
            return False
        if writer.ready and self._ring_bytes + len(data) > self.queue_bytes:
            self.stop("the store falls behind")
            return False
        end = writer.put(self.number, data)
        if end is None:
            self.stop("the store falls behind (the recording writer's ring is full)")
            return False
        self._in_ring.append((end, len(data)))
        self._ring_bytes += len(data)
        self.handed += len(data)
        return True

    def stop(self, why: str) -> None:
        """Record nothing more (truncated); what was handed over is still kept and counted."""
        if self.stopped:
            return
        self.stopped = self.truncated = True
        log.warning("recording %s: %s; recording stopped", self.recording_id, why)
        self._end()

    def freed(self, position: int) -> None:
        """The writer read the ring up to ``position``."""
        in_ring = self._in_ring
        while in_ring and in_ring[0][0] <= position:
            self._ring_bytes -= in_ring.popleft()[1]

    def kept(self, first: int, sizes: Sequence[int]) -> None:
        """The writer kept chunks ``first``... (of ``sizes`` bytes each) durably."""
        self._kept += sizes
        self._wake.set()

    def done(self) -> None:
        """The writer kept everything of this recording it will keep."""
        self._finished = True
        self._wake.set()

    def lost(self, why: str) -> None:
        """What the writer has not kept is lost (it refused it, or died)."""
        self._in_ring.clear()
        self._ring_bytes = 0
        self.writer = None
        self.stop(why)
        self.done()

    async def close(self) -> None:
        """No more bytes: wait until those handed over are kept and counted, then end."""
        self._end()
        await self._task

    def _end(self) -> None:
        """No more bytes come: the writer writes and syncs what it has at once."""
        if not self._ending.is_set():
            self._ending.set()
            self._wake.set()
            if self.writer is not None:
                self.writer.close_channel(self.number)

    async def _count(self) -> None:
        failures = 0
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._kept:
                if await self._count_kept():
                    failures = 0
                elif self._finished and failures + 1 >= COUNT_TRIES:
                    log.warning(
                        "recording %s: %d chunk(s) from %d kept but not counted; not played",
                        self.recording_id,
                        len(self._kept),
                        self.counted,
                    )
                    self._kept.clear()
                    self.truncated = True
                else:
                    failures += 1
                    self._wake.set()  # again after the pause
            if self._finished and not self._kept:
                break
            if not self._ending.is_set():
                # While recording goes on, one count covers every chunk kept in an interval.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.count_interval):
                        await self._ending.wait()
            elif failures:
                await asyncio.sleep(self.count_interval)
        try:
            await self.sink.recording_ended(self.recording_id, truncated=self.truncated)
        except Exception as error:
            log.warning(
                "recording %s: end not recorded: %s", self.recording_id, type(error).__name__
            )
        if self.writer is not None:
            self.writer.forget(self)

    async def _count_kept(self) -> bool:
        sizes = self._kept
        self._kept = []
        try:
            await self.sink.count_chunks(self.recording_id, self.counted, sizes)
        except Exception as error:
            log.warning(
                "recording %s: chunks %d-%d not counted yet: %s",
                self.recording_id,
                self.counted,
                self.counted + len(sizes) - 1,
                type(error).__name__,
            )
            self._kept = sizes + self._kept
            return False
        self.counted += len(sizes)
        return True


class _WriterProtocol(asyncio.Protocol):
    """The control socket's gateway end."""

    def __init__(self, writer: _WriterProcess) -> None:
        self.writer = writer
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        try:
            replies = read_replies(self.buffer)
        except ValueError as error:
            log.error("recording writer: %s", error)
            self.writer.transport_lost()
            return
        self.writer.replied(replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self.writer.transport_lost()


class _WriterProcess:
    """One running writer process: its ring, control socket and channels."""

    def __init__(self, process: asyncio.subprocess.Process, ring: mmap.mmap) -> None:
        self.process = process
        self.ring = ring
        self.size = len(ring)
        self.transport: asyncio.Transport | None = None
        self.channels: dict[int, RecordingChannel] = {}
        self.alive = True
        self.ready = False
        #: Ring positions only grow: ``head`` is where the next bytes go, ``tail`` the first
        #: byte the writer has not read; a hand-over never wraps (the ring's end is skipped).
        self.head = 0
        self.tail = 0
        self._outgoing: list[bytes] = []

    def open(self, channel: RecordingChannel, number: int, key: str) -> None:
        channel.writer, channel.number = self, number
        self.channels[number] = channel
        self._send(open_message(number, key))

    def put(self, number: int, data: bytes) -> int | None:
        """Copy ``data`` into the ring and tell the writer: its end, or ``None`` (no room)."""
        if not self.alive:
            return None
        length = len(data)
        position = self.head
        offset = position % self.size
        if offset + length > self.size:
            position += self.size - offset
            offset = 0
        if position + length - self.tail > self.size:
            return None
        self.ring[offset : offset + length] = data
        self.head = position + length
        self._send(data_message(number, position, length))
        return self.head

    def close_channel(self, number: int) -> None:
        """No more chunks on ``number``: the writer syncs what it has and forgets it."""
        if self.alive:
            self._send(close_message(number))

    def _send(self, message: bytes) -> None:
        """Send ``message`` with the others of this turn of the event loop (one system call)."""
        self._outgoing.append(message)
        if len(self._outgoing) == 1:
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        messages, self._outgoing = self._outgoing, []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(messages))

    def replied(self, replies: Sequence[Reply]) -> None:
        for reply in replies:
            if reply.kind == FREED:
                self.tail = reply.position
                for channel in self.channels.values():
                    channel.freed(reply.position)
            elif reply.kind == KEPT:
                kept = self.channels.get(reply.channel)
                if kept is not None:
                    kept.kept(reply.first, reply.sizes)
            elif reply.kind == DONE:
                finished = self.channels.get(reply.channel)
                if finished is not None:
                    finished.done()
            elif reply.kind == FAILED:
                refused = self.channels.pop(reply.channel, None)
                if refused is not None:
                    self.close_channel(reply.channel)  # the writer forgets it
                    refused.lost("the recording store refused a chunk")
            elif reply.kind == READY:
                self.ready = True

    def forget(self, channel: RecordingChannel) -> None:
        """``channel`` ended."""
        if self.channels.get(channel.number) is channel:
            del self.channels[channel.number]

    def transport_lost(self) -> None:
        if not self.alive:
            return
        self.alive = False
        if self.channels:
            log.warning(
                "the recording writer (pid %d) ended with %d recording(s) open; they stop",
                self.process.pid,
                len(self.channels),
            )
        for channel in list(self.channels.values()):
            channel.lost("the recording writer ended")
        self.channels.clear()
        if self.transport is not None:
            self.transport.close()


class RecordingWriter:
    """The recording writer of one gateway process.

    :param environ: the variables the gateway's configuration was read from (the writer builds
        the same recording store from them).
    """

    def __init__(
        self,
        environ: Mapping[str, str],
        *,
        ring_bytes: int = RING_BYTES,
        queue_bytes: int = QUEUE_BYTES,
        count_interval: float = COUNT_INTERVAL,
        restart_pause: float = RESTART_PAUSE,
    ) -> None:
        self.environ = dict(environ)
        self.restart_pause = restart_pause
        self.ring_bytes = ring_bytes
        self.queue_bytes = queue_bytes
        self.count_interval = count_interval
        self._writer: _WriterProcess | None = None
        self._starting = asyncio.Lock()
        self._started_at = -restart_pause
        self._numbers = itertools.count(1)
        self._watches: set[asyncio.Task[None]] = set()

    @property
    def ready(self) -> bool:
        """Whether a writer process runs and has built its recording store."""
        writer = self._writer
        return writer is not None and writer.alive and writer.ready

    @property
    def pid(self) -> int | None:
        """The running writer process's id, if one runs."""
        writer = self._writer
        return writer.process.pid if writer is not None and writer.alive else None

    async def open(self, recording_id: uuid.UUID, sink: RecordingSink) -> RecordingChannel:
        """A channel for ``recording_id`` (stopped, truncated, when no writer can run)."""
        channel = RecordingChannel(
            recording_id, sink, queue_bytes=self.queue_bytes, count_interval=self.count_interval
        )
        writer = await self._running()
        if writer is None:
            channel.lost("no recording writer runs")
        else:
            writer.open(channel, next(self._numbers), str(recording_id))
        return channel

    async def _running(self) -> _WriterProcess | None:
        if self._writer is not None and self._writer.alive:
            return self._writer
        async with self._starting:
            if self._writer is not None and self._writer.alive:
                return self._writer
            if time.monotonic() - self._started_at < self.restart_pause:
                return None
            self._started_at = time.monotonic()
            try:
                self._writer = await self._start()
            except OSError as error:
                log.error("cannot start the recording writer: %s", error)
                self._writer = None
            return self._writer

    async def _start(self) -> _WriterProcess:
        ring_fd = os.memfd_create("deskpool-recording-ring")
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.ftruncate(ring_fd, self.ring_bytes)
            # Every page of the ring is made at once, in a thread (the kernel's work, without
            # the GIL), rather than faulted in by the relay's copies on the ring's first lap.
            ring = await asyncio.to_thread(
                mmap.mmap,
                ring_fd,
                self.ring_bytes,
                flags=mmap.MAP_SHARED | mmap.MAP_POPULATE,
            )
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                WRITER_MAIN,
                str(child.fileno()),
                str(ring_fd),
                pass_fds=(child.fileno(), ring_fd),
                stdin=asyncio.subprocess.DEVNULL,
                env={**os.environ, **WRITER_MALLOC},
            )
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
            os.close(ring_fd)
        writer = _WriterProcess(process, ring)
        transport, _ = await asyncio.get_running_loop().connect_accepted_socket(
            lambda: _WriterProtocol(writer), sock=parent
        )
        writer.transport = transport
        writer.transport.write(config_message(self.environ))
        watch = asyncio.create_task(self._watch(writer), name=f"recording writer {process.pid}")
        self._watches.add(watch)
        watch.add_done_callback(self._watches.discard)
        log.info("recording writer started (pid %d)", process.pid)
        return writer

    async def _watch(self, writer: _WriterProcess) -> None:
        code = await writer.process.wait()
        if writer.alive:
            log.warning("the recording writer (pid %d) exited with %s", writer.process.pid, code)
        writer.transport_lost()

    async def stop(self) -> None:
        """End the writer once it wrote what it was handed (killed after :data:`STOP_TIMEOUT`)."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        if writer.transport is not None:
            writer.transport.close()
        try:
            async with asyncio.timeout(STOP_TIMEOUT):
                await writer.process.wait()
        except TimeoutError:
            log.warning("the recording writer (pid %d) did not stop; killed", writer.process.pid)
            with contextlib.suppress(ProcessLookupError):
                writer.process.kill()
            await writer.process.wait()
        writer.transport_lost()
        writer.ring.close()
