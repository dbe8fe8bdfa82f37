"""The value types (:mod:`deskpool.values`) and the models that compute with what they accept.

The property tests feed every model that does date arithmetic (schedules, rollouts, usage
and phase reports, licensing) the extremes its validator accepts: instants and dates at the
ends of the years 1970 to 8999, in any offset and any canonical time zone. None may raise:
anything a validator lets through is computable.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta, timezone
from typing import Any
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from marshmallow import Schema, ValidationError, fields
from tests.unit.rollouts.test_rollout_planner import pool_of, rollout_of, six, view

from deskpool.api.values import Day, Instant
from deskpool.licensing import document as license_document
from deskpool.licensing import model as licensing
from deskpool.licensing.model import BuildIntegrity, WatermarkIntegrity, WatermarkView
from deskpool.reports import model as reports
from deskpool.reports import phases
from deskpool.rollouts.model import RolloutState
from deskpool.rollouts.planner import count_rollout, plan_rollout
from deskpool.schedules import model as schedules
from deskpool.testing.licensing import TestVendor
from deskpool.values import (
    EARLIEST,
    FIRST_DAY,
    LAST_DAY,
    LATEST,
    ascii_int,
    day_problem,
    instant_problem,
    is_canonical_time_zone,
)

EXAMPLES = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))

#: Zones at the ends of the offsets (Etc/GMT+12 is UTC-12), with summer time, and UTC.
ZONES = [
    "Etc/GMT+12",
    "Etc/GMT-14",
    "Pacific/Kiritimati",
    "Pacific/Pago_Pago",
    "Europe/Berlin",
    "America/Sao_Paulo",
    "Australia/Lord_Howe",
    "UTC",
]
OFFSETS = [timezone(timedelta(hours=hours)) for hours in (-12, -1, 0, 5.75, 14)]


def edge_days() -> st.SearchStrategy[date]:
    """Dates the validator accepts, mostly within a fortnight of either end."""
    near_first = st.dates(FIRST_DAY, FIRST_DAY + timedelta(days=14))
    near_last = st.dates(LAST_DAY - timedelta(days=14), LAST_DAY)
    return st.one_of(near_first, near_last, st.dates(FIRST_DAY, LAST_DAY))


def edge_instants() -> st.SearchStrategy[datetime]:
    """Instants the validator accepts (their year as written is in range), in any offset."""
    naive = st.one_of(
        st.datetimes(datetime(1970, 1, 1), datetime(1970, 1, 15)),
        st.datetimes(datetime(8999, 12, 17), datetime(8999, 12, 31, 23, 59, 59, 999_999)),
        st.datetimes(datetime(1970, 1, 1), datetime(8999, 12, 31, 23, 59, 59)),
    )
    return st.builds(
        lambda moment, offset: moment.replace(tzinfo=offset), naive, st.sampled_from(OFFSETS)
    ).filter(lambda moment: instant_problem(moment) is None)


# --------------------------------------------------------------------------- the values


def test_integers_are_ascii_digits_of_bounded_length() -> None:
    assert ascii_int("42") == 42
    assert ascii_int("-7") == -7
    for bad in ("²", "٣", "3" * 19, "1" * 5000, "+3", " 3", "3.0", "", "-", "0x1"):
        assert ascii_int(bad) is None, bad


@pytest.mark.parametrize("name", ["Europe/Berlin", "UTC", "Etc/GMT+12", "America/Sao_Paulo"])
def test_canonical_time_zones_are_accepted(name: str) -> None:
    assert is_canonical_time_zone(name)


@pytest.mark.parametrize(
    "name",
    ["localtime", "Factory", "posixrules", "EST5EDT", "CST6CDT", "PST8PDT", "MST7MDT", "",
     "Europe/Nowhere", "posix/Europe/Berlin", "right/UTC", " UTC", "Europe/Berlin\n"],
)  # fmt: skip
def test_names_that_are_no_canonical_time_zone_are_refused(name: str) -> None:
    assert not is_canonical_time_zone(name)


def test_instants_and_dates_out_of_range_are_refused() -> None:
    assert instant_problem(datetime(1, 1, 1, tzinfo=UTC)) is not None
    assert instant_problem(datetime(9999, 12, 31, tzinfo=UTC)) is not None
    assert instant_problem(datetime(2026, 1, 1)) is not None  # naive
    assert instant_problem(LATEST) is None
    assert instant_problem(EARLIEST) is None
    assert day_problem(date(9999, 12, 31)) is not None
    assert day_problem(LAST_DAY) is None


class Fields(Schema):
    at = Instant()
    day = Day()


def test_the_api_fields_load_utc_instants_and_bounded_dates() -> None:
    loaded = Fields().load({"at": "2999-01-01T12:00:00+02:00", "day": "8999-12-31"})
    assert loaded["at"] == datetime(2999, 1, 1, 10, tzinfo=UTC)
    assert loaded["at"].utcoffset() == timedelta(0)
    assert Fields().dump(loaded)["at"] == "2999-01-01T10:00:00+00:00"
    for bad in (
        {"at": "0001-01-01T00:00:00Z"},
        {"at": "9999-12-31T23:59:59+00:00"},
        {"at": "2026-01-01T00:00:00"},
        {"day": "9999-12-31"},
        {"day": "0001-01-01"},
    ):
        with pytest.raises(ValidationError):
            Fields().load(bad)


# --------------------------------------------------------------------------- schedules


def schedule_with(zone: str, first: date, last: date) -> schedules.Schedule:
    settings_ = schedules.Settings(min_ready=1)
    return schedules.Schedule(
        id=UUID(int=1),
        name="edge",
        time_zone=zone,
        phases=(
            schedules.Phase(
                name="day", days=frozenset(range(7)), start=time(7), settings=settings_
            ),
            schedules.Phase(name="night", days=frozenset({0, 6}), start=time(19)),
        ),
        exceptions=(schedules.ExceptionDates(name="x", first=first, last=last, phase="night"),),
    )


@EXAMPLES
@given(first=edge_days(), length=st.integers(0, 3), zone=st.sampled_from(ZONES),
       at=edge_instants())  # fmt: skip
def test_a_schedule_the_validator_accepts_is_computable(
    first: date, length: int, zone: str, at: datetime
) -> None:
    last = min(first + timedelta(days=length), LAST_DAY)
    schedule = schedule_with(zone, first, last)
    assert schedules.validate_schedule(schedule) == []
    schedules.phase_at(schedule, at)
    start = datetime.combine(first, time(), tzinfo=UTC)
    for moment in (start, at):
        end = min(moment + timedelta(days=2), LATEST)
        schedules.changes_between(schedule, moment, end)


def test_an_exception_at_the_end_of_time_is_refused_by_the_schedule_validator() -> None:
    poisoned = schedule_with("Etc/GMT+12", date(9999, 12, 31), date(9999, 12, 31))
    assert {error.pointer for error in schedules.validate_schedule(poisoned)} == {
        "/exceptions/0/first",
        "/exceptions/0/last",
    }


# --------------------------------------------------------------------------- rollouts


@EXAMPLES
@given(start_at=edge_instants(), now=edge_instants(), state=st.sampled_from(list(RolloutState)))
def test_a_rollout_the_validator_accepts_is_computable(
    start_at: datetime, now: datetime, state: RolloutState
) -> None:
    pool = pool_of()
    desktops = six(pool)
    rollout = rollout_of(pool, start_at=start_at.astimezone(UTC), state=state, created_at=now)
    plan_rollout(pool, desktops, view(rollout), now.astimezone(UTC))
    count_rollout(pool, desktops, view(replace(rollout, warning_seconds=86_400)))


# --------------------------------------------------------------------------- reports


@EXAMPLES
@given(start=edge_instants(), span=st.integers(1, 40 * 24), now=edge_instants(),
       bucket=st.sampled_from(list(reports.BucketSize)))  # fmt: skip
def test_a_report_period_the_validator_accepts_is_computable(
    start: datetime, span: int, now: datetime, bucket: reports.BucketSize
) -> None:
    end = min(start + timedelta(hours=span), LATEST)
    phases.span_errors(start, end)
    period, errors = reports.period_of(start, end, bucket)
    if period is None:
        assert errors
        return
    session = reports.SessionSpan(UUID(int=2), start.astimezone(UTC), None)
    logon = reports.LogonFact(start.astimezone(UTC), 1.5, None)
    reports.usage(period, [session], [logon], now.astimezone(UTC))


# --------------------------------------------------------------------------- licensing


VENDOR = TestVendor(trusted=False)
VENDOR_KEY = VENDOR.private_key.public_key()
KEYRING = {VENDOR.key_id or license_document.key_fingerprint(VENDOR_KEY): VENDOR_KEY}


@EXAMPLES
@given(issued=edge_instants(), days=st.integers(1, 4000), now=edge_instants(),
       watermark=st.one_of(st.none(), edge_instants()))  # fmt: skip
def test_a_license_the_validator_accepts_is_computable(
    issued: datetime, days: int, now: datetime, watermark: datetime | None
) -> None:
    expires = min(issued + timedelta(days=days), LATEST)
    document = VENDOR.issue(
        issued_at=licensing.format_instant(issued), expires_at=licensing.format_instant(expires)
    )
    try:
        license = license_document.verify_document(document, KEYRING)
    except license_document.LicenseMalformed:
        # The document says UTC: a year in range as written may leave it once normalised.
        issued_utc, expires_utc = issued.astimezone(UTC), expires.astimezone(UTC)
        assert (
            expires_utc <= issued_utc or instant_problem(issued_utc) or instant_problem(expires_utc)
        )
        return
    view_ = WatermarkView(
        watermark, WatermarkIntegrity.INTACT if watermark else WatermarkIntegrity.UNSET
    )
    licensing.judge(license, now=now, watermark=view_, build=BuildIntegrity.VERIFIED)


def test_a_license_expiring_in_9999_is_malformed_not_a_crash() -> None:
    document = VENDOR.issue(issued_at="2026-01-01T00:00:00Z", expires_at="9999-12-31T23:59:59Z")
    with pytest.raises(license_document.LicenseMalformed, match="expires_at"):
        license_document.verify_document(document, KEYRING)


# --------------------------------------------------------------------------- digits elsewhere


@pytest.mark.parametrize("header", ["bytes=²-5", "bytes=٣-", "bytes=-٣", "bytes=1-" + "9" * 5000])
def test_a_range_in_other_digits_is_ignored(header: str) -> None:
    from deskpool.recordings.model import parse_range

    assert parse_range(header, 100) is None


@pytest.mark.parametrize("raw", ["²", "٣", "1" * 5000, "+3", "0"], ids=range(5))
def test_the_gateways_display_numbers_are_ascii_digits_in_range(raw: str) -> None:
    from multidict import MultiDict

    from deskpool_gateway.endpoint import BadRequest, client_info

    with pytest.raises(BadRequest):
        client_info(MultiDict({"width": raw}), "ada")


# --------------------------------------------------------------------------- every operation


def _load_fields(schema: Any, seen: set[int]) -> Iterator[tuple[str, Any]]:
    instance = schema() if isinstance(schema, type) else schema
    if instance is None or id(instance) in seen:
        return
    seen.add(id(instance))
    for name, field in instance.load_fields.items():
        yield name, field
        inner = [field.inner] if isinstance(field, fields.List) else [field]
        for each in inner:
            yield name, each
            if isinstance(each, fields.Nested):
                yield from _load_fields(each.schema, seen)


def test_every_operation_reads_instants_and_dates_with_the_value_types() -> None:
    from deskpool.api.app import build_route_table
    from deskpool.plugins import PluginSelection, load_plugins

    operations = build_route_table(load_plugins(PluginSelection.from_environ({}))).operations()
    read = [
        (f"{operation.method} {operation.path} {name}", field)
        for operation in operations
        for schema in (operation.query, operation.body)
        for name, field in _load_fields(schema, set())
        if isinstance(field, fields.DateTime | fields.Date)
    ]
    assert [where for where, field in read if not isinstance(field, Instant | Day)] == []
    assert "POST /api/v1/pools/{pool_id}/rollouts start_at" in {where for where, _ in read}
