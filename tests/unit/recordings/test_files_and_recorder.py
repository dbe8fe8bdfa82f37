"""The ``files`` store seals every chunk; the gateway's recorder cuts chunks off the relay path."""

from __future__ import annotations

import asyncio
import os
import secrets
import stat
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from deskpool.guacamole import InstructionParser
from deskpool.secrets import SecretDecryptionFailed
from deskpool.testing.processes import until
from deskpool_envelope.store import EnvelopeSecretStore
from deskpool_gateway.recording import CHUNK_BYTES, Recorder
from deskpool_recording_files import FileRecordingStore


@pytest.fixture
def files(tmp_path: Path) -> FileRecordingStore:
    return FileRecordingStore(tmp_path / "recordings", EnvelopeSecretStore(secrets.token_bytes(32)))


def test_a_chunk_is_sealed_on_disk_and_opens_only_in_its_place(files: FileRecordingStore) -> None:
    key, other = str(uuid.uuid4()), str(uuid.uuid4())
    plain = b"4.sync,13.1700000000000,1.1;" * 50
    files.put_chunk(key, 0, plain)
    (path,) = (files.root / key).iterdir()
    on_disk = path.read_bytes()
    assert b"sync" not in on_disk
    assert plain[:16] not in on_disk
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((files.root / key).stat().st_mode) == 0o700
    assert files.get_chunk(key, 0) == plain
    # A chunk moved to another recording or position does not open.
    (files.root / other).mkdir()
    os.link(path, files.root / other / path.name)
    with pytest.raises(SecretDecryptionFailed):
        files.get_chunk(other, 0)
    os.link(path, files.root / key / "00000001.chunk")
    with pytest.raises(SecretDecryptionFailed):
        files.get_chunk(key, 1)
    with pytest.raises(KeyError):
        files.get_chunk(key, 7)
    files.delete(key)
    assert not (files.root / key).exists()
    with pytest.raises(KeyError):
        files.get_chunk("../etc", 0)


class StoreSink:
    """The gateway's side of the broker's recording calls, over a real files store."""

    def __init__(self, files: FileRecordingStore) -> None:
        self.files = files
        self.sizes: list[int] = []
        self.ended: bool | None = None

    async def record_chunk(self, recording_id: uuid.UUID, index: int, data: bytes) -> None:
        await asyncio.to_thread(self.files.put_chunk, str(recording_id), index, data)
        assert index == len(self.sizes)
        self.sizes.append(len(data))

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
