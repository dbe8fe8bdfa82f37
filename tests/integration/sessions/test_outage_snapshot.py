"""The outage snapshot follows the database: what it hands out and what the API hands out.

A pool with two ready desktops (VMs on a simulated cluster) and an entitled user: the worker's
refresh puts both in the snapshot's ready desktops, with their targets sealed. Opening the
pool through the API (the database answering) takes the desktop out of them in the allocating
transaction, and it stays out even when a refresh that read the database before writes again.
A refresh is not undone by openings meanwhile: at 9 a.m. a desktop is withheld every few
milliseconds, and a refresh that gave up whenever one was found itself read the database again
every half second for as long as the storm lasted, and installed nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest
import redis.asyncio as redis
from tests.support.sessions import CONSOLE_HOST, Estate, open_desktop

from deskpool.outage_brokering import service as brokering
from deskpool.outage_brokering.claims import note_handed_out, withhold
from deskpool.outage_brokering.model import SnapshotDesktop, held_key
from deskpool.outage_brokering.snapshot import keys_of, open_target, refresh_snapshot
from deskpool.runtime import Runtime
from deskpool.sessions import opening

MakeEstate = Callable[..., Awaitable[Estate]]


async def _noted_nothing(*args: Any) -> None:
    """What noting a desktop after the commit does when left out."""


async def test_a_desktop_handed_out_through_the_database_leaves_the_snapshot_at_once(
    client: Any, estate: MakeEstate, pools_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    place = await estate(ready=2)
    kv, keys = pools_runtime.kv, keys_of(pools_runtime)
    assert await refresh_snapshot(pools_runtime)
    ready = {member.decode() for member in await kv.smembers(keys.ready(place.pool.id))}
    assert ready == {str(desktop) for desktop in place.desktops}
    raw = await kv.hget(keys.desktops, str(place.desktops[0]))
    entry = SnapshotDesktop.from_json(raw)
    # The target is sealed in Redis; it opens with the master key only.
    assert CONSOLE_HOST not in entry.sealed_target
    assert open_target(pools_runtime, entry).hostname == CONSOLE_HOST

    # Before the allocation commits (what is noted after the commit is left out here).
    monkeypatch.setattr(brokering, "_note", _noted_nothing)
    opened = await open_desktop(client, place)
    ready_now = {member.decode() for member in await kv.smembers(keys.ready(place.pool.id))}
    assert ready_now == ready - {opened["id"]}
    assert await kv.hget(keys.holders, opened["id"]) is None
    assert await kv.hexists(keys.taken, opened["id"])
    # A refresh that read the database before the allocation would put it back: it does not.
    await kv.sadd(keys.ready(place.pool.id), opened["id"])
    assert uuid.UUID(opened["id"]) in place.desktops
    assert await refresh_snapshot(pools_runtime)
    ready_after = {member.decode() for member in await kv.smembers(keys.ready(place.pool.id))}
    assert opened["id"] not in ready_after
    assert (await kv.hget(keys.holders, opened["id"])).decode() == place.user.id


@pytest.mark.parametrize("act", ["withheld", "handed_out"])
async def test_what_an_opening_did_while_a_refresh_wrote_is_kept_and_the_refresh_installs(
    act: str, estate: MakeEstate, pools_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    place = await estate(ready=3)
    kv, keys = pools_runtime.kv, keys_of(pools_runtime)
    opened, other = place.desktops[0], place.desktops[1]

    async def opening_meanwhile() -> None:
        # Its allocating transaction has not committed (withheld) or has, after the
        # refresh read the database (handed out): the database the refresh read shows the
        # desktop ready either way.
        if act == "withheld":
            await withhold(kv, keys, opened, place.pool.id)
        else:
            await note_handed_out(
                kv, keys, desktop_id=opened, pool_id=place.pool.id, user_id=place.user.id
            )

    multi = redis.client.Pipeline.multi
    original_execute = redis.client.Pipeline.execute
    meanwhile: list[asyncio.Future[None]] = []

    def between_read_and_write(pipe: redis.client.Pipeline) -> None:
        meanwhile.append(asyncio.ensure_future(opening_meanwhile()))
        multi(pipe)

    async def execute_after_the_opening(pipe: redis.client.Pipeline, **kw: Any) -> Any:
        await asyncio.gather(*meanwhile)
        return await original_execute(pipe, **kw)

    monkeypatch.setattr(redis.client.Pipeline, "multi", between_read_and_write)
    monkeypatch.setattr(redis.client.Pipeline, "execute", execute_after_the_opening)
    assert await refresh_snapshot(pools_runtime)
    assert len(meanwhile) == 1
    ready = {member.decode() for member in await kv.smembers(keys.ready(place.pool.id))}
    assert ready == {str(desktop) for desktop in place.desktops} - {str(opened)}
    assert str(other) in ready
    holder = await kv.hget(keys.holders, str(opened))
    counted = await kv.sismember(keys.counted, str(opened))
    if act == "withheld":
        assert (holder, counted) == (None, 0)
    else:
        assert (holder, counted) == (place.user.id.encode(), 1)
        held = await kv.hget(keys.held, held_key(place.user.id, place.pool.id))
        assert held == str(opened).encode()


async def test_a_pool_the_snapshot_does_not_know_is_a_503_while_the_database_is_away(
    client: Any, estate: MakeEstate, pools_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a 404: the pool may be newer than the snapshot; the database alone could say."""
    place = await estate(ready=1)

    async def database_away(*args: Any) -> None:
        raise asyncpg.exceptions.CannotConnectNowError("the database system is shutting down")

    monkeypatch.setattr(opening, "open_pool_desktop", database_away)
    response = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    body = await response.json()
    assert response.status == 503, body
    assert response.headers["Retry-After"] == "2"
    assert "snapshot" in body["detail"]

    # Once the snapshot holds the pool, the entitled user is served from it.
    assert await refresh_snapshot(pools_runtime)
    response = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    assert response.status == 200, await response.json()


async def test_a_statement_that_timed_out_is_a_503_not_an_opening_from_the_snapshot(
    client: Any, estate: MakeEstate, pools_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy database is still the truth: it may have committed the opening that timed out."""
    place = await estate(ready=1)
    assert await refresh_snapshot(pools_runtime)

    async def database_slow(*args: Any) -> None:
        raise asyncpg.exceptions.QueryCanceledError("canceling statement due to statement timeout")

    monkeypatch.setattr(opening, "open_pool_desktop", database_slow)
    response = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    body = await response.json()
    assert response.status == 503, body
    assert response.headers["Retry-After"].isdigit()
    kv, keys = pools_runtime.kv, keys_of(pools_runtime)
    assert await kv.hget(keys.holders, str(place.desktops[0])) is None  # nothing claimed
