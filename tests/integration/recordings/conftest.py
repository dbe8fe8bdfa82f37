"""Shared helpers of the recording tests: a runtime's environment, a recording row, a writer."""

from __future__ import annotations

import base64
import secrets
import uuid
from pathlib import Path

import pytest

from deskpool.recordings import store
from deskpool.recordings.model import Recording
from deskpool.runtime import Runtime
from deskpool.testing.processes import until
from deskpool_gateway.recording_writer import RecordingWriter


@pytest.fixture
def recordings_environ(deskpool_environ: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The test environment with a master key and ``RECORDINGS_PATH`` in ``tmp_path``."""
    return {
        **deskpool_environ,
        "SECRETS_MASTER_KEY": base64.b64encode(secrets.token_bytes(32)).decode(),
        "RECORDINGS_PATH": str(tmp_path),
    }


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
