"""The recording writer: a process of the gateway's own that keeps what its tunnels record.

Cutting a recording into chunks, sealing them, appending them and syncing the file cost CPU and
wait on the disk. Done in the gateway's process, even in a thread, that work takes the
interpreter from the relay (a thread that holds the GIL for a seal makes the event loop wait
for it after every system call): a recorded tunnel relayed about half as fast. Here it runs
beside the relay instead. The gateway (:mod:`deskpool_gateway.recording_writer`) starts one
writer and hands it two descriptors:

- the **ring**, shared memory (a ``memfd``) the gateway copies what it sends a browser into:
  the only copy of the recording the relay makes;
- the **control socket**, a Unix stream socket that carries small messages.

The gateway sends first the configuration it runs with (``CONFIG``: the variables it read, as
JSON), from which this process loads the plugins and builds the recording store exactly as the
gateway would; then ``OPEN`` (a channel number for a recording's store key), ``DATA`` (the
next bytes of a channel are at ring position ``position``, ``length`` of them) and ``CLOSE``
(no more data on a channel). The writer reads the socket in batches, a wake-up every
:data:`BATCH_PAUSE` at most. Each batch's data is copied out of the ring at once (``FREED``
tells the gateway the ring is free up to a position again) and added to its recording's
pending bytes; whole chunks of :data:`CHUNK_BYTES` are cut from them, and the rest too once it
waited ``RECORDINGS_CHUNK_SECONDS`` or the recording closed. A recording's chunks of one batch
are written to the store in one call (one append with the ``files`` store). Written chunks are
synced (``fsync``) at most :data:`SYNC_INTERVAL` after the first of them was written, and at
once when the recording closes; then ``KEPT`` gives the chunks' first index and sizes, and only
then does the gateway count them in the recording's row, so a row never counts a chunk that a
crash of the machine could lose. ``DONE`` says a closed recording has nothing more, and
``FAILED`` that the store refused a chunk (that recording stops, truncated).

The writer runs on the CPU time nothing else wants (``SCHED_IDLE``): the relay is interactive
and the recording is not, so after a burst the writer catches up from the ring. It ends when the
control socket does, after the gateway closed it or died; what it was handed before that is
written and synced first (what is synced after the gateway died is on disk but not counted, and
never read).
"""

from __future__ import annotations

import gc
import json
import logging
import mmap
import os
import socket
import struct
import sys
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from deskpool.recordings.stores import RecordingStore

__all__ = [
    "CHUNK_BYTES",
    "CLOSE",
    "CONFIG",
    "DATA",
    "DONE",
    "FAILED",
    "FREED",
    "KEPT",
    "OPEN",
    "READY",
    "Reply",
    "close_message",
    "config_message",
    "data_message",
    "open_message",
    "read_replies",
]

log = logging.getLogger(__name__)

#: Most bytes of one chunk (below the secret store's 64 KiB limit on what one seal holds).
CHUNK_BYTES = 60 * 1024
#: Seconds the writer waits after a batch, so that the next one gathers what came meanwhile.
BATCH_PAUSE = 0.02
#: Longest seconds a written chunk waits for its ``fsync`` (and so to be counted).
SYNC_INTERVAL = 1.0
#: Bytes asked of the control socket per read.
_READ_SIZE = 1 << 20

# ---------------------------------------------------------------------------- the messages
# Gateway to writer. Every message starts with its one-byte kind.
#: ``CONFIG``: the JSON's length, then the JSON (the gateway's configuration variables).
CONFIG = b"S"
#: ``OPEN``: channel, key length, then the recording's store key (ASCII).
OPEN = b"O"
#: ``DATA``: channel, ring position, length.
DATA = b"C"
#: ``CLOSE``: channel (no more data comes on it).
CLOSE = b"X"
# Writer to gateway.
#: ``READY``: the store is built (nothing follows).
READY = b"R"
#: ``KEPT``: channel, first chunk index, count, then each chunk's size.
KEPT = b"K"
#: ``DONE``: channel (closed, and everything it was handed is kept).
DONE = b"E"
#: ``FAILED``: channel (the store refused its chunks; it records nothing more).
FAILED = b"F"
#: ``FREED``: the ring is free up to this position.
FREED = b"D"

_LENGTH = struct.Struct("<I")
_OPEN = struct.Struct("<IH")
_DATA = struct.Struct("<IQI")
_CHANNEL = struct.Struct("<I")
_KEPT = struct.Struct("<III")
_POSITION = struct.Struct("<Q")


