"""An audit event as an RFC 5424 message, framed by octet counting (RFC 6587)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from deskpool.events import AuditEvent
from deskpool.syslog_export.model import FACILITIES, Origin, format_event, frame

AT = datetime(2026, 11, 29, 8, 12, 3, 412345, tzinfo=timezone(timedelta(hours=1)))


def event(**fields: Any) -> AuditEvent:
    start = AuditEvent(
        action="session.start",
        actor="user-1",
        resource_type="sessions",
        resource_id="s-1",
        outcome="success",
        occurred_at=AT,
        details={"pool": "Büro"},
    )
    return replace(start, **fields)


def test_a_message_has_the_header_structured_data_and_the_event_as_json() -> None:
    message = format_event(Origin("vdi-worker-1"), 42, event()).decode()
    header, rest = message.split(" [", 1)
    assert header == "<86>1 2026-11-29T07:12:03.412345Z vdi-worker-1 deskpool - session.start"
    data, body = rest.split("] ", 1)
    assert data == (
        'deskpool@32473 id="42" action="session.start" actor="user-1" outcome="success" '
        'resource_type="sessions" resource_id="s-1"'
    )
    parsed = json.loads(body)
    assert parsed["id"] == 42
    assert parsed["details"] == {"pool": "Büro"}
    assert parsed["occurred_at"] == "2026-11-29T07:12:03.412345+00:00"


def test_severity_follows_the_outcome_and_the_facility_is_configured() -> None:
    origin = Origin("h", facility=FACILITIES["local3"])
    denied = format_event(origin, 1, event(outcome="denied")).decode()
    failed = format_event(origin, 1, event(outcome="failure")).decode()
    assert denied.startswith(f"<{19 * 8 + 4}>1 ")
    assert failed.startswith(f"<{19 * 8 + 3}>1 ")


def test_param_values_are_escaped_and_header_fields_are_printable() -> None:
    message = format_event(
        Origin("bad host\n"), 1, event(actor='a"b\\c]d', action="x y\tz" + "q" * 40)
    ).decode()
    assert message.split(" ")[2] == "badhost"
    assert message.split(" ")[5] == ("xyz" + "q" * 40)[:32]
    assert 'actor="a\\"b\\\\c\\]d"' in message


def test_absent_fields_are_left_out_and_times_are_utc() -> None:
    message = format_event(Origin(""), 3, event(resource_id=None)).decode()
    assert "resource_id=" not in message.split("] ", 1)[0]
    assert message.split(" ")[2] == "-"
    assert " 2026-11-29T07:12:03.412345Z " in message
    assert datetime.fromisoformat("2026-11-29T07:12:03.412345+00:00").tzinfo == UTC


def test_octet_counting_frames_count_bytes_not_characters() -> None:
    message = format_event(Origin("h"), 1, event()).decode().encode()
    framed = frame(message)
    length, _, rest = framed.partition(b" ")
    assert int(length) == len(message) == len(rest)
    assert len(message) > len(message.decode())  # ü is two bytes
