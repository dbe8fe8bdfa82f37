"""Usage reports, as pure code: a period cut into hour or day buckets, and what each holds.

A report is computed from recorded facts only, never estimated:

- :class:`SessionSpan`: a user's session (read-only views are not usage), from its start to its
  end (``None``: still open, counted up to the report's ``now``);
- :class:`LogonFact`: a logon, when it was asked, how long it took to the first frame, and why
  it stopped if it failed.

Per bucket (and for the whole period): the peak and the mean number of concurrent sessions
(the mean is the time-weighted average over the bucket), the sessions started in it, the
distinct users with a session during it, the connected hours (the sum of the session time
inside it), the failed logons by reason, and the 50th and 95th percentiles (nearest rank) of
the logons that drew their first frame, by the time they were asked. Buckets are UTC hours or
UTC days; the period is widened to whole buckets.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from uuid import UUID

from deskpool.errors import FieldError


class BucketSize(StrEnum):
    """How long a bucket is."""

    HOUR = "hour"
    DAY = "day"

    @property
    def length(self) -> timedelta:
        """The bucket's length."""
        return _LENGTHS[self]


_LENGTHS = {BucketSize.HOUR: timedelta(hours=1), BucketSize.DAY: timedelta(days=1)}


#: The most buckets a report has (31 days of hours, a year of days).
MAX_BUCKETS = {BucketSize.HOUR: 31 * 24, BucketSize.DAY: 366}


@dataclass(frozen=True, slots=True)
class SessionSpan:
    """A session: who, and from when to when (``ended_at`` ``None``: still open)."""

    user_id: UUID
    started_at: datetime
    ended_at: datetime | None


@dataclass(frozen=True, slots=True)
class LogonFact:
    """A logon: when it was asked, seconds to the first frame, why it stopped if it did."""

    asked_at: datetime
    duration: float | None
    failure_reason: str | None


@dataclass(frozen=True, slots=True)
class Period:
    """A report's period, widened to whole buckets: ``start`` <= t < ``end``."""

    start: datetime
    end: datetime
    bucket: BucketSize

    @property
    def starts(self) -> list[datetime]:
        """The start of every bucket, in order."""
        step = self.bucket.length
        count = int((self.end - self.start) / step)
        return [self.start + step * index for index in range(count)]


def floor_to(moment: datetime, bucket: BucketSize) -> datetime:
    """The start of the UTC bucket holding ``moment``."""
    moment = moment.astimezone(UTC)
    if bucket is BucketSize.HOUR:
        return moment.replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def ceil_to(moment: datetime, bucket: BucketSize) -> datetime:
    """The end of the UTC bucket holding ``moment`` (``moment`` itself on a boundary)."""
    floor = floor_to(moment, bucket)
    return floor if floor == moment else floor + bucket.length


def period_of(
    start: datetime, end: datetime, bucket: BucketSize
) -> tuple[Period | None, list[FieldError]]:
    """The period ``start`` to ``end`` widened to whole buckets, or why it is refused."""
    errors: list[FieldError] = []
    if start.tzinfo is None or end.tzinfo is None:
        errors.append(FieldError("/from", "from and to need a time zone (e.g. Z)"))
        return None, errors
    if end <= start:
        errors.append(FieldError("/to", "must be after from"))
        return None, errors
    if end - start > bucket.length * (MAX_BUCKETS[bucket] + 1):
        period = None
    else:
        period = Period(floor_to(start, bucket), ceil_to(end, bucket), bucket)
    if period is None or len(period.starts) > MAX_BUCKETS[bucket]:
        errors.append(
            FieldError(
                "/to",
                f"a report has at most {MAX_BUCKETS[bucket]} {bucket} buckets; "
                "use day buckets or a shorter period",
            )
        )
        return None, errors
    return period, errors


def percentile(values: Sequence[float], share: float) -> float | None:
    """The nearest-rank percentile of sorted ``values`` (``None`` when there are none)."""
    if not values:
        return None
    rank = max(math.ceil(share * len(values)), 1)
    return values[rank - 1]


@dataclass
class BucketFigures:
    """What one bucket (or the whole period) holds."""

    start: datetime
    end: datetime
    peak_concurrent: int = 0
    #: Session-seconds inside the bucket (the mean and the connected hours follow).
    session_seconds: float = 0.0
    sessions_started: int = 0
    users: set[UUID] = field(default_factory=set)
    failures: Counter[str] = field(default_factory=Counter)
    logon_durations: list[float] = field(default_factory=list)
    logons: int = 0

    def as_json(self) -> dict[str, Any]:
        """The figures as the API shows them."""
        length = (self.end - self.start).total_seconds()
        durations = sorted(self.logon_durations)
        p50, p95 = percentile(durations, 0.5), percentile(durations, 0.95)
        return {
            "start": self.start,
            "end": self.end,
            "peak_concurrent": self.peak_concurrent,
            "mean_concurrent": round(self.session_seconds / length, 4) if length else 0.0,
            "sessions_started": self.sessions_started,
            "distinct_users": len(self.users),
            "connected_hours": round(self.session_seconds / 3600, 4),
            "logons": self.logons,
            "failed_connections": sum(self.failures.values()),
            "failed_by_reason": dict(sorted(self.failures.items())),
            "logon_seconds_p50": None if p50 is None else round(p50, 3),
            "logon_seconds_p95": None if p95 is None else round(p95, 3),
        }


