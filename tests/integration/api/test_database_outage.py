"""The database connections are cut under concurrent requests: 503 with Retry-After, never 500.

A killer task terminates every connection of the API's pool (``pg_terminate_backend``, as an
operator or a failover would) again and again while clients read and write through the API. No
request may be answered 500; one that loses its connection is answered 503 problem+json with
``Retry-After``; and once the cutting stops, every request succeeds again.

The failures seen under this test: ``ConnectionDoesNotExistError`` (cut in the middle of a
query), ``InterfaceError`` (a transaction's rollback on a closed connection) and
``InternalClientError: cannot switch to state 12; another operation (2) is in progress``. The
last one is not two operations sharing a connection: state 2 is asyncpg's "consume until sync"
state, which an *idle* pooled connection enters when the server's FATAL ErrorResponse
(``terminating connection due to administrator command``) arrives before the socket's end; a
request that acquires it in that window fails on its first query, and the pool then discards
it. Every one of them is an outage, answered 503.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest

from deskpool.testing.pytest_plugin import served

ADMIN = "outage-admin"
PROBLEM = "application/problem+json"
CLIENTS = 16
ROUNDS_OF_CUTS = 30
#: Requests answered between two rounds of cuts.
PER_ROUND = CLIENTS // 2


@dataclass
class Outcomes:
    """What the clients were answered."""

    statuses: Counter[int] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)


@pytest.fixture
async def api(
    secure_environ: dict[str, str], identity_provider: Any, aiohttp_client: Any
) -> AsyncIterator[tuple[Any, dict[str, str], str]]:
    environ = secure_environ | {
        "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": ADMIN,
        "API_RATE_LIMIT_PER_MINUTE": "0",
        "DATABASE_MAX_CONNS": "4",
        "LOG_LEVEL": "warn",
    }
    async with served(environ, aiohttp_client) as (_, client):
        token = identity_provider.issue_token(ADMIN, expires_in=3600)
        headers = {"Authorization": f"Bearer {token}"}
        assert (await client.get("/api/v1/me", headers=headers)).status == 200
        yield client, headers, environ["DATABASE_URL"]


async def one_request(client: Any, headers: dict[str, str], number: int) -> Any:
    kind = number % 5
    if kind == 0:
        return await client.post(
            "/api/v1/groups",
            json={"key": f"outage-{number}", "name": f"Outage {number}"},
            headers=headers,
        )
    if kind == 1:
        return await client.get("/api/v1/groups?limit=20", headers=headers)
    if kind == 2:
        return await client.get("/api/v1/audit-events?limit=20", headers=headers)
    if kind == 3:
        return await client.get("/api/v1/jobs?limit=20", headers=headers)
    return await client.get("/api/v1/users?limit=20", headers=headers)


async def check(response: Any, outcomes: Outcomes) -> None:
    text = await response.text()
    outcomes.statuses[response.status] += 1
    if response.status >= 500:
        ok = (
            response.status == 503
            and response.content_type == PROBLEM
            and response.headers.get("Retry-After", "").isdigit()
            and json.loads(text)["code"] == "dependency_unavailable"
        )
        if not ok:
            outcomes.problems.append(f"{response.status} {response.headers} {text[:300]}")


async def test_cut_connections_give_503_never_500(
    api: tuple[Any, dict[str, str], str], caplog: pytest.LogCaptureFixture
) -> None:
    client, headers, database_url = api
    outcomes = Outcomes()
    numbers = itertools.count()
    stop = asyncio.Event()

    answered = asyncio.Condition()

    async def hammer() -> None:
        while not stop.is_set():
            await check(await one_request(client, headers, next(numbers)), outcomes)
            async with answered:
                answered.notify_all()

    async def answers(count: int) -> None:
        """Wait until ``count`` more requests have been answered."""
        target = outcomes.statuses.total() + count
        async with answered:
            await answered.wait_for(lambda: outcomes.statuses.total() >= target)

    killer = await asyncpg.connect(database_url)
    cut = 0
    try:
        clients = [asyncio.create_task(hammer()) for _ in range(CLIENTS)]
        for _ in range(ROUNDS_OF_CUTS):
            cut += len(
                await killer.fetch(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND backend_type = 'client backend'"
                )
            )
            # Let requests get new connections and get cut again in the middle of their work.
            await answers(PER_ROUND)
        stop.set()
        await asyncio.gather(*clients)
    finally:
        await killer.close()

    assert cut >= ROUNDS_OF_CUTS, "the killer cut too few connections to prove anything"
    assert outcomes.statuses[500] == 0, outcomes.problems
    assert outcomes.problems == []
    assert outcomes.statuses[503] > 0, outcomes.statuses
    assert outcomes.statuses.total() >= ROUNDS_OF_CUTS * PER_ROUND
    # No traceback was logged for a lost connection: it is an outage, not a bug.
    assert [r for r in caplog.records if r.exc_info] == []

    # Once the cutting stops, every request succeeds again.
    after = Outcomes()
    for number in range(10_000_000, 10_000_020):
        await check(await one_request(client, headers, number), after)
    assert set(after.statuses) <= {200, 201}, (after.statuses, after.problems)
