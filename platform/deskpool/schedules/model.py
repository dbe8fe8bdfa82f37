"""Schedules as pure values: phases, exception dates, and the phase in force at an instant.

A :class:`Schedule` has an IANA time zone, weekly :class:`Phase` values (the days of the week
it starts on and its local start time) and :class:`ExceptionDates` (a local date or range of
dates running a named phase or a phase of its own, all day).

**The phase in force** at an instant (:func:`phase_at`) is, unless an exception covers the
instant, the phase whose latest start at or before the instant is the latest of all: a phase
starting on Monday at 07:00 stays in force until the next start of any phase, which may be
days later. Local start times are resolved in the schedule's time zone with
:func:`local_instant`:

- a local time that does not exist (it falls in the gap of a change to summer time, such as
  02:30 in Europe/Berlin on the last Sunday of March) starts the phase at the first instant
  after the gap (03:00 local, 01:00 UTC that day);
- a local time that happens twice (the change back to winter time, 02:30 in Europe/Berlin on
  the last Sunday of October) starts it at the first occurrence (02:30 summer time, 00:30 UTC).

An exception covers its days from the local midnight starting its first day (resolved the
same way) to the local midnight ending its last day. When exceptions overlap, the one listed
first wins.

**Targets** (:func:`targets_of`): a phase asks for ``min_ready`` desktops powered on and ready
for users (a count, or a percentage of the pool's ``max_size`` rounded up) and ``spare`` free
ones on top of those in use; free desktops beyond those are kept running (``keep``) or powered
off (``power_off``). A phase with ``logoff`` also logs off sessions that are disconnected
(or all idle ones) after a warning and a wait.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from deskpool.errors import FieldError
from deskpool.names import is_display_name
from deskpool.values import day_problem, is_canonical_time_zone

#: The longest schedule, phase or exception name.
MAX_NAME_LENGTH = 64
#: The most phases and exceptions a schedule has.
MAX_PHASES = 50
MAX_EXCEPTIONS = 500
#: The longest message shown to users before a forced log-off.
MAX_MESSAGE_LENGTH = 500
#: The longest wait before a forced log-off (a day).
MAX_LOGOFF_WAIT = 86_400
#: The largest count of ready desktops a phase may ask for.
MAX_COUNT = 10_000

#: Day names, Monday first (``date.weekday()`` indexes them).
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class IdlePolicy(StrEnum):
    """What happens to free, idle desktops beyond a phase's targets."""

    #: They keep running.
    KEEP = "keep"
    #: They are powered off (their disks stay; they are powered on again when needed).
    POWER_OFF = "power_off"


class LogoffScope(StrEnum):
    """Which sessions a phase logs off after the warning and the wait."""

    #: Sessions whose remote connection is closed (the user is still logged on).
    DISCONNECTED = "disconnected"
    #: Every idle session: disconnected ones and connected ones without input.
    IDLE = "idle"


@dataclass(frozen=True, slots=True, kw_only=True)
class Logoff:
    """Warn the users of the sessions in ``scope`` with ``message``, log them off after ``wait``."""

    scope: LogoffScope = LogoffScope.DISCONNECTED
    wait_seconds: int = 900
    message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """What a phase asks of a pool.

    :ivar min_ready: desktops kept powered on and ready (count, or percent of ``max_size``).
    :ivar min_ready_percent: whether ``min_ready`` is a percentage of the pool's ``max_size``.
    :ivar spare: free ready desktops kept on top of the ones in use.
    :ivar idle: what happens to free desktops beyond those.
    :ivar logoff: sessions logged off after a warning, if any (a phase lowering capacity).
    """

    min_ready: int = 0
    min_ready_percent: bool = False
    spare: int = 0
    idle: IdlePolicy = IdlePolicy.KEEP
    logoff: Logoff | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Phase:
    """A weekly phase: from ``start`` on each of ``days`` (0 = Monday) until the next phase."""

    name: str
    days: frozenset[int]
    start: time
    settings: Settings = field(default_factory=Settings)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExceptionDates:
    """Local dates ``first`` to ``last`` (inclusive) run the phase ``phase``, or ``settings``."""

    name: str
    first: date
    last: date
    phase: str | None = None
    settings: Settings | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """A named capacity and power schedule in an IANA time zone."""

    id: UUID
    name: str
    time_zone: str
    phases: tuple[Phase, ...]
    exceptions: tuple[ExceptionDates, ...] = ()
    generation: int = 1

    @property
    def zone(self) -> ZoneInfo:
        """The schedule's time zone (valid schedules only)."""
        return ZoneInfo(self.time_zone)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleSettings:
    """What a create or replace sets of a schedule: everything but its id and generation."""

    name: str
    time_zone: str
    phases: tuple[Phase, ...]
    exceptions: tuple[ExceptionDates, ...] = ()

    def schedule(self, schedule_id: UUID) -> Schedule:
        """The schedule these settings make, under ``schedule_id`` (not validated yet)."""
        return Schedule(
            id=schedule_id,
            name=self.name,
            time_zone=self.time_zone,
            phases=self.phases,
            exceptions=self.exceptions,
        )


