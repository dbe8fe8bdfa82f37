"""The schedules API over HTTP.

CRUD with its own permissions, pools referencing a schedule, the preview, and a pool's planned
and actual capacity; everything audited.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.pools import (
    Caller,
    pool_body,
)

from deskpool.runtime import Runtime

SCHEDULES = "/api/v1/schedules"
POOLS = "/api/v1/pools"

NewCaller = Callable[..., Awaitable[Caller]]
NewCluster = Callable[..., Awaitable[str]]

OFFICE: dict[str, Any] = {
    "name": "Berlin office",
    "time_zone": "Europe/Berlin",
    "phases": [
        {
            "name": "peak",
            "days": ["mon", "tue", "wed", "thu", "fri"],
            "start": "07:00",
            "min_ready": 50,
            "min_ready_unit": "percent",
            "spare": 1,
        },
        {
            "name": "off-peak",
            "days": ["mon", "tue", "wed", "thu", "fri"],
            "start": "19:00",
            "min_ready": 0,
            "idle": "power_off",
            "logoff": {"scope": "disconnected", "wait_seconds": 600, "message": "Closing"},
        },
    ],
    "exceptions": [
        {"name": "christmas", "first": "2026-12-24", "last": "2026-12-26", "phase": "off-peak"}
    ],
}


async def send(client: Any, method: str, path: str, caller: Caller, status: int, **kw: Any) -> Any:
    response = await client.request(method, path, headers=caller.headers, **kw)
    assert response.status == status, await response.text()
    return await response.json() if response.status != 204 else None


async def test_schedules_are_created_shown_replaced_and_deleted_with_their_permissions(
    client: Any, new_caller: NewCaller, pools_runtime: Runtime
) -> None:
    manager, reader = await new_caller("schedules:manage"), await new_caller("schedules:read")
    pools_manager = await new_caller("pools:manage")
    await send(client, "POST", SCHEDULES, reader, 403, json=OFFICE)
    await send(client, "GET", SCHEDULES, pools_manager, 403)
    created = await send(client, "POST", SCHEDULES, manager, 201, json=OFFICE)
    assert created["name"] == "Berlin office"
    assert [phase["name"] for phase in created["phases"]] == ["peak", "off-peak"]
    assert created["phases"][1]["logoff"] == {
        "scope": "disconnected",
        "wait_seconds": 600,
        "message": "Closing",
    }
    assert created["exceptions"][0]["last"] == "2026-12-26"
    assert created["in_force"]["phase"] in {"peak", "off-peak"}
    one = f"{SCHEDULES}/{created['id']}"
    shown = await send(client, "GET", one, reader, 200)
    assert shown["phases"] == created["phases"]
    listed = await send(client, "GET", SCHEDULES, reader, 200)
    assert [item["id"] for item in listed["items"]] == [created["id"]]

    await send(client, "POST", SCHEDULES, manager, 409, json=OFFICE)
    bad = await send(
        client,
        "POST",
        SCHEDULES,
        manager,
        422,
        json={
            **OFFICE,
            "name": "bad",
            "time_zone": "Mars/Olympus",
            "exceptions": [{"name": "x", "first": "2026-01-01", "phase": "nope"}],
        },
    )
    assert {e["pointer"] for e in bad["errors"]} == {"/time_zone", "/exceptions/0/phase"}

    changed = await send(client, "PUT", one, manager, 200, json={**OFFICE, "name": "Office"})
    assert (changed["name"], changed["generation"]) == ("Office", 2)
    await send(client, "DELETE", one, manager, 204)
    await send(client, "GET", one, reader, 404)
    async with pools_runtime.db.acquire() as connection:
        rows = await connection.fetch(
            "SELECT action FROM audit_events WHERE resource_id = $1 ORDER BY id", created["id"]
        )
    assert [row["action"] for row in rows] == [
        "schedule.create",
        "schedule.update",
        "schedule.delete",
    ]


async def test_a_pool_references_a_schedule_and_shows_its_planned_capacity(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster, pools_runtime: Runtime
) -> None:
    admin = await new_caller("schedules:manage", "pools:manage")
    cluster_id = await api_cluster()
    schedule = await send(client, "POST", SCHEDULES, admin, 201, json=OFFICE)
    missing = "00000000-0000-0000-0000-000000000001"
    bad = await send(
        client, "POST", POOLS, admin, 422, json=pool_body(cluster_id, schedule_id=missing)
    )
    assert {e["pointer"] for e in bad["errors"]} == {"/schedule_id"}
    pool = await send(
        client,
        "POST",
        POOLS,
        admin,
        201,
        json=pool_body(cluster_id, max_size=6, schedule_id=schedule["id"]),
    )
    assert pool["schedule_id"] == schedule["id"]
    in_use = await send(client, "DELETE", f"{SCHEDULES}/{schedule['id']}", admin, 409)
    assert in_use["code"] == "schedule_in_use"

    # Monday 2026-11-30 to Wednesday 2026-12-02, Berlin time (UTC+1).
    start, end = "2026-11-30T00:00:00+01:00", "2026-12-02T00:00:00+01:00"
    capacity = await send(
        client,
        "GET",
        f"{POOLS}/{pool['id']}/capacity",
        admin,
        200,
        params={"from": start, "to": end},
    )
    assert [(p["phase"], p["min_ready"], p["spare"], p["since"]) for p in capacity["planned"]] == [
        ("off-peak", 0, 0, "2026-11-29T23:00:00+00:00"),
        ("peak", 3, 1, "2026-11-30T06:00:00+00:00"),
        ("off-peak", 0, 0, "2026-11-30T18:00:00+00:00"),
        ("peak", 3, 1, "2026-12-01T06:00:00+00:00"),
        ("off-peak", 0, 0, "2026-12-01T18:00:00+00:00"),
    ]
    assert capacity["actual"] == []
    too_long = await send(
        client,
        "GET",
        f"{POOLS}/{pool['id']}/capacity",
        admin,
        422,
        params={"from": start, "to": "2027-02-01T00:00:00+01:00"},
    )
    assert {e["pointer"] for e in too_long["errors"]} == {"/to"}

    # Detaching the schedule: the pool plans its own min_size and spare.
    detached = await send(
        client, "PATCH", f"{POOLS}/{pool['id']}", admin, 200, json={"schedule_id": None}
    )
    assert detached["schedule_id"] is None
    now = datetime.now(UTC)
    plain = await send(
        client,
        "GET",
        f"{POOLS}/{pool['id']}/capacity",
        admin,
        200,
        params={"from": now.isoformat(), "to": (now + timedelta(days=1)).isoformat()},
    )
    assert [(p["phase"], p["min_ready"]) for p in plain["planned"]] == [(None, 0)]


async def test_a_preview_shows_an_unsaved_schedules_week(
    client: Any, new_caller: NewCaller
) -> None:
    reader = await new_caller("schedules:read")
    body = {
        **OFFICE,
        "from": "2026-12-23T00:00:00+01:00",
        "to": "2026-12-28T00:00:00+01:00",
        "max_size": 10,
    }
    preview = await send(client, "POST", "/api/v1/schedule-preview", reader, 200, json=body)
    assert [(item["phase"], item["exception"], item["min_ready"]) for item in preview["items"]] == [
        ("off-peak", None, 0),
        ("peak", None, 5),
        ("off-peak", None, 0),
        ("off-peak", "christmas", 0),
        ("off-peak", None, 0),
    ]
