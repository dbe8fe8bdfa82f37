"""``GET /api/v1/events`` follows what its subscriber holds now, and is bounded per user.

A permission taken away stops the events it allowed from the next event on; a disabled user's
stream closes; one user holds at most ``API_EVENT_STREAMS_PER_USER`` streams (429 past it); a
``Last-Event-ID`` Redis would refuse is a 400 problem.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from tests.integration.live.test_event_stream import read_events
from tests.support.pools import (
    pool_model,
)

from deskpool.live import bus
from deskpool.live.model import LiveEvent
from deskpool.pools import store as store_pools
from deskpool.testing.pytest_plugin import served

ADMIN = "streams-admin"
Bearer = Callable[..., dict[str, str]]


@pytest.fixture
async def api(secure_environ: dict[str, str], aiohttp_client: Any) -> AsyncIterator[Any]:
    """An API client whose users may hold two streams each; ``ADMIN`` is a bootstrap admin."""
    environ = {
        **secure_environ,
        "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": ADMIN,
        "API_EVENT_STREAMS_PER_USER": "2",
    }
    async with served(environ, aiohttp_client) as (runtime, client):
        client.runtime = runtime
        yield client


async def signed_in(api: Any, headers: dict[str, str]) -> str:
    """The id of the user of ``headers`` (signed in by the call)."""
    me = await api.get("/api/v1/me", headers=headers)
    assert me.status == 200, await me.text()
    return str((await me.json())["id"])


async def publish(api: Any, event: LiveEvent) -> None:
    await bus.publish(api.runtime.kv, api.runtime.config["KVSTORE_KEY_PREFIX"], event)


async def test_a_permission_taken_away_stops_its_events_at_once(api: Any, bearer: Bearer) -> None:
    admin = bearer(ADMIN)
    reader = bearer("stream-reader")
    reader_id = await signed_in(api, reader)
    granted = await api.post(
        "/api/v1/grants",
        json={"subject_type": "user", "subject_id": reader_id, "permission": "pools:read"},
        headers=admin,
    )
    assert granted.status == 201, await granted.text()
    grant_id = (await granted.json())["id"]
    stream = await api.get("/api/v1/events", headers=reader)
    assert stream.status == 200
    await publish(api, LiveEvent("pool.changed", "p-before"))
    [seen] = await read_events(stream, 1)
    assert seen["data"]["id"] == "p-before"

    removed = await api.delete(f"/api/v1/grants/{grant_id}", headers=admin)
    assert removed.status == 204, await removed.text()
    # Published right after the change: the pool's event is no longer the reader's to see,
    # the event of his own desktop still is.
    await publish(api, LiveEvent("pool.changed", "p-after"))
    await publish(api, LiveEvent("desktop.state", "d-mine", {"state": "ready"}, owner=reader_id))
    [next_one] = await read_events(stream, 1)
    assert next_one["data"]["id"] == "d-mine"
    stream.close()


async def test_a_disabled_users_stream_closes(api: Any, bearer: Bearer) -> None:
    admin = bearer(ADMIN)
    reader = bearer("stream-disabled")
    reader_id = await signed_in(api, reader)
    stream = await api.get("/api/v1/events", headers=reader)
    assert stream.status == 200
    await stream.content.readuntil(b"\n\n")  # the stream's opening comment
    disabled = await api.patch(f"/api/v1/users/{reader_id}", json={"disabled": True}, headers=admin)
    assert disabled.status == 200, await disabled.text()
    # No event comes: the stream ends (its last words a comment), well before a keep-alive.
    rest = await asyncio.wait_for(stream.content.read(), 10)
    assert b"data:" not in rest
    assert rest.endswith(b": account disabled\n\n")
    again = await api.get("/api/v1/events", headers=reader)
    assert again.status == 403


async def test_one_user_holds_at_most_the_configured_streams(api: Any, bearer: Bearer) -> None:
    greedy = bearer("stream-greedy")
    held = [await api.get("/api/v1/events", headers=greedy) for _ in range(2)]
    assert [stream.status for stream in held] == [200, 200]
    refused = await api.get("/api/v1/events", headers=greedy)
    assert refused.status == 429
    assert refused.headers["Content-Type"].startswith("application/problem+json")
    assert int(refused.headers["Retry-After"]) > 0
    assert (await refused.json())["code"] == "too_many_streams"
    # Another user is not held back by the first one's streams.
    other = await api.get("/api/v1/events", headers=bearer("stream-other"))
    assert other.status == 200
    for stream in [*held, other]:
        stream.close()


@pytest.mark.parametrize(
    "last_event_id",
    [
        "18446744073709551616-0",  # past 2^64-1
        "1-18446744073709551616",
        "18446744073709551615-18446744073709551615",  # nothing can follow it
        "\uff11\uff12\uff13-0",  # fullwidth digits: int() takes them, Redis does not
        "\u0661\u0662-0",  # Arabic-Indic digits
        "1_000-0",
        "+5-0",
        "5--1",
        "1-2-3",
        "-",
        "0x10-0",
    ],
)
async def test_a_last_event_id_redis_would_refuse_is_a_400_problem(
    api: Any, bearer: Bearer, last_event_id: str
) -> None:
    answered = await api.get(
        "/api/v1/events", headers={**bearer(ADMIN), "Last-Event-ID": last_event_id}
    )
    assert answered.status == 400, await answered.text()
    assert answered.headers["Content-Type"].startswith("application/problem+json")
    assert "Traceback" not in await answered.text()


async def test_the_largest_id_redis_accepts_resumes(api: Any, bearer: Bearer) -> None:
    stream = await api.get(
        "/api/v1/events", headers={**bearer(ADMIN), "Last-Event-ID": "18446744073709551615-0"}
    )
    assert stream.status == 200
    stream.close()


async def test_a_user_entitled_to_a_pool_hears_its_availability_change_and_nothing_more(
    api: Any, bearer: Bearer
) -> None:
    admin = bearer(ADMIN)
    user = bearer("stream-entitled")
    user_id = await signed_in(api, user)
    # Stored directly: the session's database may hold as many pools as the license allows.
    async with api.runtime.db.acquire() as connection:
        cluster_id = await connection.fetchval(
            "INSERT INTO clusters (name, driver, endpoint) "
            "VALUES ($1, 'simulator', 'simulator://stream') RETURNING id",
            f"stream-{secrets.token_hex(4)}",
        )
        pools = [
            str((await store_pools.create_pool(connection, pool_model(cluster_id))).pool.id)
            for _ in range(2)
        ]
    try:
        entitled, other = pools
        stream = await api.get("/api/v1/events", headers=user)
        assert stream.status == 200
        # Granted while the stream is open: the grant's pool.changed reads entitlements again
        # (and is itself hinted: the pool changed for him).
        granted = await api.post(
            f"/api/v1/pools/{entitled}/entitlements",
            json={"subject_type": "user", "subject_id": user_id},
            headers=admin,
        )
        assert granted.status == 201, await granted.text()

        someone = "00000000-0000-0000-0000-00000000050e"
        details = {"name": "stream-pool-01", "state": "ready", "in_session": False}
        await publish(
            api, LiveEvent("desktop.state", "d-other-pool", {"pool_id": other, **details}, someone)
        )
        await publish(
            api, LiveEvent("desktop.state", "d-theirs", {"pool_id": entitled, **details}, someone)
        )
        await publish(
            api, LiveEvent("desktop.state", "d-mine", {"pool_id": other, **details}, user_id)
        )
        granted_hint, hint, mine = await read_events(stream, 3)
        expected = {"type": "pool.availability", "id": entitled, "pool_id": entitled}
        assert granted_hint["data"] == expected
        # The pool's id only: not whose desktop, which one, or its state; nothing of the pool
        # he is not entitled to (his own desktop's event comes next).
        assert (hint["event"], hint["data"]) == ("pool.availability", expected)
        assert mine["data"]["id"] == "d-mine"
        stream.close()
    finally:  # the session's other tests count pools against the license
        async with api.runtime.db.acquire() as connection:
            await connection.execute("DELETE FROM pools WHERE id = ANY($1::uuid[])", pools)
            await connection.execute("DELETE FROM clusters WHERE id = $1", cluster_id)