@dataclass(frozen=True, slots=True)
class InForce:
    """The phase in force at an instant: its name, settings, and since when.

    :ivar exception: the name of the exception that runs it, if one does.
    """

    phase: str
    settings: Settings
    since: datetime
    exception: str | None = None


@dataclass(frozen=True, slots=True)
class Targets:
    """What a pool is reconciled to: desktops powered on and ready, spare, and the idle rule."""

    min_ready: int
    spare: int
    idle: IdlePolicy


# --------------------------------------------------------------------------- time


def local_instant(day: date, at: time, zone: ZoneInfo) -> datetime:
    """The instant (UTC) the local wall time ``at`` on ``day`` happens in ``zone``.

    A time in a gap (nonexistent) gives the first instant after the gap; a time that happens
    twice gives the first occurrence.
    """
    wall = datetime.combine(day, at.replace(tzinfo=None, fold=0))
    first = wall.replace(tzinfo=zone).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        later = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
        return min(first, later)
    # In a gap: fold=0 uses the offset before the change (an instant after the gap), fold=1
    # the offset after it (an instant before). The change lies between; find it to the second.
    low = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    high = first
    if low > high:
        low, high = high, low
    offset = low.astimezone(zone).utcoffset()
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(zone).utcoffset() == offset:
            low = middle
        else:
            high = middle
    return high.replace(microsecond=0) if high.microsecond else high


def _starts(
    schedule: Schedule, zone: ZoneInfo, days: Iterable[date]
) -> list[tuple[datetime, Phase]]:
    return [
        (local_instant(day, phase.start, zone), phase)
        for day in days
        for phase in schedule.phases
        if day.weekday() in phase.days
    ]


def _exception_span(exception: ExceptionDates, zone: ZoneInfo) -> tuple[datetime, datetime]:
    start = local_instant(exception.first, time(0), zone)
    end = local_instant(exception.last + timedelta(days=1), time(0), zone)
    return start, end


def _exception_settings(schedule: Schedule, exception: ExceptionDates) -> tuple[str, Settings]:
    if exception.settings is not None:
        return exception.name, exception.settings
    for phase in schedule.phases:
        if phase.name == exception.phase:
            return phase.name, phase.settings
    raise ValueError(f"exception {exception.name!r} names no phase of the schedule")


def phase_at(schedule: Schedule, instant: datetime) -> InForce | None:
    """The phase in force at ``instant`` (timezone-aware); ``None`` for a schedule without phases.

    Rules: module docstring.
    """
    if instant.tzinfo is None:
        raise ValueError("instant must be timezone-aware")
    zone = schedule.zone
    for exception in schedule.exceptions:
        start, end = _exception_span(exception, zone)
        if start <= instant < end:
            name, settings = _exception_settings(schedule, exception)
            return InForce(name, settings, start, exception.name)
    today = instant.astimezone(zone).date()
    days = [today - timedelta(days=back) for back in range(8, -2, -1)]
    started = [(at, phase) for at, phase in _starts(schedule, zone, days) if at <= instant]
    if not started:
        return None
    at, phase = max(started, key=lambda item: item[0])
    # An exception that ended after this start is what was in force until then.
    for exception in schedule.exceptions:
        _, end = _exception_span(exception, zone)
        if at < end <= instant:
            at = end
    return InForce(phase.name, phase.settings, at)