#: The smallest step of time: a session ending on a bucket's start is not in that bucket.
_TICK = timedelta(microseconds=1)


def _index(start: datetime, step: timedelta, moment: datetime) -> int:
    """The bucket of ``moment`` in buckets of ``step`` from ``start`` (``moment`` >= ``start``)."""
    return (moment - start) // step


def usage(
    period: Period,
    sessions: Iterable[SessionSpan],
    logons: Iterable[LogonFact],
    now: datetime,
) -> tuple[BucketFigures, list[BucketFigures]]:
    """The figures of the whole period and of each bucket.

    :param sessions: sessions that overlap the period (others are ignored).
    :param logons: logons asked in the period (others are ignored).
    :param now: where open sessions are counted to (nothing is counted after it).
    """
    step = period.bucket.length
    buckets = [BucketFigures(start, start + step) for start in period.starts]
    total = BucketFigures(period.start, period.end)
    horizon = min(period.end, now)
    # Concurrency changes: +1 at a start, -1 at an end (ends first at the same instant).
    changes: list[tuple[datetime, int]] = []
    for span in sessions:
        begin = max(span.started_at, period.start)
        finish = min(span.ended_at or now, horizon)
        if period.start <= span.started_at < period.end:
            buckets[_index(period.start, step, span.started_at)].sessions_started += 1
            total.sessions_started += 1
        if finish <= begin:
            continue
        changes.append((begin, 1))
        changes.append((finish, -1))
        total.users.add(span.user_id)
        total.session_seconds += (finish - begin).total_seconds()
        first = _index(period.start, step, begin)
        last = min(_index(period.start, step, finish - _TICK), len(buckets) - 1)
        for index in range(first, last + 1):
            bucket = buckets[index]
            inside = min(finish, bucket.end) - max(begin, bucket.start)
            bucket.session_seconds += inside.total_seconds()
            bucket.users.add(span.user_id)
    changes.sort()
    _peaks(buckets, total, changes)
    for logon in logons:
        if not period.start <= logon.asked_at < period.end:
            continue
        bucket = buckets[_index(period.start, step, logon.asked_at)]
        for figures in (bucket, total):
            figures.logons += 1
            if logon.duration is not None:
                figures.logon_durations.append(logon.duration)
            elif logon.failure_reason is not None:
                figures.failures[logon.failure_reason] += 1
    return total, buckets


def _peaks(
    buckets: list[BucketFigures], total: BucketFigures, changes: list[tuple[datetime, int]]
) -> None:
    """Set each bucket's peak: the most sessions open at once at any instant inside it.

    All the changes of one instant are applied before the count is read, so a session ending
    when another starts is not counted twice.
    """
    current = 0
    position = 0
    for bucket in buckets:
        while position < len(changes) and changes[position][0] <= bucket.start:
            current += changes[position][1]
            position += 1
        peak = current
        while position < len(changes) and changes[position][0] < bucket.end:
            instant = changes[position][0]
            while position < len(changes) and changes[position][0] == instant:
                current += changes[position][1]
                position += 1
            peak = max(peak, current)
        bucket.peak_concurrent = peak
        total.peak_concurrent = max(total.peak_concurrent, peak)


#: The CSV columns before the failure reasons, in order.
CSV_COLUMNS = (
    "start",
    "end",
    "peak_concurrent",
    "mean_concurrent",
    "sessions_started",
    "distinct_users",
    "connected_hours",
    "logons",
    "failed_connections",
    "logon_seconds_p50",
    "logon_seconds_p95",
)


def csv_rows(buckets: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The report's buckets as CSV rows: a header, then one row per bucket.

    Failures by reason are columns ``failed_<reason>``, one per reason in the report.
    """
    reasons = sorted({reason for bucket in buckets for reason in bucket["failed_by_reason"]})
    header = [*CSV_COLUMNS, *(f"failed_{reason}" for reason in reasons)]
    rows = [header]
    for bucket in buckets:
        row = [_cell(bucket[column]) for column in CSV_COLUMNS]
        row += [str(bucket["failed_by_reason"].get(reason, 0)) for reason in reasons]
        rows.append(row)
    return rows


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return str(value)
