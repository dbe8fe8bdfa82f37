"""The ``files`` store seals every chunk; the gateway's recorder cuts chunks off the relay path."""

from __future__ import annotations

import asyncio
import os
import secrets
import stat
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from deskpool.guacamole import InstructionParser
from deskpool.secrets import SecretContext, SecretDecryptionFailed
from deskpool.testing.processes import until
from deskpool_envelope.store import EnvelopeSecretStore
from deskpool_gateway.recording import CHUNK_BYTES, Recorder
from deskpool_recording_files import SECRET_KIND, SEGMENTS, FileRecordingStore


@pytest.fixture
def files(tmp_path: Path) -> FileRecordingStore:
    return FileRecordingStore(tmp_path / "recordings", EnvelopeSecretStore(secrets.token_bytes(32)))


def test_chunks_are_sealed_frames_of_one_file_and_open_only_in_their_place(
    files: FileRecordingStore,
) -> None:
    key, other = str(uuid.uuid4()), str(uuid.uuid4())
    first, second = b"4.sync,13.1700000000000,1.1;" * 50, b"4.sync,13.1700000000001,1.1;" * 40
    files.put_chunks(key, 0, [first, second])
    (path,) = (files.root / key).iterdir()
    assert path.name == SEGMENTS
    on_disk = path.read_bytes()
    assert b"sync" not in on_disk
    assert first[:16] not in on_disk
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((files.root / key).stat().st_mode) == 0o700
    assert [files.get_chunk(key, 0), files.get_chunk(key, 1)] == [first, second]
    # The file moved to another recording does not open.
    (files.root / other).mkdir()
    os.link(path, files.root / other / SEGMENTS)
    with pytest.raises(SecretDecryptionFailed):
        FileRecordingStore(files.root, files.secrets).get_chunk(other, 0)
    # A frame moved to another position does not open (its header renumbered to match).
    frame_one = _frames(on_disk)[1]
    moved = frame_one[:4] + (0).to_bytes(4, "big") + frame_one[8:]
    third = str(uuid.uuid4())
    (files.root / third).mkdir()
    (files.root / third / SEGMENTS).write_bytes(moved)
    with pytest.raises(SecretDecryptionFailed):
        files.get_chunk(third, 0)
    with pytest.raises(KeyError):
        files.get_chunk(key, 7)
    files.delete(key)
    assert not (files.root / key).exists()
    with pytest.raises(KeyError):
        files.get_chunk(key, 0)
    with pytest.raises(KeyError):
        files.get_chunk("../etc", 0)


def test_recordings_of_the_layout_before_segments_still_open(files: FileRecordingStore) -> None:
    key = str(uuid.uuid4())
    folder = files.root / key
    folder.mkdir(parents=True)
    plain = [b"4.sync,1.1,1.1;", b"4.sync,1.2,1.1;"]
    for index, data in enumerate(plain):  # as the files store wrote them: a file per chunk
        sealed = files.secrets.encrypt(data, SecretContext.of(SECRET_KIND, key, f"chunk_{index}"))
        (folder / f"{index:08d}.chunk").write_bytes(sealed)
    assert [files.get_chunk(key, 0), files.get_chunk(key, 1)] == plain
    os.replace(folder / "00000001.chunk", folder / "00000000.chunk")
    with pytest.raises(SecretDecryptionFailed):
        files.get_chunk(key, 0)
    with pytest.raises(KeyError):
        files.get_chunk(key, 1)


def test_a_torn_last_frame_is_never_read_and_is_cut_before_the_next_append(
    files: FileRecordingStore,
) -> None:
    key = str(uuid.uuid4())
    plain = [f"4.sync,1.{i},1.1;".encode() * 100 for i in range(3)]
    files.put_chunks(key, 0, plain)
    path = files.root / key / SEGMENTS
    with path.open("r+b") as file:  # the gateway was killed in the middle of the last write
        file.truncate(path.stat().st_size - 10)
    reopened = FileRecordingStore(files.root, files.secrets)  # another process
    assert [reopened.get_chunk(key, 0), reopened.get_chunk(key, 1)] == plain[:2]
    with pytest.raises(KeyError):
        reopened.get_chunk(key, 2)
    reopened.put_chunks(key, 2, [plain[2], b"4.sync,1.9,1.1;"])
    assert [reopened.get_chunk(key, i) for i in range(4)] == [*plain, b"4.sync,1.9,1.1;"]
    # The last chunks written again (a retry) replace them; a gap, or a write that would drop
    # chunks after it, is refused.
    reopened.put_chunks(key, 2, [b"again", b"and again", b"more"])
    assert [reopened.get_chunk(key, i) for i in range(2, 5)] == [b"again", b"and again", b"more"]
    with pytest.raises(ValueError, match="do not end its 5 chunks"):
        reopened.put_chunks(key, 6, [b"x"])
    with pytest.raises(ValueError, match="do not end its 5 chunks"):
        reopened.put_chunks(key, 1, [b"x"])
    reopened.put_chunk(key, 4, b"last")
    # A reader that remembered the old frames reads the rewritten ones.
    assert [files.get_chunk(key, i) for i in range(5)] == [
        *plain[:2],
        b"again",
        b"and again",
        b"last",
    ]
    with pytest.raises(KeyError):
        files.get_chunk(key, 5)


def test_a_reader_sees_chunks_appended_after_it_read(files: FileRecordingStore) -> None:
    key = str(uuid.uuid4())
    reader = FileRecordingStore(files.root, files.secrets)
    files.put_chunk(key, 0, b"first")
    assert reader.get_chunk(key, 0) == b"first"
    with pytest.raises(KeyError):
        reader.get_chunk(key, 1)
    files.put_chunks(key, 1, [b"second", b"third"])
    assert [reader.get_chunk(key, 2), reader.get_chunk(key, 1)] == [b"third", b"second"]


