"""Shared helpers of the recording tests: a runtime's environment, a recording row, a writer."""

from __future__ import annotations

import base64
import secrets
from pathlib import Path

import pytest


@pytest.fixture
def recordings_environ(deskpool_environ: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The test environment with a master key and ``RECORDINGS_PATH`` in ``tmp_path``."""
    return {
        **deskpool_environ,
        "SECRETS_MASTER_KEY": base64.b64encode(secrets.token_bytes(32)).decode(),
        "RECORDINGS_PATH": str(tmp_path),
    }