def config_message(environ: Mapping[str, str]) -> bytes:
    """``CONFIG``: the variables the writer reads its configuration from."""
    body = json.dumps(dict(environ)).encode()
    return CONFIG + _LENGTH.pack(len(body)) + body


def open_message(channel: int, key: str) -> bytes:
    """``OPEN``: ``channel`` writes the recording stored under ``key``."""
    encoded = key.encode()
    return OPEN + _OPEN.pack(channel, len(encoded)) + encoded


def data_message(channel: int, position: int, length: int) -> bytes:
    """``DATA``: the next ``length`` bytes of ``channel`` are at ring ``position``."""
    return DATA + _DATA.pack(channel, position, length)


def close_message(channel: int) -> bytes:
    """``CLOSE``: ``channel`` sends no more data."""
    return CLOSE + _CHANNEL.pack(channel)


@dataclass(frozen=True)
class Reply:
    """One message from the writer: ``kind`` and its numbers (see the module docstring)."""

    kind: bytes
    channel: int = 0
    first: int = 0
    sizes: tuple[int, ...] = ()
    position: int = 0


def read_replies(buffer: bytearray) -> list[Reply]:
    """The complete replies at the start of ``buffer``, removed from it.

    :raises ValueError: a reply of no known kind (the writer is not what it should be).
    """
    replies: list[Reply] = []
    at = 0
    while at < len(buffer):
        kind = bytes(buffer[at : at + 1])
        if kind == READY:
            replies.append(Reply(READY))
            at += 1
        elif kind == KEPT:
            if at + 1 + _KEPT.size > len(buffer):
                break
            channel, first, count = _KEPT.unpack_from(buffer, at + 1)
            end = at + 1 + _KEPT.size + 4 * count
            if end > len(buffer):
                break
            sizes = struct.unpack_from(f"<{count}I", buffer, at + 1 + _KEPT.size)
            replies.append(Reply(KEPT, channel, first, sizes))
            at = end
        elif kind in (DONE, FAILED):
            if at + 1 + _CHANNEL.size > len(buffer):
                break
            (channel,) = _CHANNEL.unpack_from(buffer, at + 1)
            replies.append(Reply(kind, channel))
            at += 1 + _CHANNEL.size
        elif kind == FREED:
            if at + 1 + _POSITION.size > len(buffer):
                break
            (position,) = _POSITION.unpack_from(buffer, at + 1)
            replies.append(Reply(FREED, position=position))
            at += 1 + _POSITION.size
        else:
            raise ValueError(f"unknown reply {kind!r} from the recording writer")
    del buffer[:at]
    return replies


@dataclass
class Request:
    """One message from the gateway, parsed."""

    kind: bytes
    channel: int = 0
    position: int = 0
    length: int = 0
    text: bytes = b""


def requests(buffer: bytearray) -> Iterator[Request]:
    """The complete messages at the start of ``buffer`` (removed from it once read).

    :raises ValueError: a message of no known kind.
    """
    at = 0
    try:
        while at < len(buffer):
            kind = bytes(buffer[at : at + 1])
            if kind == DATA:
                if at + 1 + _DATA.size > len(buffer):
                    return
                channel, position, length = _DATA.unpack_from(buffer, at + 1)
                at += 1 + _DATA.size
                yield Request(DATA, channel, position, length)
            elif kind == OPEN:
                if at + 1 + _OPEN.size > len(buffer):
                    return
                channel, size = _OPEN.unpack_from(buffer, at + 1)
                start = at + 1 + _OPEN.size
                if start + size > len(buffer):
                    return
                at = start + size
                yield Request(OPEN, channel, text=bytes(buffer[start:at]))
            elif kind == CLOSE:
                if at + 1 + _CHANNEL.size > len(buffer):
                    return
                (channel,) = _CHANNEL.unpack_from(buffer, at + 1)
                at += 1 + _CHANNEL.size
                yield Request(CLOSE, channel)
            elif kind == CONFIG:
                if at + 1 + _LENGTH.size > len(buffer):
                    return
                (size,) = _LENGTH.unpack_from(buffer, at + 1)
                start = at + 1 + _LENGTH.size
                if start + size > len(buffer):
                    return
                at = start + size
                yield Request(CONFIG, text=bytes(buffer[start:at]))
            else:
                raise ValueError(f"unknown message {kind!r} from the gateway")
    finally:
        del buffer[:at]


