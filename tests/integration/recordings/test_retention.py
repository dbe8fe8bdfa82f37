"""Retention deletes recordings older than ``RECORDINGS_RETENTION_DAYS``, chunks first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.support.recordings import (
    new_recording,
)

from deskpool.recordings import service, store
from deskpool.recordings.model import store_key
from deskpool.testing.pytest_plugin import opened_runtime


async def test_old_recordings_are_deleted_and_recent_ones_kept(
    recordings_environ: dict[str, str], tmp_path: Path
) -> None:
    environ = {**recordings_environ, "RECORDINGS_RETENTION_DAYS": "30"}
    async with opened_runtime(environ, ["worker"]) as runtime:
        made = []
        for age in (40, 31, 2):
            recording = await new_recording(runtime, "ret-01")
            await runtime.db.execute(
                "UPDATE session_recordings SET started_at = now() - make_interval(days => $2) "
                "WHERE id = $1",
                recording.id,
                age,
            )
            runtime.recording_store.put_chunk(store_key(recording.id), 0, b"4.sync,1.1,1.1;")
            await store.add_chunks(runtime.db, recording.id, 0, [15])
            made.append(recording.id)
        deleted = await service.delete_expired(runtime)
        assert deleted >= 2
        for old in made[:2]:
            assert await store.get_recording(runtime.db, old) is None
            assert not (tmp_path / str(old)).exists()
        kept = await store.get_recording(runtime.db, made[2])
        assert kept is not None
        assert kept.chunk_sizes == (15,)
        assert runtime.recording_store.get_chunk(store_key(made[2]), 0) == b"4.sync,1.1,1.1;"
        assert await service.delete_expired(runtime, datetime.now(UTC) - timedelta(days=1)) == 0