def changes_between(schedule: Schedule, start: datetime, end: datetime) -> list[InForce]:
    """The phases in force from ``start`` to ``end``: the one at ``start``, then each change.

    Consecutive entries differ in phase or exception; each entry's ``since`` is when it took
    over, in UTC (the first's is clamped to ``start``).
    """
    zone = schedule.zone
    first_day = start.astimezone(zone).date() - timedelta(days=1)
    last_day = end.astimezone(zone).date() + timedelta(days=1)
    days = [first_day + timedelta(days=n) for n in range((last_day - first_day).days + 1)]
    points = {at for at, _ in _starts(schedule, zone, days)}
    for exception in schedule.exceptions:
        points.update(_exception_span(exception, zone))
    out: list[InForce] = []
    for point in [start.astimezone(UTC), *sorted(p for p in points if start < p < end)]:
        current = phase_at(schedule, point)
        if current is None:
            continue
        if out and (out[-1].phase, out[-1].exception) == (current.phase, current.exception):
            continue
        out.append(InForce(current.phase, current.settings, point, current.exception))
    return out


def targets_of(settings: Settings, max_size: int) -> Targets:
    """The targets ``settings`` set for a pool of ``max_size`` (a percentage rounds up)."""
    min_ready = settings.min_ready
    if settings.min_ready_percent:
        min_ready = math.ceil(max_size * settings.min_ready / 100)
    return Targets(min(min_ready, max_size), min(settings.spare, max_size), settings.idle)


# --------------------------------------------------------------------------- validation


def is_time_zone(name: str) -> bool:
    """Whether ``name`` is a canonical IANA time zone (``localtime``, ``EST5EDT`` are not)."""
    return is_canonical_time_zone(name)


def _name_errors(pointer: str, name: str) -> list[FieldError]:
    if not name.strip():
        return [FieldError(pointer, "must not be empty")]
    if len(name) > MAX_NAME_LENGTH:
        return [FieldError(pointer, f"must be at most {MAX_NAME_LENGTH} characters")]
    if not is_display_name(name):
        return [
            FieldError(pointer, "must not start or end with spaces or contain control characters")
        ]
    return []


def _settings_errors(pointer: str, settings: Settings) -> list[FieldError]:
    errors: list[FieldError] = []
    limit = 100 if settings.min_ready_percent else MAX_COUNT
    if not 0 <= settings.min_ready <= limit:
        errors.append(FieldError(f"{pointer}/min_ready", f"must be between 0 and {limit}"))
    if not 0 <= settings.spare <= MAX_COUNT:
        errors.append(FieldError(f"{pointer}/spare", f"must be between 0 and {MAX_COUNT}"))
    if settings.logoff is not None:
        if not 0 <= settings.logoff.wait_seconds <= MAX_LOGOFF_WAIT:
            errors.append(
                FieldError(
                    f"{pointer}/logoff/wait_seconds", f"must be between 0 and {MAX_LOGOFF_WAIT}"
                )
            )
        if len(settings.logoff.message) > MAX_MESSAGE_LENGTH:
            errors.append(
                FieldError(
                    f"{pointer}/logoff/message", f"must be at most {MAX_MESSAGE_LENGTH} characters"
                )
            )
    return errors


def validate_schedule(schedule: Schedule) -> list[FieldError]:
    """Every invalid field of ``schedule`` (JSON pointers into its API form); empty when valid."""
    errors = _name_errors("/name", schedule.name)
    if not is_time_zone(schedule.time_zone):
        errors.append(
            FieldError("/time_zone", "must be a canonical IANA time zone such as Europe/Berlin")
        )
    if not schedule.phases:
        errors.append(FieldError("/phases", "must have at least one phase"))
    if len(schedule.phases) > MAX_PHASES:
        errors.append(FieldError("/phases", f"must have at most {MAX_PHASES} phases"))
    names: set[str] = set()
    starts: dict[tuple[int, time], str] = {}
    for index, phase in enumerate(schedule.phases):
        pointer = f"/phases/{index}"
        errors.extend(_name_errors(f"{pointer}/name", phase.name))
        if phase.name in names:
            errors.append(FieldError(f"{pointer}/name", f"phase {phase.name!r} is named twice"))
        names.add(phase.name)
        if not phase.days or not phase.days <= set(range(7)):
            errors.append(FieldError(f"{pointer}/days", "must list days of the week"))
        for day in sorted(phase.days):
            other = starts.get((day, phase.start))
            if other is not None:
                errors.append(
                    FieldError(
                        f"{pointer}/start",
                        f"phase {other!r} also starts at {phase.start:%H:%M} on {DAYS[day % 7]}",
                    )
                )
            starts[(day, phase.start)] = phase.name
        errors.extend(_settings_errors(pointer, phase.settings))
    if len(schedule.exceptions) > MAX_EXCEPTIONS:
        errors.append(FieldError("/exceptions", f"must have at most {MAX_EXCEPTIONS} exceptions"))
    for index, exception in enumerate(schedule.exceptions):
        pointer = f"/exceptions/{index}"
        errors.extend(_name_errors(f"{pointer}/name", exception.name))
        for end in ("first", "last"):
            problem = day_problem(getattr(exception, end))
            if problem is not None:
                errors.append(FieldError(f"{pointer}/{end}", problem))
        if exception.last < exception.first:
            errors.append(FieldError(f"{pointer}/last", "must not be before first"))
        if (exception.phase is None) == (exception.settings is None):
            errors.append(
                FieldError(pointer, "must name a phase of the schedule or give settings of its own")
            )
        elif exception.phase is not None and exception.phase not in names:
            errors.append(
                FieldError(f"{pointer}/phase", f"the schedule has no phase {exception.phase!r}")
            )
        elif exception.settings is not None:
            errors.extend(_settings_errors(f"{pointer}/settings", exception.settings))
    return errors


