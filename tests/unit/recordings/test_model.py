"""The pure rules of recordings: policy documents, key events, byte ranges, retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from deskpool.guacamole import InstructionParser
from deskpool.recordings.model import (
    ByteRange,
    RecordingPolicy,
    UnsatisfiableRange,
    chunks_for_range,
    key_instruction,
    parse_range,
    retention_cutoff,
)
from deskpool.sessions.model import DEFAULT_POLICY, PolicyChange


def test_a_policy_records_nothing_by_default_and_merges_recording_members() -> None:
    assert DEFAULT_POLICY.recording == RecordingPolicy()
    assert DEFAULT_POLICY.as_json()["recording"] == {"enabled": False, "include_keys": False}
    on = PolicyChange(recording_enabled=True).applied_to(DEFAULT_POLICY)
    assert on.recording == RecordingPolicy(enabled=True, include_keys=False)
    keys = PolicyChange(recording_include_keys=True).applied_to(on)
    assert keys.recording == RecordingPolicy(enabled=True, include_keys=True)
    assert PolicyChange(idle_timeout=60).applied_to(keys).recording == keys.recording


def test_a_key_event_is_written_as_guacd_records_it() -> None:
    text = key_instruction("65", "1", 1700000000123)
    assert text == "3.key,2.65,1.1,13.1700000000123;"
    (parsed,) = InstructionParser().feed_instructions(text)
    assert parsed.opcode == "key"
    assert parsed.args == ("65", "1", "1700000000123")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("bytes=0-9", ByteRange(0, 9, 100)),
        ("bytes=90-", ByteRange(90, 99, 100)),
        ("bytes=95-200", ByteRange(95, 99, 100)),
        ("bytes=-10", ByteRange(90, 99, 100)),
        ("bytes=-500", ByteRange(0, 99, 100)),
        ("bytes=0-1,5-6", None),
        ("items=0-1", None),
        ("bytes=9-3", None),
        ("bytes=a-b", None),
    ],
)
def test_ranges(header: str | None, expected: ByteRange | None) -> None:
    assert parse_range(header, 100) == expected


@pytest.mark.parametrize("header", ["bytes=100-", "bytes=150-160", "bytes=-0"])
def test_unsatisfiable_ranges(header: str) -> None:
    with pytest.raises(UnsatisfiableRange):
        parse_range(header, 100)


def test_nothing_of_an_empty_recording_is_satisfiable() -> None:
    with pytest.raises(UnsatisfiableRange):
        parse_range("bytes=0-", 0)


def test_a_range_maps_to_the_chunks_that_hold_it() -> None:
    sizes = [10, 10, 0, 10]
    assert chunks_for_range(sizes, 0, 29) == [(0, 0, 10), (1, 0, 10), (3, 0, 10)]
    assert chunks_for_range(sizes, 5, 12) == [(0, 5, 10), (1, 0, 3)]
    assert chunks_for_range(sizes, 25, 29) == [(3, 5, 10)]
    stream = bytes(range(30))
    chunks = [stream[0:10], stream[10:20], b"", stream[20:30]]
    for start in range(30):
        for end in range(start, 30):
            pieces = chunks_for_range(sizes, start, end)
            assert b"".join(chunks[i][a:b] for i, a, b in pieces) == stream[start : end + 1]


def test_retention() -> None:
    now = datetime(2026, 11, 25, tzinfo=UTC)
    assert retention_cutoff(now, 0) is None
    assert retention_cutoff(now, 30) == now - timedelta(days=30)
