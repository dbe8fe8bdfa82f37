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
from tests.integration.sessions.conftest import Estate

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


async def test_reports_need_reports_read_and_a_sound_period(
    client: Any, estate: MakeEstate, new_caller: NewCaller
) -> None:
    place = await estate()
    reader = await new_caller("reports:read")
    assert (await client.get(_url(**PERIOD), headers=place.admin.headers)).status == 403
    backwards = await client.get(
        _url(**{"from": PERIOD["to"], "to": PERIOD["from"]}), headers=reader.headers
    )
    assert backwards.status == 422
    assert (await backwards.json())["errors"][0]["pointer"] == "/to"
    too_long = await client.get(
        _url(**{"from": "2026-01-01T00:00:00Z", "to": "2026-03-01T00:00:00Z"}),
        headers=reader.headers,
    )
    assert too_long.status == 422
    unknown = await client.get(_url(**PERIOD, pool_id=str(uuid.uuid4())), headers=reader.headers)
    assert unknown.status == 404
    missing = await client.get(
        "/api/v1/reports/usage?to=2026-01-10T08:00:00Z", headers=reader.headers
    )
    assert missing.status == 422