# ------------------------------------------------------------------------------ the writer
Piece = bytes | memoryview


def _take(pieces: deque[Piece], size: int) -> bytes:
    """The first ``size`` bytes of ``pieces``, taken off them (one copy)."""
    parts: list[Piece] = []
    while size:
        piece = pieces[0]
        if len(piece) <= size:
            parts.append(pieces.popleft())
            size -= len(piece)
        else:
            view = memoryview(piece)
            parts.append(view[:size])
            pieces[0] = view[size:]
            size = 0
    only = parts[0]
    return only if len(parts) == 1 and isinstance(only, bytes) else b"".join(parts)


@dataclass
class _Channel:
    """One recording the gateway opened."""

    key: str
    #: Bytes handed over and not yet cut into a chunk (views of the ring while a batch is
    #: read, copied out before the ring is freed), and since when the oldest waits.
    pending: deque[Piece] = field(default_factory=deque)
    size: int = 0
    since: float | None = None
    #: Chunks cut and written so far; the sizes of those not yet synced.
    written: int = 0
    unsynced: list[int] = field(default_factory=list)
    #: When the written chunks must be synced (``None``: none waits).
    due: float | None = None
    closed: bool = False
    failed: bool = False


@dataclass
class Writer:
    """The writer's state: open channels and the ring it reads from.

    :param chunk_seconds: longest time handed-over bytes wait before they are written.
    """

    store: RecordingStore
    ring: mmap.mmap
    chunk_seconds: float
    channels: dict[int, _Channel] = field(default_factory=dict)
    sync_interval: float = SYNC_INTERVAL

    def __post_init__(self) -> None:
        self._ring = memoryview(self.ring)

    def batch(self, batch: Sequence[Request], now: float) -> bytes:
        """Carry out one batch of messages; the replies to send."""
        freed: int | None = None
        size = len(self._ring)
        for request in batch:
            channel = self.channels.get(request.channel)
            if request.kind == DATA:
                freed = request.position + request.length
                if channel is None or channel.failed:
                    continue
                offset = request.position % size
                channel.pending.append(self._ring[offset : offset + request.length])
                channel.size += request.length
                if channel.since is None:
                    channel.since = now
            elif request.kind == OPEN:
                self.channels[request.channel] = _Channel(request.text.decode())
            elif request.kind == CLOSE and channel is not None:
                channel.closed = True
        replies = self.flush(now)
        for channel in self.channels.values():
            if any(isinstance(piece, memoryview) for piece in channel.pending):
                # The ring is freed below: what is left of a recording is copied out first.
                channel.pending = deque([b"".join(channel.pending)])
        return replies if freed is None else FREED + _POSITION.pack(freed) + replies

    def flush(self, now: float, *, every: bool = False) -> bytes:
        """Write what is due (or ``every`` thing), sync what is due; the replies to send."""
        replies: list[bytes] = []
        for number, channel in list(self.channels.items()):
            if not channel.failed:
                try:
                    self._write(channel, now, every=every)
                    self._sync(number, channel, now, replies, every=every)
                except Exception as error:
                    log.warning(
                        "recording %s: chunks from %d not kept (%s); recording stopped",
                        channel.key,
                        channel.written - len(channel.unsynced),
                        type(error).__name__,
                    )
                    channel.failed = True
                    channel.pending.clear()
                    channel.size = 0
                    replies.append(FAILED + _CHANNEL.pack(number))
            if channel.closed:
                if not channel.failed:
                    replies.append(DONE + _CHANNEL.pack(number))
                del self.channels[number]
        return b"".join(replies)

    def _write(self, channel: _Channel, now: float, *, every: bool) -> None:
        total = channel.size
        waited = channel.since is not None and now - channel.since >= self.chunk_seconds
        end = total if (every or channel.closed or waited) else total - total % CHUNK_BYTES
        if not end:
            return
        chunks = [
            _take(channel.pending, min(CHUNK_BYTES, end - at)) for at in range(0, end, CHUNK_BYTES)
        ]
        channel.size -= end
        channel.since = now if channel.size else None
        self.store.write_chunks(channel.key, channel.written, chunks)
        if not channel.unsynced:
            channel.due = now + self.sync_interval
        channel.written += len(chunks)
        channel.unsynced += [len(chunk) for chunk in chunks]

    def _sync(
        self, number: int, channel: _Channel, now: float, replies: list[bytes], *, every: bool
    ) -> None:
        if not channel.unsynced or not (every or channel.closed or (channel.due or now) <= now):
            return
        self.store.sync(channel.key)
        sizes = channel.unsynced
        first = channel.written - len(sizes)
        replies.append(
            KEPT + _KEPT.pack(number, first, len(sizes)) + struct.pack(f"<{len(sizes)}I", *sizes)
        )
        channel.unsynced = []
        channel.due = None

    def next_due(self) -> float | None:
        """When the next write or sync is due (``None``: nothing waits)."""
        dues = [
            when
            for channel in self.channels.values()
            for when in (
                channel.due,
                None if channel.since is None else channel.since + self.chunk_seconds,
            )
            if when is not None
        ]
        return min(dues) if dues else None


