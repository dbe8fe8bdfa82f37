"""Usage reports over recorded sessions and logons, as JSON and as CSV.

Sessions and logons are written as the broker and the API record them, at known instants of a
past day, so each bucket's figures are known exactly.
"""

from __future__ import annotations

import csv
import io
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.support.sessions import (
    Estate,
)

from deskpool.runtime import Runtime

MakeEstate = Callable[..., Awaitable[Estate]]
NewCaller = Callable[..., Awaitable[Any]]

DAY = datetime(2026, 1, 10, tzinfo=UTC)
A, B, C = (uuid.uuid4() for _ in range(3))


def at(clock: str) -> datetime:
    hours, minutes, *seconds = (int(part) for part in clock.split(":"))
    return DAY + timedelta(hours=hours, minutes=minutes, seconds=seconds[0] if seconds else 0)


async def _seed(runtime: Runtime, pool: uuid.UUID, other_pool: uuid.UUID) -> None:
    sessions = [
        (A, pool, "07:30", "08:30", False),
        (B, pool, "08:15", "09:45", False),
        (A, pool, "08:20", "08:40", False),
        (C, pool, "08:00", "09:00", True),  # an administrator's read-only view: not usage
        (C, other_pool, "10:10", None, False),  # still open
    ]
    logons = [
        (pool, "08:14:50", "08:15:00", None),
        (pool, "08:19:58", "08:20:00", None),
        (pool, "09:05", None, "desktop_unreachable"),
        (pool, "09:10", None, "daemon_error"),
        (pool, "09:20", None, "daemon_error"),
        (other_pool, "10:09:55", "10:10:00", None),
    ]
    async with runtime.db.acquire() as db:
        for user, pool_id, start, end, read_only in sessions:
            await db.execute(
                "INSERT INTO desktop_sessions (user_id, desktop_id, pool_id, desktop_name, "
                "protocol, gateway_id, started_at, ended_at, read_only) "
                "VALUES ($1, gen_random_uuid(), $2, 'd', 'vnc', 'gw', $3, $4, $5)",
                user,
                pool_id,
                at(start),
                None if end is None else at(end),
                read_only,
            )
        for pool_id, asked, drawn, reason in logons:
            await db.execute(
                "INSERT INTO logons (user_id, pool_id, asked_at, first_frame_at, failed_at, "
                "failure_reason) VALUES ($1, $2, $3, $4, $5, $6)",
                A,
                pool_id,
                at(asked),
                None if drawn is None else at(drawn),
                None if reason is None else at(asked) + timedelta(seconds=20),
                reason,
            )


def _url(**query: str) -> str:
    return "/api/v1/reports/usage?" + "&".join(f"{k}={v}" for k, v in query.items())


PERIOD = {"from": "2026-01-10T08:00:00Z", "to": "2026-01-10T11:00:00Z"}


async def test_a_pools_usage_per_hour_is_computed_from_its_sessions_and_logons(
    client: Any, estate: MakeEstate, new_caller: NewCaller, pools_runtime: Runtime
) -> None:
    place = await estate()
    await _seed(pools_runtime, place.pool.id, uuid.uuid4())
    reader = await new_caller("reports:read")
    got = await client.get(_url(**PERIOD, pool_id=str(place.pool.id)), headers=reader.headers)
    assert got.status == 200, await got.text()
    report = await got.json()
    assert (report["from"], report["to"], report["bucket"]) == (
        "2026-01-10T08:00:00+00:00",
        "2026-01-10T11:00:00+00:00",
        "hour",
    )
    eight, nine, ten = report["buckets"]
    assert eight["peak_concurrent"] == 3
    assert eight["mean_concurrent"] == pytest.approx(95 / 60, abs=1e-3)
    assert eight["connected_hours"] == pytest.approx(95 / 60, abs=1e-3)
    assert (eight["sessions_started"], eight["distinct_users"]) == (2, 2)
    assert (eight["logons"], eight["failed_connections"]) == (2, 0)
    assert (eight["logon_seconds_p50"], eight["logon_seconds_p95"]) == (2.0, 10.0)
    assert (nine["peak_concurrent"], nine["sessions_started"], nine["distinct_users"]) == (1, 0, 1)
    assert nine["connected_hours"] == pytest.approx(0.75)
    assert nine["failed_by_reason"] == {"daemon_error": 2, "desktop_unreachable": 1}
    assert nine["logon_seconds_p50"] is None
    assert (ten["peak_concurrent"], ten["connected_hours"], ten["logons"]) == (0, 0.0, 0)
    totals = report["totals"]
    assert (totals["peak_concurrent"], totals["sessions_started"], totals["distinct_users"]) == (
        3,
        2,
        2,
    )
    assert totals["connected_hours"] == pytest.approx(140 / 60, abs=1e-3)
    assert totals["failed_connections"] == 3

    # All pools: the other pool's session, still open, fills the rest of 10:00.
    everything = await (await client.get(_url(**PERIOD), headers=reader.headers)).json()
    ten = everything["buckets"][2]
    assert (ten["peak_concurrent"], ten["sessions_started"], ten["distinct_users"]) == (1, 1, 1)
    assert ten["connected_hours"] == pytest.approx(50 / 60, abs=1e-3)
    assert ten["logon_seconds_p50"] == 5.0

    # Day buckets widen the period to the whole day.
    daily = await (
        await client.get(
            _url(**PERIOD, bucket="day", pool_id=str(place.pool.id)), headers=reader.headers
        )
    ).json()
    (day,) = daily["buckets"]
    assert (day["start"], day["end"]) == ("2026-01-10T00:00:00+00:00", "2026-01-11T00:00:00+00:00")
    assert day["sessions_started"] == 3  # the 07:30 session too
    assert day["connected_hours"] == pytest.approx(170 / 60, abs=1e-3)


