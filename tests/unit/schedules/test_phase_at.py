"""The phase in force at an instant: weekly starts, summer time changes, exceptions, midnight."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from deskpool.schedules.model import (
    ExceptionDates,
    IdlePolicy,
    Logoff,
    Phase,
    Schedule,
    Settings,
    changes_between,
    local_instant,
    phase_at,
    targets_of,
    validate_schedule,
)

BERLIN = ZoneInfo("Europe/Berlin")
WEEKDAYS = frozenset(range(5))
EVERY_DAY = frozenset(range(7))
PEAK = Settings(min_ready=3, spare=1)
OFF = Settings(min_ready=0, idle=IdlePolicy.POWER_OFF)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def berlin(*args: int) -> datetime:
    return datetime(*args, tzinfo=BERLIN)


def schedule(*phases: Phase, exceptions: tuple[ExceptionDates, ...] = ()) -> Schedule:
    made = Schedule(
        id=uuid.uuid4(),
        name="office",
        time_zone="Europe/Berlin",
        phases=phases,
        exceptions=exceptions,
    )
    assert validate_schedule(made) == []
    return made


def office() -> Schedule:
    return schedule(
        Phase(name="peak", days=WEEKDAYS, start=time(7), settings=PEAK),
        Phase(name="off-peak", days=WEEKDAYS, start=time(19), settings=OFF),
    )


# ------------------------------------------------------------------------ weekly phases


def test_a_phase_is_in_force_from_its_start_until_the_next_start() -> None:
    plan = office()
    # Wednesday 2026-11-25 (CET, UTC+1).
    assert phase_at(plan, berlin(2026, 11, 25, 6, 59, 59)).phase == "off-peak"
    at_seven = phase_at(plan, berlin(2026, 11, 25, 7))
    assert at_seven is not None
    assert at_seven.phase == "peak"
    assert at_seven.since == utc(2026, 11, 25, 6)
    assert at_seven.settings == PEAK
    evening = phase_at(plan, berlin(2026, 11, 25, 19))
    assert evening is not None
    assert evening.phase == "off-peak"


def test_the_last_phase_of_friday_lasts_the_weekend_through_midnights() -> None:
    plan = office()
    for instant in (
        berlin(2026, 11, 28, 0, 0),  # Saturday midnight
        berlin(2026, 11, 29, 12),
        berlin(2026, 11, 29, 23, 59, 59),
        berlin(2026, 11, 30, 0, 0),  # Monday midnight
        berlin(2026, 11, 30, 6, 59),
    ):
        found = phase_at(plan, instant)
        assert found is not None, instant
        assert found.phase == "off-peak", instant
        assert found.since == berlin(2026, 11, 27, 19)
    monday = phase_at(plan, berlin(2026, 11, 30, 7))
    assert monday is not None
    assert monday.phase == "peak"


def test_a_phase_starting_at_midnight_starts_at_the_first_instant_of_the_day() -> None:
    plan = schedule(
        Phase(name="night", days=EVERY_DAY, start=time(0), settings=OFF),
        Phase(name="day", days=EVERY_DAY, start=time(8), settings=PEAK),
    )
    before = phase_at(plan, berlin(2026, 11, 25, 23, 59, 59, 999999))
    assert before is not None
    assert before.phase == "day"
    at = phase_at(plan, berlin(2026, 11, 26, 0, 0))
    assert at is not None
    assert at.phase == "night"
    assert at.since == utc(2026, 11, 25, 23)


def test_an_instant_in_another_zone_is_judged_by_the_schedules_local_time() -> None:
    plan = office()
    # 06:30 UTC is 07:30 in Berlin (winter): peak.
    found = phase_at(plan, utc(2026, 11, 25, 6, 30))
    assert found is not None
    assert found.phase == "peak"
    with pytest.raises(ValueError, match="timezone-aware"):
        phase_at(plan, datetime(2026, 11, 25, 6, 30))


def test_a_schedule_whose_days_never_come_round_still_has_its_phase_in_force() -> None:
    plan = schedule(Phase(name="sundays", days=frozenset({6}), start=time(12), settings=PEAK))
    found = phase_at(plan, berlin(2026, 11, 28, 23))  # Saturday: started last Sunday
    assert found is not None
    assert found.since == berlin(2026, 11, 22, 12)


# ------------------------------------------------------------------------ daylight saving


def test_a_start_in_the_spring_gap_happens_at_the_first_instant_after_the_gap() -> None:
    # 2026-03-29, last Sunday of March: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
    assert local_instant(date(2026, 3, 29), time(2, 30), BERLIN) == utc(2026, 3, 29, 1)
    assert local_instant(date(2026, 3, 29), time(2, 0), BERLIN) == utc(2026, 3, 29, 1)
    assert local_instant(date(2026, 3, 29), time(3, 0), BERLIN) == utc(2026, 3, 29, 1)
    assert local_instant(date(2026, 3, 29), time(1, 59), BERLIN) == utc(2026, 3, 29, 0, 59)
    plan = schedule(
        Phase(name="night", days=EVERY_DAY, start=time(0), settings=OFF),
        Phase(name="early", days=EVERY_DAY, start=time(2, 30), settings=PEAK),
    )
    just_before = phase_at(plan, utc(2026, 3, 29, 0, 59, 59))
    assert just_before is not None
    assert just_before.phase == "night"
    after_gap = phase_at(plan, utc(2026, 3, 29, 1))
    assert after_gap is not None
    assert after_gap.phase == "early"
    assert after_gap.since == utc(2026, 3, 29, 1)
    # The day before and after, 02:30 is an ordinary time (CET, then CEST).
    assert local_instant(date(2026, 3, 28), time(2, 30), BERLIN) == utc(2026, 3, 28, 1, 30)
    assert local_instant(date(2026, 3, 30), time(2, 30), BERLIN) == utc(2026, 3, 30, 0, 30)


def test_a_start_at_a_repeated_autumn_time_happens_at_its_first_occurrence() -> None:
    # 2026-10-25, last Sunday of October: 03:00 CEST goes back to 02:00 CET (01:00 UTC);
    # 02:30 happens at 00:30 UTC (CEST) and again at 01:30 UTC (CET).
    assert local_instant(date(2026, 10, 25), time(2, 30), BERLIN) == utc(2026, 10, 25, 0, 30)
    plan = schedule(
        Phase(name="night", days=EVERY_DAY, start=time(0), settings=OFF),
        Phase(name="early", days=EVERY_DAY, start=time(2, 30), settings=PEAK),
    )
    before = phase_at(plan, utc(2026, 10, 25, 0, 29, 59))
    assert before is not None
    assert before.phase == "night"
    first = phase_at(plan, utc(2026, 10, 25, 0, 30))
    assert first is not None
    assert first.phase == "early"
    assert first.since == utc(2026, 10, 25, 0, 30)
    # The second 02:30 starts nothing new.
    second = phase_at(plan, utc(2026, 10, 25, 1, 30))
    assert second is not None
    assert second.since == utc(2026, 10, 25, 0, 30)


def test_the_change_days_have_23_and_25_hours_between_midnights() -> None:
    spring = local_instant(date(2026, 3, 30), time(0), BERLIN) - local_instant(
        date(2026, 3, 29), time(0), BERLIN
    )
    autumn = local_instant(date(2026, 10, 26), time(0), BERLIN) - local_instant(
        date(2026, 10, 25), time(0), BERLIN
    )
    assert (spring, autumn) == (timedelta(hours=23), timedelta(hours=25))


def test_a_zone_whose_midnight_does_not_exist_starts_the_day_after_the_gap() -> None:
    # America/Santiago moved clocks from 00:00 to 01:00 on 2026-09-06.
    santiago = ZoneInfo("America/Santiago")
    start = local_instant(date(2026, 9, 6), time(0), santiago)
    assert start.astimezone(santiago).replace(tzinfo=None) == datetime(2026, 9, 6, 1, 0)


# ------------------------------------------------------------------------ exceptions


def test_an_exception_range_runs_its_phase_all_day_from_midnight_to_midnight() -> None:
    holiday = ExceptionDates(
        name="christmas", first=date(2026, 12, 24), last=date(2026, 12, 26), settings=OFF
    )
    plan = schedule(*office().phases, exceptions=(holiday,))
    before = phase_at(plan, berlin(2026, 12, 23, 23, 59, 59))
    assert before is not None
    assert before.phase == "off-peak"
    assert before.exception is None
    for instant in (berlin(2026, 12, 24, 0), berlin(2026, 12, 24, 7), berlin(2026, 12, 26, 23, 59)):
        found = phase_at(plan, instant)
        assert found is not None, instant
        assert found.exception == "christmas", instant
        assert found.phase == "christmas"
        assert found.settings == OFF
        assert found.since == berlin(2026, 12, 24, 0)
    # After the range (a Sunday), the phase that started last is in force since it ended.
    after = phase_at(plan, berlin(2026, 12, 27, 0))
    assert after is not None
    assert after.phase == "off-peak"
    assert after.exception is None
    assert after.since == berlin(2026, 12, 27, 0)
    monday = phase_at(plan, berlin(2026, 12, 28, 7))
    assert monday is not None
    assert monday.phase == "peak"


def test_an_exception_may_run_a_named_phase_and_the_first_listed_wins() -> None:
    exam = ExceptionDates(
        name="exam", first=date(2026, 11, 28), last=date(2026, 11, 28), phase="peak"
    )
    closed = ExceptionDates(
        name="closed", first=date(2026, 11, 27), last=date(2026, 11, 29), settings=OFF
    )
    plan = schedule(*office().phases, exceptions=(exam, closed))
    saturday = phase_at(plan, berlin(2026, 11, 28, 3))
    assert saturday is not None
    assert saturday.phase == "peak"
    assert saturday.exception == "exam"
    assert saturday.settings == PEAK
    friday = phase_at(plan, berlin(2026, 11, 27, 10))
    assert friday is not None
    assert friday.exception == "closed"


def test_changes_between_lists_each_change_once() -> None:
    holiday = ExceptionDates(
        name="holiday", first=date(2026, 11, 26), last=date(2026, 11, 26), settings=OFF
    )
    plan = schedule(*office().phases, exceptions=(holiday,))
    changes = changes_between(plan, berlin(2026, 11, 25, 0), berlin(2026, 11, 28, 0))
    assert [(c.phase, c.since.astimezone(BERLIN).strftime("%d %H:%M")) for c in changes] == [
        ("off-peak", "25 00:00"),
        ("peak", "25 07:00"),
        ("off-peak", "25 19:00"),
        ("holiday", "26 00:00"),
        ("off-peak", "27 00:00"),
        ("peak", "27 07:00"),
        ("off-peak", "27 19:00"),
    ]


# ------------------------------------------------------------------------ targets, validation


def test_targets_take_a_percentage_of_max_size_rounded_up() -> None:
    assert targets_of(Settings(min_ready=25, min_ready_percent=True, spare=2), 10).min_ready == 3
    assert targets_of(Settings(min_ready=100, min_ready_percent=True), 7).min_ready == 7
    assert targets_of(Settings(min_ready=50, spare=20), 8) == targets_of(
        Settings(min_ready=8, spare=8), 8
    )


def test_validation_names_each_invalid_field() -> None:
    bad = Schedule(
        id=uuid.uuid4(),
        name=" ",
        time_zone="Mars/Olympus",
        phases=(
            Phase(
                name="a",
                days=frozenset({0}),
                start=time(7),
                settings=Settings(min_ready=101, min_ready_percent=True),
            ),
            Phase(name="a", days=frozenset({0}), start=time(7)),
            Phase(
                name="c",
                days=frozenset(),
                start=time(8),
                settings=Settings(logoff=Logoff(wait_seconds=-1)),
            ),
        ),
        exceptions=(
            ExceptionDates(name="x", first=date(2026, 1, 2), last=date(2026, 1, 1), phase="nope"),
            ExceptionDates(name="y", first=date(2026, 1, 1), last=date(2026, 1, 1)),
        ),
    )
    pointers = {error.pointer for error in validate_schedule(bad)}
    assert pointers == {
        "/name",
        "/time_zone",
        "/phases/0/min_ready",
        "/phases/1/name",
        "/phases/1/start",
        "/phases/2/days",
        "/phases/2/logoff/wait_seconds",
        "/exceptions/0/last",
        "/exceptions/0/phase",
        "/exceptions/1",
    }
