"""Shared helpers of the recording tests: a runtime's environment and a recording row."""

from __future__ import annotations

import base64
import secrets
import uuid
from pathlib import Path

import pytest

from deskpool.recordings import store
from deskpool.recordings.model import Recording
from deskpool.runtime import Runtime


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
