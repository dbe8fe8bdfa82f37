"""The ``files`` store seals every chunk, in frames of one file a recording."""

from __future__ import annotations

import os
import secrets
import stat
import uuid
from pathlib import Path

import pytest

from deskpool.secrets import SecretContext, SecretDecryptionFailed
from deskpool_envelope.store import EnvelopeSecretStore
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


def test_written_chunks_are_read_before_they_are_synced_and_sync_keeps_them(
    files: FileRecordingStore,
) -> None:
    key = str(uuid.uuid4())
    files.write_chunks(key, 0, [b"4.sync,1.1,1.1;", b"4.sync,1.2,1.1;"])
    assert files.get_chunk(key, 1) == b"4.sync,1.2,1.1;"
    files.sync(key)
    files.sync(str(uuid.uuid4()))  # a recording with nothing written: nothing to sync
    assert FileRecordingStore(files.root, files.secrets).get_chunk(key, 0) == b"4.sync,1.1,1.1;"
