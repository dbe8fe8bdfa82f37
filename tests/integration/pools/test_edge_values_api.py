"""Values are checked once, at the edge (issue 33, findings 1, 2, 7 and 9): attacks over HTTP.

Each request here was answered 500 (after committing, for some) or accepted against the
contract before the value types of :mod:`deskpool.api.values`: a schedule whose exception
cannot be computed, a rollout starting in year 1, a non-canonical id, a time zone that is not
a canonical IANA name, a count given as ``3.5`` or ``"3"``, a body in a charset that cannot
decode it or a gzip body without its trailer. Every one is now a 4xx problem, and nothing
is stored.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tests.integration.pools.test_schedules_api import OFFICE
from tests.support.pools import Caller, pool_body

from deskpool.runtime import Runtime

SCHEDULES = "/api/v1/schedules"
POOLS = "/api/v1/pools"

NewCaller = Callable[..., Awaitable[Caller]]
NewCluster = Callable[..., Awaitable[str]]


async def send(client: Any, method: str, path: str, caller: Caller, status: int, **kw: Any) -> Any:
    response = await client.request(method, path, headers=caller.headers, **kw)
    assert response.status == status, await response.text()
    return await response.json() if response.status != 204 else None


def pointers(problem: dict[str, Any]) -> set[str]:
    return {error["pointer"] for error in problem.get("errors", [])}


async def schedule_count(runtime: Runtime) -> int:
    async with runtime.db.acquire() as connection:
        count: int = await connection.fetchval("SELECT count(*) FROM schedules")
    return count


@pytest.mark.parametrize(
    ("first", "last", "zone"),
    [
        ("9999-12-31", "9999-12-31", "Etc/GMT+12"),
        ("9999-12-30", "9999-12-31", "Pacific/Kiritimati"),
        ("0001-01-01", "0001-01-01", "Etc/GMT-14"),
    ],
)
async def test_an_exception_models_cannot_compute_is_refused_and_not_stored(
    client: Any,
    new_caller: NewCaller,
    pools_runtime: Runtime,
    first: str,
    last: str,
    zone: str,
) -> None:
    manager = await new_caller("schedules:manage")
    before = await schedule_count(pools_runtime)
    body = OFFICE | {
        "time_zone": zone,
        "exceptions": [{"name": "end", "first": first, "last": last, "phase": "peak"}],
    }
    refused = await send(client, "POST", SCHEDULES, manager, 422, json=body)
    assert pointers(refused) <= {"/exceptions/0/first", "/exceptions/0/last"}, refused
    assert await schedule_count(pools_runtime) == before

    saved = await send(client, "POST", SCHEDULES, manager, 201, json=OFFICE | {"name": zone})
    await send(client, "PUT", f"{SCHEDULES}/{saved['id']}", manager, 422, json=body)
    await send(client, "GET", SCHEDULES, manager, 200)
    shown = await send(client, "GET", f"{SCHEDULES}/{saved['id']}", manager, 200)
    assert [(e["name"], e["first"]) for e in shown["exceptions"]] == [("christmas", "2026-12-24")]


@pytest.mark.parametrize("zone", ["localtime", "Factory", "EST5EDT", "PST8PDT", "posixrules"])
async def test_a_time_zone_that_is_not_a_canonical_iana_name_is_refused(
    client: Any, new_caller: NewCaller, zone: str
) -> None:
    manager = await new_caller("schedules:manage")
    refused = await send(client, "POST", SCHEDULES, manager, 422, json=OFFICE | {"time_zone": zone})
    assert pointers(refused) == {"/time_zone"}


@pytest.mark.parametrize("count", [3.5, "3", True, "٣", None])
async def test_a_count_that_is_not_a_json_integer_is_refused(
    client: Any, new_caller: NewCaller, count: Any
) -> None:
    manager = await new_caller("schedules:manage")
    phases = [OFFICE["phases"][0] | {"min_ready": count, "min_ready_unit": "count"}]
    refused = await send(client, "POST", SCHEDULES, manager, 422, json=OFFICE | {"phases": phases})
    assert pointers(refused) == {"/phases/0/min_ready"}


@pytest.mark.parametrize("start_at", ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59+00:00"])
async def test_a_rollout_starting_where_models_cannot_compute_is_refused(
    client: Any,
    new_caller: NewCaller,
    api_cluster: NewCluster,
    pools_runtime: Runtime,
    start_at: str,
) -> None:
    manager = await new_caller("pools:manage")
    cluster_id = await api_cluster(templates=[{"name": "ubuntu-22.04"}, {"name": "b"}])
    pool = await send(client, "POST", POOLS, manager, 201, json=pool_body(cluster_id))
    rollouts = f"{POOLS}/{pool['id']}/rollouts"
    refused = await send(
        client, "POST", rollouts, manager, 422, json={"template": "b", "start_at": start_at}
    )
    assert pointers(refused) == {"/start_at"}
    listed = await send(client, "GET", rollouts, manager, 200)
    assert listed["items"] == []

    started = await send(
        client,
        "POST",
        rollouts,
        manager,
        201,
        json={"template": "b", "start_at": "2999-01-01T12:00:00+02:00"},
    )
    assert started["start_at"] == "2999-01-01T10:00:00+00:00"


@pytest.mark.parametrize("raw", ["²", "٣", "3" + "0" * 5000, "+3", " 3", "3.0"])
async def test_a_job_id_that_is_not_ascii_digits_is_not_found(
    client: Any, new_caller: NewCaller, raw: str
) -> None:
    reader = await new_caller("jobs:read")
    await send(client, "GET", f"/api/v1/jobs/{raw}", reader, 404)


@pytest.mark.parametrize("limit", ["٣", "²", "1" * 5000, "3.0", "-0"])
async def test_an_integer_query_parameter_in_other_digits_is_refused(
    client: Any, new_caller: NewCaller, limit: str
) -> None:
    reader = await new_caller("pools:read")
    refused = await send(client, "GET", POOLS, reader, 422, params={"limit": limit})
    assert pointers(refused) == {"/query/limit"}


@pytest.mark.parametrize(
    ("since", "until"),
    [
        ("0001-01-01T00:00:00Z", "0001-01-02T00:00:00Z"),
        ("9999-12-30T00:00:00Z", "9999-12-31T23:59:59Z"),
        ("0001-01-01T00:00:00+14:00", "2030-01-01T00:00:00Z"),
    ],
)
async def test_a_usage_report_at_the_ends_of_time_is_a_4xx(
    client: Any, new_caller: NewCaller, since: str, until: str
) -> None:
    reader = await new_caller("reports:read")
    for report in ("usage", "logon-phases"):
        response = await client.get(
            f"/api/v1/reports/{report}",
            params={"from": since, "to": until},
            headers=reader.headers,
        )
        assert response.status == 422, await response.text()


async def test_a_body_its_charset_cannot_decode_is_a_400(
    client: Any, new_caller: NewCaller
) -> None:
    manager = await new_caller("schedules:manage")
    body = json.dumps(OFFICE | {"name": "Zürich"}, ensure_ascii=False).encode()
    for charset in ("punycode", "ascii", "utf-16", "rot13", "hex", "base64", "no-such"):
        response = await client.post(
            SCHEDULES,
            data=body,
            headers=manager.headers | {"Content-Type": f"application/json; charset={charset}"},
        )
        assert response.status == 400, (charset, await response.text())


async def test_a_gzip_body_without_its_trailer_is_a_400(
    client: Any, new_caller: NewCaller, pools_runtime: Runtime
) -> None:
    manager = await new_caller("schedules:manage")
    before = await schedule_count(pools_runtime)
    whole = gzip.compress(json.dumps(OFFICE).encode())
    for cut in (whole[:-8], whole[:-4], whole[:-1]):
        response = await client.post(
            SCHEDULES,
            data=cut,
            headers=manager.headers
            | {"Content-Type": "application/json", "Content-Encoding": "gzip"},
        )
        assert response.status == 400, await response.text()
    assert await schedule_count(pools_runtime) == before