def _writer_for(environ: Mapping[str, str], ring: mmap.mmap) -> Writer:
    """The writer of the recording store the gateway configured, built as the gateway would."""
    from deskpool.host import bootstrap
    from deskpool.runtime import Runtime

    process = bootstrap(environ, ["gateway"])
    store = Runtime(process.config, process.plugins).recording_store
    # What startup made lives as long as the process: the cyclic garbage collector need not
    # walk it again every time the messages' objects trigger a collection.
    gc.freeze()
    return Writer(store, ring, process.config.duration("RECORDINGS_CHUNK_SECONDS"))


def serve(control: socket.socket, ring: mmap.mmap) -> None:
    """Read the gateway's messages and write its recordings until the control socket ends.

    At the end everything handed over is written and synced, whether the gateway closed the
    socket or died.
    """
    buffer = bytearray()
    writer: Writer | None = None
    while True:
        due = writer.next_due() if writer is not None else None
        # Never 0: a timeout of 0 makes the socket non-blocking (BlockingIOError, not a wait).
        control.settimeout(None if due is None else max(due - time.monotonic(), 0.001))
        try:
            data = control.recv(_READ_SIZE)
        except TimeoutError:
            assert writer is not None
            _reply(control, writer.flush(time.monotonic()))
            continue
        except ConnectionError:
            # The gateway died with replies unread (its socket ended with a reset, not an end
            # of stream): what it handed over is in the ring all the same.
            break
        if not data:
            break
        buffer += data
        batch = list(requests(buffer))
        if writer is None:
            if not batch:
                continue
            if batch[0].kind != CONFIG:
                raise ValueError("the gateway did not send its configuration first")
            writer = _writer_for(json.loads(batch.pop(0).text), ring)
            control.sendall(READY)
        _reply(control, writer.batch(batch, time.monotonic()))
        # Let messages gather: one wake-up and one reply per batch, not per message (each
        # costs the gateway's loop a little, and the machine a context switch).
        time.sleep(BATCH_PAUSE)
    if writer is not None:
        _reply(control, writer.flush(time.monotonic(), every=True))


def _reply(control: socket.socket, replies: bytes) -> None:
    if not replies:
        return
    try:
        control.settimeout(None)
        control.sendall(replies)
    except OSError:
        pass  # the gateway is gone: keep writing what it handed over, then stop


def _yield_to_the_relay() -> None:
    """Run only on CPU time nothing else wants (``SCHED_IDLE``).

    The relay is interactive and the recording is not: the writer gets the time the relay
    leaves, and catches up from the ring after a burst (a recording whose writer cannot keep up
    for long stops, truncated; the relay never waits for it).
    """
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except OSError as error:  # refused: the lowest priority of the usual kind instead
        log.debug("SCHED_IDLE refused (%s); niced instead", error)
        os.nice(19)


def main(argv: Sequence[str] | None = None) -> int:
    """``CONTROL_FD RING_FD``: serve the gateway that started this process."""
    _yield_to_the_relay()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if len(arguments) != 2:
        print("usage: recording_process CONTROL_FD RING_FD", file=sys.stderr)
        return 2
    control = socket.socket(fileno=int(arguments[0]))
    ring_fd = int(arguments[1])
    ring = mmap.mmap(
        ring_fd,
        os.fstat(ring_fd).st_size,
        flags=mmap.MAP_SHARED | mmap.MAP_POPULATE,
        prot=mmap.PROT_READ,
    )
    try:
        serve(control, ring)
    except Exception as error:
        # The gateway sees the socket close and stops its recordings (truncated). The error's
        # kind and text only: a traceback never reaches a log.
        log.error("the recording writer stopped: %s: %s", type(error).__name__, error)
        return 1
    finally:
        control.close()
    return 0
