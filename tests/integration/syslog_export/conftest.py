"""Fixtures of the syslog export tests: a runtime on the module's database, a real rsyslog."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.rsyslog import Rsyslog


@pytest.fixture
def rsyslog(tmp_path: Path) -> Iterator[Rsyslog]:
    """rsyslogd on a free port, writing every message raw to a file in ``tmp_path``."""
    with Rsyslog(tmp_path) as server:
        yield server
