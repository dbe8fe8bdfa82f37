"""Which audit partitions to create and drop: the pure planning of audit maintenance."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from deskpool.audit import (
    add_months,
    month_of,
    month_of_partition,
    partition_name,
    plan_partitions,
)


def month(year: int, number: int) -> datetime:
    return datetime(year, number, 1, tzinfo=UTC)


NOW = datetime(2026, 11, 22, 10, 30, tzinfo=UTC)


def test_months_are_utc_calendar_months() -> None:
    assert month_of(NOW) == month(2026, 11)
    assert add_months(month(2026, 11), 2) == month(2027, 1)
    assert add_months(month(2026, 1), -1) == month(2025, 12)
    assert add_months(month(2026, 3), -14) == month(2025, 1)
    assert partition_name(month(2027, 1)) == "audit_events_p202701"
    assert month_of_partition("audit_events_p202701") == month(2027, 1)
    assert month_of_partition("audit_events_p202713") is None
    assert month_of_partition("audit_events_default") is None


def test_the_current_month_and_the_next_three_always_have_a_partition() -> None:
    plan = plan_partitions([month(2026, 11)], NOW, retention_months=0)
    assert plan.create == (month(2026, 12), month(2027, 1), month(2027, 2))
    assert plan.drop == ()
    assert plan_partitions((*plan.create, month(2026, 11)), NOW, 0).create == ()


def test_zero_retention_keeps_everything() -> None:
    old = [add_months(month(2026, 11), -n) for n in range(1, 60)]
    assert plan_partitions(old, NOW, retention_months=0).drop == ()


def test_a_month_is_dropped_once_all_it_holds_is_older_than_the_retention() -> None:
    existing = [add_months(month(2026, 11), -n) for n in range(0, 6)]
    plan = plan_partitions(existing, NOW, retention_months=1)
    # On 22 November with one month kept: October still holds events newer than 22 October.
    assert plan.drop == (month(2026, 6), month(2026, 7), month(2026, 8), month(2026, 9))
    assert month(2026, 10) not in plan.drop
    assert month(2026, 11) not in plan.drop


@pytest.mark.parametrize("retention", [1, 2, 12])
def test_the_current_and_future_months_are_never_dropped(retention: int) -> None:
    existing = [add_months(month(2026, 11), n) for n in range(-24, 4)]
    plan = plan_partitions(existing, NOW, retention_months=retention)
    assert all(dropped < add_months(month(2026, 11), -retention) for dropped in plan.drop)
    assert len(plan.drop) == 24 - retention


def test_a_negative_retention_is_refused() -> None:
    with pytest.raises(ValueError):
        plan_partitions([], NOW, retention_months=-1)
