"""The recording writer's messages, and how it cuts, writes and syncs what it is handed.

The writer here is the real :class:`~deskpool_gateway.recording_process.Writer` over a real
``files`` store and a real ring (shared memory), driven with the gateway's messages directly,
without its process.
"""

from __future__ import annotations

import mmap
import secrets
import uuid
from pathlib import Path

import pytest

from deskpool_envelope.store import EnvelopeSecretStore
from deskpool_gateway.recording_process import (
    CHUNK_BYTES,
    CLOSE,
    DATA,
    DONE,
    FAILED,
    FREED,
    KEPT,
    OPEN,
    READY,
    Reply,
    Request,
    Writer,
    close_message,
    config_message,
    data_message,
    open_message,
    read_replies,
    requests,
)
from deskpool_recording_files import FileRecordingStore

RING = 1 << 20


def test_the_gateways_messages_are_read_whole_however_they_arrive() -> None:
    stream = (
        config_message({"RECORDINGS_PATH": "/r", "SECRETS_MASTER_KEY": "k"})
        + open_message(7, "a-key")
        + data_message(7, 2**40, 61440)
        + close_message(7)
    )
    for cut in range(len(stream) + 1):  # the socket may split the stream anywhere
        buffer = bytearray(stream[:cut])
        read = list(requests(buffer))
        buffer += stream[cut:]
        read += list(requests(buffer))
        assert not buffer
        assert [(r.kind, r.channel) for r in read] == [
            (b"S", 0),
            (OPEN, 7),
            (DATA, 7),
            (CLOSE, 7),
        ]
        assert read[0].text == b'{"RECORDINGS_PATH": "/r", "SECRETS_MASTER_KEY": "k"}'
        assert read[1].text == b"a-key"
        assert (read[2].position, read[2].length) == (2**40, 61440)
    with pytest.raises(ValueError, match="unknown message"):
        list(requests(bytearray(b"?")))


def test_the_writers_replies_are_read_whole_however_they_arrive(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    ring = writer.ring
    ring[0:5] = b"hello"
    replies = READY + writer.batch(
        [Request(OPEN, 3, text=str(uuid.uuid4()).encode()), Request(DATA, 3, 0, 5)], 0.0
    )
    replies += writer.batch([Request(CLOSE, 3)], 0.0)
    expected = [
        Reply(READY),
        Reply(FREED, position=5),
        Reply(KEPT, 3, 0, (5,)),
        Reply(DONE, 3),
    ]
    for cut in range(len(replies) + 1):
        buffer = bytearray(replies[:cut])
        read = read_replies(buffer)
        buffer += replies[cut:]
        read += read_replies(buffer)
        assert read == expected
        assert not buffer
    with pytest.raises(ValueError, match="unknown reply"):
        read_replies(bytearray(b"?"))


def test_whole_chunks_are_written_at_once_and_the_rest_once_it_waited(tmp_path: Path) -> None:
    writer = _writer(tmp_path, chunk_seconds=2.0)
    key = str(uuid.uuid4())
    stream = secrets.token_bytes(CHUNK_BYTES * 2 + 1000)
    pieces = [stream[:40000], stream[40000:100000], stream[100000:]]  # across chunk ends
    replies = writer.batch([Request(OPEN, 1, text=key.encode())], 0.0)
    position = 0
    for piece in pieces:
        writer.ring[position : position + len(piece)] = piece
        replies += writer.batch([Request(DATA, 1, position, len(piece))], 0.5)
        position += len(piece)
    # Two whole chunks written, not yet synced: nothing is said kept; the ring is free.
    assert read_replies(bytearray(replies)) == [
        Reply(FREED, position=40000),
        Reply(FREED, position=100000),
        Reply(FREED, position=len(stream)),
    ]
    store = writer.store
    assert isinstance(store, FileRecordingStore)
    assert store.get_chunk(key, 1) == stream[CHUNK_BYTES : 2 * CHUNK_BYTES]
    assert writer.next_due() == 1.5  # the first written chunk's sync
    # A second on, the chunks are synced and said kept; the rest waits for its two seconds.
    assert read_replies(bytearray(writer.flush(1.5))) == [
        Reply(KEPT, 1, 0, (CHUNK_BYTES, CHUNK_BYTES))
    ]
    assert writer.next_due() == 2.5
    assert writer.flush(2.4) == b""
    writer.flush(2.5)
    assert store.get_chunk(key, 2) == stream[2 * CHUNK_BYTES :]
    # Closed: synced at once, and done.
    assert read_replies(bytearray(writer.batch([Request(CLOSE, 1)], 2.6))) == [
        Reply(KEPT, 1, 2, (1000,)),
        Reply(DONE, 1),
    ]
    assert writer.channels == {}
    assert b"".join(store.get_chunk(key, index) for index in range(3)) == stream


def test_what_is_left_of_a_recording_is_copied_out_before_the_ring_is_freed(
    tmp_path: Path,
) -> None:
    writer = _writer(tmp_path)
    key = str(uuid.uuid4())
    writer.batch([Request(OPEN, 1, text=key.encode())], 0.0)
    writer.ring[0:3] = b"abc"
    writer.batch([Request(DATA, 1, 0, 3)], 0.0)
    writer.ring[0:3] = b"xyz"  # the gateway reuses the freed ring
    writer.batch([Request(CLOSE, 1)], 0.1)
    store = writer.store
    assert isinstance(store, FileRecordingStore)
    assert store.get_chunk(key, 0) == b"abc"


def test_a_store_that_refuses_stops_that_recording_only(tmp_path: Path) -> None:
    refused, kept = str(uuid.uuid4()), str(uuid.uuid4())
    writer = _writer(tmp_path)
    (tmp_path / "recordings").mkdir()
    (tmp_path / "recordings" / refused).write_text("not a folder")  # its chunks cannot go here
    writer.ring[0:4] = b"data"
    replies = writer.batch(
        [
            Request(OPEN, 1, text=refused.encode()),
            Request(OPEN, 2, text=kept.encode()),
            Request(DATA, 1, 0, 4),
            Request(DATA, 2, 0, 4),
            Request(CLOSE, 1),
            Request(CLOSE, 2),
        ],
        0.0,
    )
    assert read_replies(bytearray(replies)) == [
        Reply(FREED, position=4),
        Reply(FAILED, 1),
        Reply(KEPT, 2, 0, (4,)),
        Reply(DONE, 2),
    ]


def _writer(tmp_path: Path, chunk_seconds: float = 2.0) -> Writer:
    store = FileRecordingStore(
        tmp_path / "recordings", EnvelopeSecretStore(secrets.token_bytes(32))
    )
    return Writer(store, mmap.mmap(-1, RING), chunk_seconds)
