"""An opening and a redemption cost a handful of round trips, one flushed commit each (issue 39).

Counted in PostgreSQL's own statement log (:mod:`tests.support.statement_log`: a private server
logging every statement) for ``POST /api/v1/me/pools/{id}/desktop`` of a signed-in user, after
one opening by another user warmed the api's prepared statements: every statement the api sent
while answering, prepared or executed, and every transaction that wrote. The address of the
desktop was recorded when it became ready, so the opening asks no driver.

A gateway redeems the token the same way, counted for
:meth:`PlatformSessionBroker.redeem` after one redemption by another user warmed the broker's
prepared statements: at 9 a.m. a gateway redeems a thousand tokens at once, and on this
machine a round trip to PostgreSQL costs about a third of a millisecond whatever the statement
(a BEGIN, SELECT 1, COMMIT took 1.0 to 1.4 ms).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tests.support.sessions import (
    Estate,
    audit_actions,
    connected_through,
    open_desktop,
    record_addresses,
)
from tests.support.statement_log import LoggedDatabase

from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker

#: The issue's bound.
MOST_ROUND_TRIPS = 8
#: What a redemption does: begin; redeem the token, share-lock its user's row and read the
#: user's names (one statement); judge the user's access now (his groups, grants, roles and
#: entitlements in one read); lock the desktop with its pool and policy; start the session (its
#: record, the token's and the logon's link to it, the desktop in session and the audit event
#: in one statement); commit. It was 22: the lease asked on every redemption, the pool and the
#: policy read apart, the desktop read again in a savepoint, the session's four writes apart,
#: the display name and the email read apart; then 12, with the access judged in five reads
#: and the names in a sixth; then 7, with the desktop written apart.
MOST_REDEMPTION_ROUND_TRIPS = 6


@pytest.fixture(scope="module")
def module_database_url(logged: LoggedDatabase) -> str:
    """The module's database (the sealing tests' ``isolated_database_url``): the logged one."""
    return logged.url


async def _warm_and_measured(
    client: Any, estate: Callable[..., Awaitable[Estate]], runtime: Runtime, ready: int
) -> tuple[Estate, Estate]:
    """Two signed-in users (principals cached), each entitled to a pool of ``ready`` desktops.

    The desktops' addresses are recorded, as when they became ready.
    """
    warm, measured = await estate(ready=ready), await estate(ready=ready)
    await record_addresses(runtime, warm.desktops + measured.desktops)
    for caller in (warm.user, measured.user):
        assert (await client.get("/api/v1/me", headers=caller.headers)).status == 200
    return warm, measured


async def test_an_opening_is_a_handful_of_round_trips_and_one_flushed_commit(
    client: Any,
    estate: Callable[..., Awaitable[Estate]],
    pools_runtime: Runtime,
    logged: LoggedDatabase,
) -> None:
    warm, measured = await _warm_and_measured(client, estate, pools_runtime, 2)
    await open_desktop(client, warm)

    mark = logged.log.mark()
    opened = await open_desktop(client, measured)
    counted = logged.log.since(mark)

    assert opened["connection"]["token"]
    assert counted.round_trips <= MOST_ROUND_TRIPS, "\n".join(counted.texts())
    assert counted.flushed_commits == 1, "\n".join(counted.texts())
    # Still all of it: the logon's phases, the token, the audit event.
    async with pools_runtime.db.acquire() as connection:
        logon = await connection.fetchrow(
            "SELECT * FROM logons WHERE user_id = $1::uuid", measured.user.id
        )
        tokens = await connection.fetchval(
            "SELECT count(*) FROM connection_tokens WHERE user_id = $1::uuid", measured.user.id
        )
    assert None not in (logon["allocated_at"], logon["guest_ready_at"], logon["token_issued_at"])
    assert str(logon["desktop_id"]) == opened["id"]
    assert tokens == 1
    assert "desktop.allocate" in await audit_actions(pools_runtime, opened["id"])


async def test_a_redemption_is_a_handful_of_round_trips(
    client: Any,
    estate: Callable[..., Awaitable[Estate]],
    broker: PlatformSessionBroker,
    pools_runtime: Runtime,
    logged: LoggedDatabase,
) -> None:
    warm, measured = await _warm_and_measured(client, estate, pools_runtime, 1)
    tokens = [(await open_desktop(client, one))["connection"]["token"] for one in (warm, measured)]
    # No heartbeat yet: a gateway's first comes a third of a lease after it starts. Its first
    # redemption makes sure of the lease; the next ones, once that committed, rely on it as on
    # a heartbeat (every one of the storm's 1,000 redemptions asked for it before).
    mark = logged.log.mark()
    warmed = await broker.redeem(tokens[0], gateway_id="gw-1")
    assert any("gateway_leases" in text for text in logged.log.since(mark).texts())
    await broker.session_connected(warmed.session_id, connection_id="$warm-connection")

    mark = logged.log.mark()
    grant = await broker.redeem(tokens[1], gateway_id="gw-1")
    counted = logged.log.since(mark)

    assert not any("gateway_leases" in text for text in counted.texts())

    assert str(grant.user_id) == measured.user.id
    assert grant.user_display_name
    assert counted.round_trips <= MOST_REDEMPTION_ROUND_TRIPS, "\n".join(counted.texts())
    assert counted.flushed_commits == 1, "\n".join(counted.texts())
    assert "session.start" in await audit_actions(pools_runtime, str(grant.session_id))

    # The daemon answers ready: its connection id and the logon's phase, one statement.
    mark = logged.log.mark()
    await broker.session_connected(grant.session_id, connection_id="$daemon-connection")
    counted = logged.log.since(mark)
    assert counted.round_trips == 1, "\n".join(counted.texts())
    async with pools_runtime.db.acquire() as connection:
        connected = await connection.fetchrow(
            "SELECT s.connection_id, s.connected_at, l.daemon_connected_at "
            "FROM desktop_sessions s JOIN logons l ON l.session_id = s.id WHERE s.id = $1",
            grant.session_id,
        )
    assert connected["connection_id"] == "$daemon-connection"
    assert None not in (connected["connected_at"], connected["daemon_connected_at"])


#: What listing one's pools does: one statement reads the page of entitled pools (the
#: entitlements with them), what opening each gives and the desktops the user holds in them.
#: It was 4: the entitlements were read apart, before the pools; then 3, what opening each
#: gives and the desktops held read apart, after the page.
MOST_LISTING_ROUND_TRIPS = 1


async def test_listing_ones_pools_is_one_round_trip(
    client: Any,
    estate: Callable[..., Awaitable[Estate]],
    pools_runtime: Runtime,
    logged: LoggedDatabase,
) -> None:
    warm, measured = await _warm_and_measured(client, estate, pools_runtime, 2)
    await client.get("/api/v1/me/pools", headers=warm.user.headers)

    mark = logged.log.mark()
    listed = await client.get("/api/v1/me/pools", headers=measured.user.headers)
    counted = logged.log.since(mark)

    assert listed.status == 200
    items = (await listed.json())["items"]
    assert [item["id"] for item in items] == [str(measured.pool.id)]
    assert counted.round_trips <= MOST_LISTING_ROUND_TRIPS, "\n".join(counted.texts())
    assert counted.flushed_commits == 0, "\n".join(counted.texts())


#: Tunnels a gateway opens at once in the next test.
AT_ONCE = 6


async def test_a_gateway_records_the_phases_of_tunnels_opened_at_once_together(
    client: Any,
    estate: Callable[..., Awaitable[Estate]],
    broker: PlatformSessionBroker,
    pools_runtime: Runtime,
    logged: LoggedDatabase,
) -> None:
    """The daemon answered, then drew, for six tunnels at once: a statement for each phase.

    One by one they were a statement and a flushed commit per tunnel and phase (two thousand
    of each at 9 a.m.); now the marks that wait go together (:mod:`.logon_marks`).
    """
    estates = [await estate(ready=1) for _ in range(AT_ONCE + 1)]
    await record_addresses(pools_runtime, [d for one in estates for d in one.desktops])
    await broker.heartbeat("gw-1", {})
    warm, *grants = [(await connected_through(client, broker, one, "gw-1"))[1] for one in estates]
    # The statements prepared (and their types learnt) on the first tunnel.
    await broker.session_connected(warm.session_id, connection_id="$warm")
    await broker.first_frame(warm.session_id)

    mark = logged.log.mark()
    await asyncio.gather(
        *(
            broker.session_connected(g.session_id, connection_id=f"$c-{g.session_id}")
            for g in grants
        )
    )
    connected = logged.log.since(mark)
    mark = logged.log.mark()
    await asyncio.gather(*(broker.first_frame(g.session_id) for g in grants))
    drawn = logged.log.since(mark)

    for counted in (connected, drawn):
        assert counted.round_trips == 1, "\n".join(counted.texts())
        assert counted.flushed_commits == 1, "\n".join(counted.texts())
    async with pools_runtime.db.acquire() as connection:
        rows = await connection.fetch(
            "SELECT s.id, s.connection_id, s.connected_at, l.tunnel_opened_at, "
            "l.daemon_connected_at, l.first_frame_at "
            "FROM desktop_sessions s JOIN logons l ON l.session_id = s.id WHERE s.id = ANY($1)",
            [g.session_id for g in grants],
        )
    assert len(rows) == AT_ONCE
    for row in rows:
        assert row["connection_id"] == f"$c-{row['id']}"
        # Each phase when it was reached, in order.
        assert row["tunnel_opened_at"] <= row["daemon_connected_at"] <= row["first_frame_at"]
        assert row["connected_at"] is not None
