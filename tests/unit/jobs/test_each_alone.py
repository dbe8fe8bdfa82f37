"""A periodic task's objects handled each alone: one that raises stops none of the others."""

from __future__ import annotations

import logging
from datetime import date, timedelta

import pytest

from deskpool.jobs.model import LeaseLost
from deskpool.jobs.periodic import each_alone


async def test_one_object_that_raises_is_one_warning_line_and_the_others_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def next_day(day: date) -> date:
        return day + timedelta(days=1)  # 9999-12-31 overflows

    with caplog.at_level(logging.WARNING):
        outcome = await each_alone(
            "test_task",
            [date(2026, 1, 1), date(9999, 12, 31), date(2026, 2, 1)],
            next_day,
            lambda day: f"day {day}",
        )

    assert outcome.done == (date(2026, 1, 2), date(2026, 2, 2))
    assert outcome.failed == 1
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.exc_info is None
    assert record.getMessage() == (
        "test_task: day 9999-12-31 failed (OverflowError: date value out of range); "
        "the others go on"
    )


async def test_a_lost_lease_still_stops_the_run() -> None:
    async def lost(item: int) -> int:
        raise LeaseLost("taken over")

    with pytest.raises(LeaseLost):
        await each_alone("test_task", [1, 2], lost, str)
