"""No test secret ever appears in what the suite captured (runs last; see secret_leak_guard)."""

from __future__ import annotations

import base64
import logging

from tests.secret_leak_guard import CANARY, LeakGuard, encoded_forms

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