def _frames(segments: bytes) -> list[bytes]:
    """The frames of a segment file: an 8-byte header (length, index), then the sealed chunk."""
    frames, at = [], 0
    while at < len(segments):
        length = int.from_bytes(segments[at : at + 4], "big")
        frames.append(segments[at : at + 8 + length])
        at += 8 + length
    return frames


class StoreSink:
    """The gateway's side of the broker's recording calls, over a real files store."""

    def __init__(self, files: FileRecordingStore) -> None:
        self.files = files
        self.sizes: list[int] = []
        self.ended: bool | None = None

    async def record_chunks(
        self, recording_id: uuid.UUID, first_index: int, chunks: Sequence[bytes]
    ) -> None:
        await asyncio.to_thread(self.files.put_chunks, str(recording_id), first_index, chunks)
        assert first_index == len(self.sizes)
        self.sizes.extend(len(data) for data in chunks)

    async def recording_ended(self, recording_id: uuid.UUID, *, truncated: bool) -> None:
        self.ended = truncated

    def read(self, recording_id: uuid.UUID) -> bytes:
        return b"".join(self.files.get_chunk(str(recording_id), i) for i in range(len(self.sizes)))


async def test_the_recorder_writes_output_and_keys_as_one_stream(
    files: FileRecordingStore,
) -> None:
    sink = StoreSink(files)
    recording_id = uuid.uuid4()
    recorder = Recorder(recording_id, sink, include_keys=True, chunk_seconds=0.05)
    recorder.start()
    frame = "3.img,1.1,2.14,1.0,9.image/png,1.0,1.0;4.sync,4.1000,1.1;"
    recorder.output(frame)
    recorder.input("5.mouse,1.1,1.2,1.0;3.key,2.65,1.1;")
    # Waiting in memory no longer than the chunk interval: written without more output.
    await _until(lambda: len(sink.sizes) >= 1)
    blob = "4.blob,1.1,8000." + "A" * 8000 + ";"
    recorder.output(blob * 10)  # more than a chunk holds: cut in two
    recorder.output(frame)
    await recorder.close()
    assert sink.ended is False
    stream = sink.read(recording_id).decode()
    assert max(sink.sizes) <= CHUNK_BYTES
    assert len(sink.sizes) >= 3
    instructions = InstructionParser().feed_instructions(stream)
    assert [i.opcode for i in instructions] == ["img", "sync", "key", *["blob"] * 10, "img", "sync"]
    key = instructions[2]
    assert key.args[:2] == ("65", "1")
    assert key.args[2].isdigit()


async def test_without_include_keys_no_input_is_recorded(files: FileRecordingStore) -> None:
    sink = StoreSink(files)
    recorder = Recorder(uuid.uuid4(), sink, include_keys=False, chunk_seconds=1)
    recorder.start()
    recorder.output("4.sync,1.1,1.1;")
    recorder.input("3.key,2.65,1.1;")
    await recorder.close()
    assert sink.read(recorder.recording_id) == b"4.sync,1.1,1.1;"


async def test_a_full_queue_stops_the_recording_not_the_relay(files: FileRecordingStore) -> None:
    sink = StoreSink(files)
    recorder = Recorder(uuid.uuid4(), sink, include_keys=False, chunk_seconds=60, queue_chunks=2)
    recorder.start()
    chunk = ("4.blob,1.1,8000." + "B" * 8000 + ";") * 8
    for _ in range(5):  # no await between: the writer cannot run, the queue fills
        recorder.output(chunk)
    assert recorder.stopped
    assert recorder.truncated
    await recorder.close()
    assert sink.ended is True
    assert 0 < len(sink.sizes) <= 2


async def _until(condition: Callable[[], bool]) -> None:
    async def check() -> bool:
        return condition()

    await until(check, "the recorder wrote a chunk", seconds=10)


class GatedSink(StoreSink):
    """A store sink whose first write waits until the test opens the gate."""

    def __init__(self, files: FileRecordingStore) -> None:
        super().__init__(files)
        self.gate = asyncio.Event()
        self.calls: list[int] = []

    async def record_chunks(
        self, recording_id: uuid.UUID, first_index: int, chunks: Sequence[bytes]
    ) -> None:
        self.calls.append(len(chunks))
        await self.gate.wait()
        await super().record_chunks(recording_id, first_index, chunks)


async def test_chunks_that_waited_for_the_writer_are_written_in_one_call(
    files: FileRecordingStore,
) -> None:
    sink = GatedSink(files)
    recorder = Recorder(uuid.uuid4(), sink, include_keys=False, chunk_seconds=60)
    recorder.start()
    blobs = [f"4.blob,1.1,8000.{str(i) * 8000};" * 8 for i in range(6)]
    recorder.output(blobs[0])
    await _until(lambda: len(sink.calls) == 1)  # the writer waits in its first write
    for blob in blobs[1:]:
        recorder.output(blob)  # two chunks each, queued behind it
    sink.gate.set()
    await recorder.close()
    assert sink.calls == [2, 10]  # the first blob's two chunks, then all the queued ones
    assert sink.ended is False
    assert not recorder.truncated
    assert sink.read(recorder.recording_id).decode() == "".join(blobs)
    assert files.get_chunk(str(recorder.recording_id), 11) == blobs[5].encode()[CHUNK_BYTES:]
