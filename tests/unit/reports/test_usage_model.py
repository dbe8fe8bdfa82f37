"""The usage report's arithmetic: periods, peaks, means, percentiles, CSV."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from deskpool.reports.model import (
    BucketSize,
    LogonFact,
    SessionSpan,
    csv_rows,
    percentile,
    period_of,
    usage,
)

T0 = datetime(2026, 3, 1, tzinfo=UTC)
USER = uuid.uuid4()


def minutes(value: float) -> datetime:
    return T0 + timedelta(minutes=value)


def test_a_period_is_widened_to_whole_buckets_and_refused_when_empty_or_too_long() -> None:
    period, errors = period_of(minutes(10), minutes(70), BucketSize.HOUR)
    assert errors == []
    assert period is not None
    assert period.starts == [T0, T0 + timedelta(hours=1)]
    assert period_of(minutes(10), minutes(10), BucketSize.HOUR)[0] is None
    assert period_of(T0, T0 + timedelta(days=32), BucketSize.HOUR)[1][0].pointer == "/to"
    assert period_of(T0, T0 + timedelta(days=32), BucketSize.DAY)[0] is not None


def test_a_session_ending_when_another_starts_is_not_counted_twice() -> None:
    period, _ = period_of(T0, minutes(60), BucketSize.HOUR)
    assert period is not None
    spans = [
        SessionSpan(USER, minutes(0), minutes(30)),
        SessionSpan(USER, minutes(30), minutes(60)),
    ]
    total, (bucket,) = usage(period, spans, [], now=minutes(600))
    assert bucket.peak_concurrent == 1
    assert bucket.as_json()["mean_concurrent"] == 1.0
    assert bucket.as_json()["distinct_users"] == 1
    assert total.sessions_started == 2


def test_a_session_over_several_buckets_counts_in_each_and_open_ones_stop_at_now() -> None:
    period, _ = period_of(T0, minutes(180), BucketSize.HOUR)
    assert period is not None
    spans = [SessionSpan(USER, minutes(-30), None)]
    total, buckets = usage(period, spans, [], now=minutes(90))
    assert [b.peak_concurrent for b in buckets] == [1, 1, 0]
    assert [b.as_json()["connected_hours"] for b in buckets] == [1.0, 0.5, 0.0]
    assert total.sessions_started == 0
    assert total.as_json()["connected_hours"] == 1.5


def test_logons_give_failures_by_reason_and_nearest_rank_percentiles() -> None:
    period, _ = period_of(T0, minutes(60), BucketSize.HOUR)
    assert period is not None
    logons = [LogonFact(minutes(i), float(i + 1), None) for i in range(20)]
    logons += [LogonFact(minutes(5), None, "daemon_error"), LogonFact(minutes(90), 1.0, None)]
    _, (bucket,) = usage(period, [], logons, now=minutes(60))
    figures = bucket.as_json()
    assert (figures["logons"], figures["failed_by_reason"]) == (21, {"daemon_error": 1})
    assert (figures["logon_seconds_p50"], figures["logon_seconds_p95"]) == (10.0, 19.0)
    assert percentile([], 0.5) is None
    assert percentile([3.0], 0.95) == pytest.approx(3.0)


def test_csv_has_one_column_per_failure_reason() -> None:
    period, _ = period_of(T0, minutes(120), BucketSize.HOUR)
    assert period is not None
    _, buckets = usage(period, [], [LogonFact(minutes(61), None, "token_expired")], now=T0)
    rows = csv_rows([b.as_json() for b in buckets])
    assert rows[0][-1] == "failed_token_expired"
    assert rows[1][0] == "2026-03-01T00:00:00Z"
    assert [row[-1] for row in rows[1:]] == ["0", "1"]
