"""No test secret ever appears in what the suite captured (runs last; see secret_leak_guard).

In a parallel run the final check runs last on its worker; the controller judges every
worker's findings at the session's end (the last test here shows it).
"""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import sys
from pathlib import Path

from tests.secret_leak_guard import CANARY, LeakGuard, encoded_forms
from tests.support.paths import REPO

#: The guard's own tests log secrets on purpose; theirs carry another canary than the run's.
SELF_TEST_CANARY = "DPSELFTESTPROBE"
assert CANARY not in SELF_TEST_CANARY


def test_the_guard_finds_a_secret_in_every_encoding_a_log_line_could_use() -> None:
    guard = LeakGuard(SELF_TEST_CANARY)
    plaintext = guard.plaintext("probe")
    key = guard.master_key()
    raw_key = base64.b64decode(key)
    for prefix in ("", "x", "xy"):
        padded = (prefix + plaintext).encode()
        assert guard.found_in(base64.b64encode(padded).decode()), prefix
        assert guard.found_in(base64.urlsafe_b64encode(padded).decode()), prefix
    assert guard.found_in(f"token={plaintext}")
    assert guard.found_in(repr(plaintext.encode()))
    assert guard.found_in(plaintext.encode().hex())
    assert guard.found_in(f"key {key}")[0].startswith("master key #1 (")
    assert guard.found_in(raw_key.hex())
    assert guard.found_in(repr(b"dpsec\x01" + b"\x00" * 8))
    assert guard.found_in(base64.b64encode(b"xx" + b"dpsec\x01" + b"rest").decode())
    assert guard.found_in("an ordinary line about key id 0a1b2c3d4e5f6a7b") == []
    assert set(encoded_forms(SELF_TEST_CANARY.encode())) >= {"as text", "hex", "base64 at offset 2"}


def test_the_guard_scans_log_records_with_their_fields_and_tracebacks() -> None:
    guard = LeakGuard(SELF_TEST_CANARY)
    secret = guard.plaintext("logged")
    logger = logging.getLogger("tests.secret_leak_guard.probe")
    with guard.watching("probe"):
        logger.debug("nothing here")
        logger.info("structured", extra={"body": {"token": secret}})
        try:
            raise ValueError(secret)
        except ValueError:
            logger.warning("failed", exc_info=True)
    assert [f.where for f in guard.findings] == [
        "probe: log record of tests.secret_leak_guard.probe"
    ]


def test_no_test_secret_appears_in_any_captured_log(leak_guard: LeakGuard) -> None:
    findings = list(leak_guard.findings)
    leak_guard.reported = len(findings)
    assert not findings, "test secrets appeared in captured output:\n" + "\n".join(
        str(finding) for finding in findings
    )


#: A run of its own, in parallel: a test logs a secret at DEBUG (a record no captured section
#: shows, only the worker's guard sees it) in one xdist group, a clean test in another.
_PARALLEL_RUN = {
    "conftest.py": 'pytest_plugins = ["tests.secret_leak_guard"]\n',
    "test_leaky.py": (
        "import logging\n"
        "import pytest\n"
        "pytestmark = pytest.mark.xdist_group('leaky')\n"
        "def test_leaks(leak_guard):\n"
        "    logging.getLogger('leaky').debug('token %s', leak_guard.plaintext('probe'))\n"
    ),
    "test_clean.py": (
        "import pytest\n"
        "pytestmark = pytest.mark.xdist_group('clean')\n"
        "def test_clean():\n"
        "    pass\n"
    ),
}


def test_a_secret_a_worker_saw_fails_the_parallel_run(tmp_path: Path) -> None:
    for name, text in _PARALLEL_RUN.items():
        (tmp_path / name).write_text(text)
    run = subprocess.run(
        [
            sys.executable,
            *("-m", "pytest", "-p", "xdist", "-n", "2", "--dist", "loadgroup"),
            *("-p", "no:logging", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)),
            str(tmp_path),
        ],
        # Only xdist and the guard: the installed plugins would cost seconds per process.
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "2 passed" in run.stdout, run.stdout + run.stderr
    assert run.returncode == 1, run.stdout + run.stderr
    assert "test secrets found in captured logs or output" in run.stdout
    assert "test_leaky.py::test_leaks (call): log record of leaky: a test plaintext" in run.stdout
