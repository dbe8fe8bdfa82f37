"""The logon record: phases in order with the seconds each took, outcome and duration."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from deskpool.sessions.logons import PHASES, LogonPhase, LogonRecord

T0 = datetime(2026, 11, 25, 9, 0, tzinfo=UTC)


def record(**times: Any) -> LogonRecord:
    values: dict[str, Any] = {phase.column: None for phase in PHASES}
    values |= {"asked_at": T0, "failed_at": None, "failure_reason": None, **times}
    return LogonRecord(
        id=uuid.uuid4(),
        user_id=uuid.uuid4(),
        pool_id=uuid.uuid4(),
        desktop_id=None,
        session_id=None,
        **values,
    )


def test_phases_are_listed_in_order_with_the_seconds_since_the_one_before() -> None:
    logon = record(
        allocated_at=T0 + timedelta(seconds=1),
        guest_ready_at=T0 + timedelta(seconds=3),
        token_issued_at=T0 + timedelta(seconds=3.5),
        tunnel_opened_at=T0 + timedelta(seconds=4),
        daemon_connected_at=T0 + timedelta(seconds=6),
        first_frame_at=T0 + timedelta(seconds=7),
    )
    phases = logon.phases()
    assert [p["phase"] for p in phases] == [
        str(p) for p in PHASES if p is not LogonPhase.POWERED_ON
    ]
    assert [p["seconds"] for p in phases] == [0.0, 1.0, 2.0, 0.5, 0.5, 2.0, 1.0]
    assert logon.outcome == "connected"
    assert logon.duration == 7.0


def test_a_failed_logon_keeps_the_phases_it_reached() -> None:
    logon = record(
        allocated_at=T0 + timedelta(seconds=1),
        failed_at=T0 + timedelta(seconds=20),
        failure_reason="desktop_unreachable",
    )
    view = logon.as_json()
    assert [p["phase"] for p in view["phases"]] == ["asked", "allocated"]
    assert (view["outcome"], view["failure_reason"], view["duration_seconds"]) == (
        "failed",
        "desktop_unreachable",
        None,
    )
    assert record().outcome == "pending"


def test_each_phase_names_its_column_and_the_phases_before_it() -> None:
    assert LogonPhase.POWERED_ON.column == "powered_on_at"
    assert LogonPhase.GUEST_READY.earlier == (
        LogonPhase.ASKED,
        LogonPhase.ALLOCATED,
        LogonPhase.POWERED_ON,
    )
    assert LogonPhase.ASKED.earlier == ()
