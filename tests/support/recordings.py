"""The recording tests' helpers: a recording row, a writer made ready."""

from __future__ import annotations

import uuid

from deskpool.recordings import store
from deskpool.recordings.model import Recording
from deskpool.runtime import Runtime
from deskpool.testing.processes import until
from deskpool_gateway.recording_writer import RecordingWriter


async def new_recording(runtime: Runtime, desktop_name: str) -> Recording:
    """A recording row of an unknown session (no chunk yet)."""
    return await store.insert_recording(
        runtime.db,
        session_id=uuid.uuid4(),
        pool_id=uuid.uuid4(),
        user_id=uuid.uuid4(),
        desktop_name=desktop_name,
        include_keys=False,
        store="files",
    )


async def until_ready(writer: RecordingWriter) -> None:
    """Wait until ``writer``'s process built its recording store."""

    async def ready() -> bool:
        return writer.ready

    await until(ready, "the recording writer is ready", seconds=30)
