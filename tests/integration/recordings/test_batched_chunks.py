"""The broker counts a batch of kept chunks in one row update; a truncated recording shows so.

Downloads read the segment layout and the file-per-chunk layout before it alike, whole and by
``Range``.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.support.recordings import (
    new_recording,
    until_ready,
)

from deskpool.api.resources.recordings import recording_view
from deskpool.recordings import service, store
from deskpool.recordings.model import ByteRange, store_key
from deskpool.runtime import Runtime
from deskpool.secrets import SecretContext
from deskpool.sessions.broker import PlatformSessionBroker
from deskpool.testing.pytest_plugin import opened_runtime
from deskpool_gateway.recording import Recorder
from deskpool_gateway.recording_writer import RecordingWriter
from deskpool_recording_files import SECRET_KIND, SEGMENTS


async def _download(runtime: Runtime, recording_id: uuid.UUID, wanted: ByteRange | None) -> bytes:
    recording = await service.get_recording(runtime, recording_id)
    return b"".join([part async for part in service.chunks(runtime, recording, wanted)])


async def test_batches_are_counted_once_and_read_back_in_either_layout(
    recordings_environ: dict[str, str], tmp_path: Path
) -> None:
    async with opened_runtime(recordings_environ, ["gateway"]) as runtime:
        broker = PlatformSessionBroker(runtime)
        chunks = [f"4.sync,1.{i},1.1;".encode() * (i + 1) for i in range(5)]
        segmented = await new_recording(runtime, "rec-01")
        key = store_key(segmented.id)
        runtime.recording_store.put_chunks(key, 0, chunks[:1])
        await broker.count_chunks(segmented.id, 0, [len(chunks[0])])
        runtime.recording_store.put_chunks(key, 1, chunks[1:])
        sizes = [len(chunk) for chunk in chunks[1:]]
        await broker.count_chunks(segmented.id, 1, sizes)
        await broker.count_chunks(segmented.id, 1, sizes)  # a retry: not counted again
        await broker.recording_ended(segmented.id, truncated=False)
        row = await store.get_recording(runtime.db, segmented.id)
        assert row is not None
        assert row.chunk_sizes == tuple(len(chunk) for chunk in chunks)
        assert row.size_bytes == sum(len(chunk) for chunk in chunks)
        assert [path.name for path in (tmp_path / str(segmented.id)).iterdir()] == [SEGMENTS]
        whole = b"".join(chunks)
        assert await _download(runtime, segmented.id, None) == whole
        start, end = len(chunks[0]) - 3, len(whole) - 5  # across every chunk
        assert (
            await _download(runtime, segmented.id, ByteRange(start, end, len(whole)))
            == whole[start : end + 1]
        )

        # A recording written by a gateway of the layout before segments: a file per chunk.
        before = await new_recording(runtime, "rec-01")
        folder = tmp_path / store_key(before.id)
        folder.mkdir(mode=0o700)
        for index, chunk in enumerate(chunks[:3]):
            context = SecretContext.of(SECRET_KIND, store_key(before.id), f"chunk_{index}")
            sealed = runtime.secret_store.encrypt(chunk, context)
            (folder / f"{index:08d}.chunk").write_bytes(sealed)
        await store.add_chunks(runtime.db, before.id, 0, [len(chunk) for chunk in chunks[:3]])
        old_whole = b"".join(chunks[:3])
        assert await _download(runtime, before.id, None) == old_whole
        assert (
            await _download(runtime, before.id, ByteRange(5, 30, len(old_whole)))
            == (old_whole[5:31])
        )


async def test_a_recording_the_writer_cannot_keep_up_with_is_kept_and_shown_truncated(
    recordings_environ: dict[str, str],
) -> None:
    async with opened_runtime(recordings_environ, ["gateway"]) as runtime:
        broker = PlatformSessionBroker(runtime)
        row = await new_recording(runtime, "rec-02")
        writer = RecordingWriter(runtime.config.environment(), queue_bytes=100_000)
        try:
            channel = await writer.open(row.id, broker)
            await until_ready(writer)
            recorder = Recorder(channel, include_keys=False)
            blob = ("4.blob,1.1,8000." + "E" * 8000 + ";") * 8
            for _ in range(6):  # no await between: the writer cannot read, its share fills
                recorder.output(blob.encode())
            assert recorder.stopped
            await recorder.close()
        finally:
            await writer.stop()
        kept = await service.get_recording(runtime, row.id)
        assert kept.truncated
        assert kept.ended_at is not None
        assert recording_view(kept)["truncated"] is True  # what the API and the console show
        assert kept.size_bytes == len(blob)  # what was handed over before it stopped
        played = await _download(runtime, row.id, None)
        assert played == blob.encode()  # the stream up to where it stopped
