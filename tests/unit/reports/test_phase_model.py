"""Logon phase percentiles: each phase's time from the phase before it, over a period's logons."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.unit.sessions.test_logons import T0, record

from deskpool.reports.phases import LogonTimes, phase_figures, span_errors
from deskpool.sessions.logons import PHASES, LogonPhase


def logon(steps: dict[str, float], failed: str | None = None) -> LogonTimes:
    """A logon asked at T0 that reached each phase ``steps`` names ``seconds`` after T0."""
    stored = record(
        **{f"{phase}_at": T0 + timedelta(seconds=seconds) for phase, seconds in steps.items()},
        failed_at=None if failed is None else T0 + timedelta(seconds=60),
        failure_reason=failed,
    )
    return LogonTimes(tuple(stored.at(phase) for phase in PHASES), stored.failed_at)


FULL = ("allocated", "guest_ready", "token_issued", "tunnel_opened", "daemon_connected")


def drew(*seconds: float) -> LogonTimes:
    """A logon that reached every phase but ``powered_on``, at the cumulative ``seconds``."""
    return logon(dict(zip((*FULL, "first_frame"), seconds, strict=True)))


def by_phase(report: dict[str, Any]) -> dict[str, tuple[int, float | None, float | None]]:
    return {
        item["phase"]: (item["reached"], item["seconds_p50"], item["seconds_p95"])
        for item in report["phases"]
    }


def test_each_phase_is_timed_from_the_phase_reached_before_it() -> None:
    # powered_on is skipped by these logons: guest_ready counts from allocated.
    report = phase_figures(
        [
            drew(0.1, 0.5, 0.6, 1.6, 2.6, 3.0),
            drew(0.2, 1.2, 1.3, 2.3, 3.3, 4.0),
            drew(0.3, 2.3, 2.4, 3.4, 4.4, 10.0),
        ]
    )
    phases = by_phase(report)
    assert list(phases) == [str(phase) for phase in LogonPhase if phase is not LogonPhase.ASKED]
    assert phases["allocated"] == (3, 0.2, 0.3)
    assert phases["powered_on"] == (0, None, None)
    assert phases["guest_ready"] == (3, 1.0, 2.0)
    assert phases["tunnel_opened"] == (3, 1.0, 1.0)
    assert phases["first_frame"] == (3, 0.7, 5.6)
    assert report["to_first_frame"] == {"reached": 3, "seconds_p50": 4.0, "seconds_p95": 10.0}
    assert (report["logons"], report["connected"], report["failed"]) == (3, 3, 0)


def test_a_failed_or_pending_logon_counts_for_the_phases_it_reached() -> None:
    report = phase_figures(
        [
            drew(1, 2, 3, 4, 5, 6),
            logon(
                {"allocated": 4, "powered_on": 34, "guest_ready": 40}, failed="desktop_not_ready"
            ),
            logon({"allocated": 2}),
        ]
    )
    phases = by_phase(report)
    assert phases["allocated"] == (3, 2.0, 4.0)
    assert phases["powered_on"] == (1, 30.0, 30.0)
    assert phases["guest_ready"] == (2, 1.0, 6.0)
    assert phases["first_frame"] == (1, 1.0, 1.0)
    assert report["to_first_frame"]["reached"] == 1
    assert (report["logons"], report["connected"], report["failed"], report["pending"]) == (
        3,
        1,
        1,
        1,
    )


def test_no_logons_give_counts_of_zero_and_no_percentiles() -> None:
    report = phase_figures([])
    assert report["logons"] == 0
    assert all(item["reached"] == 0 and item["seconds_p50"] is None for item in report["phases"])
    assert report["to_first_frame"] == {"reached": 0, "seconds_p50": None, "seconds_p95": None}


def test_a_period_must_be_forward_aware_and_at_most_a_year() -> None:
    assert span_errors(T0, T0 + timedelta(days=30)) == []
    assert span_errors(T0, T0)[0].pointer == "/to"
    assert span_errors(T0, T0 + timedelta(days=367))[0].pointer == "/to"
    assert span_errors(T0.replace(tzinfo=None), T0 + timedelta(days=1))[0].pointer == "/from"