async def test_the_same_report_as_csv(
    client: Any, estate: MakeEstate, new_caller: NewCaller, pools_runtime: Runtime
) -> None:
    place = await estate()
    await _seed(pools_runtime, place.pool.id, uuid.uuid4())
    reader = await new_caller("reports:read")
    got = await client.get(
        _url(**PERIOD, pool_id=str(place.pool.id)),
        headers={**reader.headers, "Accept": "text/csv"},
    )
    assert got.status == 200
    assert got.content_type == "text/csv"
    rows = list(csv.DictReader(io.StringIO(await got.text())))
    assert [row["start"] for row in rows] == [
        "2026-01-10T08:00:00Z",
        "2026-01-10T09:00:00Z",
        "2026-01-10T10:00:00Z",
    ]
    assert (rows[0]["peak_concurrent"], rows[0]["sessions_started"]) == ("3", "2")
    assert (rows[1]["failed_daemon_error"], rows[1]["failed_desktop_unreachable"]) == ("2", "1")
    assert (rows[0]["logon_seconds_p95"], rows[1]["logon_seconds_p95"]) == ("10.0", "")


@pytest.mark.parametrize(
    ("path", "too_early"),
    [("/api/v1/reports/usage", "2026-01-01"), ("/api/v1/reports/logon-phases", "2025-01-01")],
)
async def test_reports_need_reports_read_and_a_sound_period(
    client: Any, estate: MakeEstate, new_caller: NewCaller, path: str, too_early: str
) -> None:
    """Too early: a ``from`` too long before 2026-03-01 (31 days of hours, or a year)."""

    def url(**query: str) -> str:
        return f"{path}?" + "&".join(f"{k}={v}" for k, v in query.items())

    place = await estate()
    reader = await new_caller("reports:read")
    assert (await client.get(url(**PERIOD), headers=place.admin.headers)).status == 403
    backwards = await client.get(
        url(**{"from": PERIOD["to"], "to": PERIOD["from"]}), headers=reader.headers
    )
    assert backwards.status == 422
    assert (await backwards.json())["errors"][0]["pointer"] == "/to"
    too_long = await client.get(
        url(**{"from": f"{too_early}T00:00:00Z", "to": "2026-03-01T00:00:00Z"}),
        headers=reader.headers,
    )
    assert too_long.status == 422
    unknown = await client.get(url(**PERIOD, pool_id=str(uuid.uuid4())), headers=reader.headers)
    assert unknown.status == 404
    missing = await client.get(f"{path}?to=2026-01-10T08:00:00Z", headers=reader.headers)
    assert missing.status == 422


#: The phases a gateway records, each a second after the one before in the seeded logons.
GATEWAY_PHASES = ("tunnel_opened", "daemon_connected", "first_frame")
#: A day no other test of the module records anything on (the database is the module's).
PHASES_DAY = timedelta(days=31)
PHASES_PERIOD = {"from": "2026-02-10T08:00:00Z", "to": "2026-02-10T11:00:00Z"}


def _phases_url(**query: str) -> str:
    return "/api/v1/reports/logon-phases?" + "&".join(f"{k}={v}" for k, v in query.items())


