"""Logon phase percentiles over a period, as pure code: how long each step of a logon takes.

A phase's time is what a session's logon shows for it
(:func:`~deskpool.sessions.logons.phase_steps`) and what the
``deskpool_logon_phase_seconds`` histogram observes: the seconds from the phase reached before
it to this one. A logon is given as :class:`LogonTimes` (when each phase was reached, when it
failed), so a period's thousands of logons are read as plain rows. Over the logons asked in a
period, each phase after ``asked`` gets the number of logons that reached it and the 50th and
95th percentiles (nearest rank) of its time; a failed or pending logon counts for the phases it
reached. ``to_first_frame`` is the same for the whole logon, request to first frame, of the
logons that drew.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from deskpool.errors import FieldError
from deskpool.reports.model import percentile
from deskpool.sessions.logons import PHASES, LogonPhase, outcome_of, phase_steps

#: The longest period a phase report covers.
MAX_SPAN = timedelta(days=366)

#: The phases that take time (``asked`` starts the logon).
TIMED_PHASES: tuple[LogonPhase, ...] = tuple(phase for phase in PHASES if phase.earlier)


@dataclass(frozen=True, slots=True)
class LogonTimes:
    """A logon: when each phase was reached, and when it failed.

    ``times`` follows :data:`~deskpool.sessions.logons.PHASES` (``None``: not reached;
    ``asked`` always is).
    """

    times: tuple[datetime | None, ...]
    failed_at: datetime | None


def span_errors(start: datetime, end: datetime) -> list[FieldError]:
    """Why ``start`` to ``end`` is not a period a phase report covers (empty: it is)."""
    if start.tzinfo is None or end.tzinfo is None:
        return [FieldError("/from", "from and to need a time zone (e.g. Z)")]
    if end <= start:
        return [FieldError("/to", "must be after from")]
    if end - start > MAX_SPAN:
        return [FieldError("/to", f"a period is at most {MAX_SPAN.days} days")]
    return []


def _spread(values: Sequence[float]) -> dict[str, Any]:
    ordered = sorted(values)
    p50, p95 = percentile(ordered, 0.5), percentile(ordered, 0.95)
    return {
        "reached": len(ordered),
        "seconds_p50": None if p50 is None else round(p50, 3),
        "seconds_p95": None if p95 is None else round(p95, 3),
    }


def phase_figures(logons: Iterable[LogonTimes]) -> dict[str, Any]:
    """The logons' outcomes, each phase's percentiles, and request to first frame's."""
    steps: dict[LogonPhase, list[float]] = {phase: [] for phase in TIMED_PHASES}
    durations: list[float] = []
    outcomes: Counter[str] = Counter()
    for logon in logons:
        times = logon.times
        first_frame = times[-1]
        outcomes[outcome_of(first_frame, logon.failed_at)] += 1
        for phase, _, seconds in phase_steps(times):
            if phase is not LogonPhase.ASKED:
                steps[phase].append(seconds)
        if first_frame is not None and times[0] is not None:
            durations.append((first_frame - times[0]).total_seconds())
    return {
        "logons": sum(outcomes.values()),
        "connected": outcomes["connected"],
        "failed": outcomes["failed"],
        "pending": outcomes["pending"],
        "phases": [{"phase": str(phase), **_spread(values)} for phase, values in steps.items()],
        "to_first_frame": _spread(durations),
    }