def sorted_phases(phases: Sequence[Phase]) -> tuple[Phase, ...]:
    """The phases in the order of their first start in the week (for display)."""
    return tuple(sorted(phases, key=lambda phase: (min(phase.days, default=7), phase.start)))


# --------------------------------------------------------------------------- documents
# The JSON form of phases and exceptions: the API's and the database's (schedules.phases,
# schedules.exceptions). Members follow the dataclasses; days are names (``mon``...), times
# ``HH:MM`` and dates ISO dates; ``min_ready_unit`` is ``count`` or ``percent``.


def settings_doc(settings: Settings) -> dict[str, Any]:
    """The JSON form of a phase's settings."""
    logoff = settings.logoff
    return {
        "min_ready": settings.min_ready,
        "min_ready_unit": "percent" if settings.min_ready_percent else "count",
        "spare": settings.spare,
        "idle": str(settings.idle),
        "logoff": None
        if logoff is None
        else {
            "scope": str(logoff.scope),
            "wait_seconds": logoff.wait_seconds,
            "message": logoff.message,
        },
    }


def settings_of(doc: Mapping[str, Any]) -> Settings:
    """Settings from their JSON form (members left out take the defaults)."""
    logoff = doc.get("logoff")
    return Settings(
        min_ready=int(doc.get("min_ready", 0)),
        min_ready_percent=doc.get("min_ready_unit", "count") == "percent",
        spare=int(doc.get("spare", 0)),
        idle=IdlePolicy(doc.get("idle", IdlePolicy.KEEP)),
        logoff=None
        if logoff is None
        else Logoff(
            scope=LogoffScope(logoff.get("scope", LogoffScope.DISCONNECTED)),
            wait_seconds=int(logoff.get("wait_seconds", 900)),
            message=str(logoff.get("message", "")),
        ),
    )


def phase_doc(phase: Phase) -> dict[str, Any]:
    """The JSON form of a phase."""
    return {
        "name": phase.name,
        "days": [DAYS[day] for day in sorted(phase.days)],
        "start": phase.start.strftime("%H:%M"),
        **settings_doc(phase.settings),
    }


def phase_of(doc: Mapping[str, Any]) -> Phase:
    """A phase from its JSON form.

    :raises ValueError: an unknown day or a start that is not ``HH:MM``.
    """
    return Phase(
        name=str(doc["name"]),
        days=frozenset(DAYS.index(day) for day in doc["days"]),
        start=time.fromisoformat(str(doc["start"])),
        settings=settings_of(doc),
    )


def exception_doc(exception: ExceptionDates) -> dict[str, Any]:
    """The JSON form of exception dates."""
    return {
        "name": exception.name,
        "first": exception.first.isoformat(),
        "last": exception.last.isoformat(),
        "phase": exception.phase,
        "settings": None if exception.settings is None else settings_doc(exception.settings),
    }


def exception_of(doc: Mapping[str, Any]) -> ExceptionDates:
    """Exception dates from their JSON form (``last`` defaults to ``first``)."""
    first = date.fromisoformat(str(doc["first"]))
    last = doc.get("last")
    settings = doc.get("settings")
    return ExceptionDates(
        name=str(doc["name"]),
        first=first,
        last=first if last is None else date.fromisoformat(str(last)),
        phase=doc.get("phase"),
        settings=None if settings is None else settings_of(settings),
    )