async def _seed_phases(runtime: Runtime, pool: uuid.UUID, other_pool: uuid.UUID) -> None:
    """Three logons of ``pool`` in the period (two drew, one failed), one outside, one elsewhere."""
    logons = [
        # pool, asked, {phase: seconds after asked}, failure
        (pool, "08:00", {"allocated": 1, "guest_ready": 2, "token_issued": 2.5}, None),
        (pool, "08:10", {"allocated": 0.5, "powered_on": 30.5, "guest_ready": 32}, None),
        (pool, "08:20", {"allocated": 2, "guest_ready": 5}, "desktop_unreachable"),
        (pool, "07:59", {"allocated": 100}, None),  # before the period
        (other_pool, "08:30", {"allocated": 50}, None),
    ]
    async with runtime.db.acquire() as db:
        for pool_id, asked, steps, reason in logons:
            start = at(asked) + PHASES_DAY
            reached = {f"{phase}_at": start + timedelta(seconds=s) for phase, s in steps.items()}
            if reason is None:
                last = max(reached.values())
                for offset, phase in enumerate(
                    ("tunnel_opened", "daemon_connected", "first_frame")
                ):
                    reached[f"{phase}_at"] = last + timedelta(seconds=offset + 1)
            columns = ", ".join(reached)
            places = ", ".join(f"${n}" for n in range(6, 6 + len(reached)))
            await db.execute(
                f"INSERT INTO logons (user_id, pool_id, asked_at, failed_at, failure_reason, "
                f"{columns}) VALUES ($1, $2, $3, $4, $5, {places})",
                A,
                pool_id,
                start,
                None if reason is None else start + timedelta(seconds=20),
                reason,
                *reached.values(),
            )


async def test_a_pools_logon_phase_percentiles_over_a_period(
    client: Any, estate: MakeEstate, new_caller: NewCaller, pools_runtime: Runtime
) -> None:
    place = await estate()
    await _seed_phases(pools_runtime, place.pool.id, uuid.uuid4())
    reader = await new_caller("reports:read")
    got = await client.get(
        _phases_url(**PHASES_PERIOD, pool_id=str(place.pool.id)), headers=reader.headers
    )
    assert got.status == 200, await got.text()
    report = await got.json()
    assert (report["from"], report["to"], report["pool_id"]) == (
        "2026-02-10T08:00:00+00:00",
        "2026-02-10T11:00:00+00:00",
        str(place.pool.id),
    )
    assert (report["logons"], report["connected"], report["failed"], report["pending"]) == (
        3,
        2,
        1,
        0,
    )
    phases = {item["phase"]: item for item in report["phases"]}
    assert list(phases) == [
        "allocated",
        "powered_on",
        "guest_ready",
        "token_issued",
        "tunnel_opened",
        "daemon_connected",
        "first_frame",
    ]
    assert (phases["allocated"]["reached"], phases["allocated"]["seconds_p50"]) == (3, 1.0)
    assert phases["allocated"]["seconds_p95"] == 2.0
    assert (phases["powered_on"]["reached"], phases["powered_on"]["seconds_p50"]) == (1, 30.0)
    # guest_ready: 1 s after allocated, 1.5 s after powered_on, 3 s after allocated (failed).
    assert (phases["guest_ready"]["seconds_p50"], phases["guest_ready"]["seconds_p95"]) == (
        1.5,
        3.0,
    )
    assert phases["token_issued"]["reached"] == 1
    # The logon without token_issued reached tunnel_opened 1 s after guest_ready.
    assert (phases["first_frame"]["reached"], phases["first_frame"]["seconds_p95"]) == (2, 1.0)
    assert report["to_first_frame"] == {"reached": 2, "seconds_p50": 5.5, "seconds_p95": 35.0}

    everything = await (
        await client.get(_phases_url(**PHASES_PERIOD), headers=reader.headers)
    ).json()
    assert everything["pool_id"] is None
    assert everything["logons"] == 4
    assert everything["phases"][0]["seconds_p95"] == 50.0


async def test_logon_phases_are_not_for_pool_readers_and_need_zoned_times(
    client: Any, estate: MakeEstate, new_caller: NewCaller
) -> None:
    place = await estate()
    reader = await new_caller("reports:read")
    pools_reader = await new_caller("pools:read")
    assert (await client.get(_phases_url(**PERIOD), headers=pools_reader.headers)).status == 403
    naive = await client.get(
        _phases_url(**{"from": "2026-01-10T08:00:00", "to": "2026-01-10T09:00:00"}),
        headers=reader.headers,
    )
    assert naive.status == 422
    empty = await client.get(
        _phases_url(**PERIOD, pool_id=str(place.pool.id)), headers=reader.headers
    )
    assert (await empty.json())["to_first_frame"]["reached"] == 0
