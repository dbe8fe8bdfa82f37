"""The platform session broker: tokens redeemed once, session records, leases, disconnects.

Each test opens a desktop through the REST API (a desktop whose VM exists on a simulated
cluster), then plays the gateway's part against the real broker over PostgreSQL and Redis.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tests.support.pools import TUNNEL_URL
from tests.support.sessions import (
    CONSOLE_HOST,
    VNC_PORT,
    Estate,
    audit_actions,
    connected_through,
    desktop_row,
    details,
    open_desktop,
)

from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker, end_lost_gateways
from deskpool.sessions.model import new_token
from deskpool.sessions.tunnel import SessionEndReason, TokenRejected, TunnelCounters

MakeEstate = Callable[..., Awaitable[Estate]]


async def test_a_token_opens_the_server_resolved_desktop_once(
    client: Any,
    estate: MakeEstate,
    broker: PlatformSessionBroker,
    pools_runtime: Runtime,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    place = await estate()
    opened = await open_desktop(client, place)
    connection = opened["connection"]
    assert connection["url"] == TUNNEL_URL
    assert connection["protocol"] == "vnc"

    grant = await broker.redeem(connection["token"], gateway_id="gw-1")
    assert str(grant.user_id) == place.user.id
    assert str(grant.desktop_id) == opened["id"]
    assert grant.pool_id == place.pool.id
    assert grant.desktop_name == opened["name"]
    assert (grant.target.protocol, grant.target.hostname, grant.target.port) == (
        "vnc",
        CONSOLE_HOST,
        VNC_PORT,
    )
    assert not grant.read_only
    assert (await desktop_row(pools_runtime, opened["id"]))["in_session"] is True

    with pytest.raises(TokenRejected) as replayed:
        await broker.redeem(connection["token"], gateway_id="gw-2")
    assert replayed.value.reason == "used"

    # The token is stored only as a hash, its target sealed; it reaches no log.
    async with pools_runtime.db.acquire() as db:
        stored = await db.fetchrow(
            "SELECT * FROM connection_tokens WHERE desktop_id = $1::uuid", opened["id"]
        )
    assert connection["token"].encode() not in bytes(stored["token_key"])
    assert CONSOLE_HOST.encode() not in bytes(stored["sealed_target"])
    assert stored["session_id"] == grant.session_id
    assert connection["token"] not in caplog.text

    await broker.session_connected(grant.session_id, connection_id="$conn-1")
    await broker.heartbeat("gw-1", {grant.session_id: TunnelCounters(1200, 560_000, 0.0)})
    session = await (
        await client.get(f"/api/v1/sessions/{grant.session_id}", headers=place.admin.headers)
    ).json()
    assert session["state"] == "open"
    assert session["gateway_id"] == "gw-1"
    assert session["connected_at"] is not None
    assert (session["bytes_to_desktop"], session["bytes_to_browser"]) == (1200, 560_000)

    await broker.session_ended(
        grant.session_id, SessionEndReason.CLIENT_CLOSED, TunnelCounters(1500, 600_000, 0.0)
    )
    await broker.session_ended(  # idempotent
        grant.session_id, SessionEndReason.DAEMON_ERROR, TunnelCounters(0, 0, 0.0)
    )
    ended = await (
        await client.get(f"/api/v1/sessions/{grant.session_id}", headers=place.admin.headers)
    ).json()
    assert ended["state"] == "ended"
    assert ended["end_reason"] == "client_closed"
    assert (ended["bytes_to_desktop"], ended["bytes_to_browser"]) == (1500, 600_000)
    desktop = await desktop_row(pools_runtime, opened["id"])
    # The default policy waits for the user to come back: the desktop stays theirs.
    assert (desktop["in_session"], desktop["state"]) == (False, "in_use")
    assert str(desktop["assigned_user"]) == place.user.id
    assert await audit_actions(pools_runtime, str(grant.session_id)) == [
        "session.start",
        "session.end",
    ]


async def test_forged_expired_and_foreign_tokens_are_refused(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker, pools_runtime: Runtime
) -> None:
    place = await estate(ready=2)
    for forged in (new_token(), "short", "x" * 500, "not a token at all!"):
        with pytest.raises(TokenRejected) as refused:
            await broker.redeem(forged, gateway_id="gw-1")
        assert refused.value.reason == "unknown"

    token = (await open_desktop(client, place))["connection"]["token"]
    async with pools_runtime.db.acquire() as db:
        await db.execute("UPDATE connection_tokens SET expires_at = now() - interval '1 second'")
    with pytest.raises(TokenRejected) as expired:
        await broker.redeem(token, gateway_id="gw-1")
    assert expired.value.reason == "expired"

    # A token is bound to its user's desktop: another user cannot reconnect to it.
    opened = await open_desktop(client, place)
    stranger = place.admin
    response = await client.post(
        f"/api/v1/me/desktops/{opened['id']}/connection", headers=stranger.headers
    )
    assert response.status == 404
    mine = await client.post(
        f"/api/v1/me/desktops/{opened['id']}/connection", headers=place.user.headers
    )
    assert mine.status == 200
    grant = await broker.redeem((await mine.json())["connection"]["token"], gateway_id="gw-1")
    assert str(grant.user_id) == place.user.id


@pytest.mark.parametrize("change", ["deleted", "reassigned", "logged_off"])
async def test_a_token_for_a_desktop_gone_since_opens_nothing(
    change: str,
    client: Any,
    estate: MakeEstate,
    broker: PlatformSessionBroker,
    pools_runtime: Runtime,
    new_caller: Any,
) -> None:
    place = await estate()
    opened = await open_desktop(client, place)
    token = opened["connection"]["token"]
    desktop_id = uuid.UUID(opened["id"])
    async with pools_runtime.db.acquire() as db:
        if change == "deleted":
            await db.execute("DELETE FROM desktops WHERE id = $1", desktop_id)
        elif change == "reassigned":
            other = await new_caller()
            await db.execute(
                "UPDATE desktops SET assigned_user = $2::uuid WHERE id = $1", desktop_id, other.id
            )
        else:
            await db.execute(
                "UPDATE desktops SET state = 'refreshing', assigned_user = NULL WHERE id = $1",
                desktop_id,
            )
    with pytest.raises(TokenRejected) as gone:
        await broker.redeem(token, gateway_id="gw-1")
    assert gone.value.reason == "desktop_gone"
    with pytest.raises(TokenRejected) as again:  # the token was used up all the same
        await broker.redeem(token, gateway_id="gw-1")
    assert again.value.reason == "used"
    async with pools_runtime.db.acquire() as db:
        sessions = "SELECT count(*) FROM desktop_sessions WHERE desktop_id = $1"
        assert await db.fetchval(sessions, desktop_id) == 0


async def test_concurrent_redemptions_open_one_session(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate()
    opened = await open_desktop(client, place)
    token = opened["connection"]["token"]
    brokers = [PlatformSessionBroker(pools_runtime) for _ in range(6)]

    async def redeem(index: int) -> str:
        try:
            await brokers[index].redeem(token, gateway_id=f"gw-{index}")
        except TokenRejected as error:
            return error.reason
        return "granted"

    outcomes = await asyncio.gather(*(redeem(i) for i in range(len(brokers))))
    assert sorted(outcomes) == ["granted"] + ["used"] * (len(brokers) - 1)
    async with pools_runtime.db.acquire() as db:
        sessions = "SELECT count(*) FROM desktop_sessions WHERE desktop_id = $1::uuid"
        assert await db.fetchval(sessions, opened["id"]) == 1


async def test_a_lost_gateway_s_sessions_end_and_the_desktop_stays_the_user_s(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate()
    opened = await open_desktop(client, place)
    doomed = PlatformSessionBroker(pools_runtime, lease=30.0)
    survivor = PlatformSessionBroker(pools_runtime, lease=30.0)
    grant = await doomed.redeem(opened["connection"]["token"], gateway_id="gw-doomed")
    await survivor.heartbeat("gw-survivor", {})
    assert await end_lost_gateways(pools_runtime) == 0  # the lease still runs

    async with pools_runtime.db.acquire() as db:  # gw-doomed stops heartbeating: time passes
        await db.execute(
            "UPDATE gateway_leases SET lease_expires_at = now() - interval '1 second' "
            "WHERE gateway_id = 'gw-doomed'"
        )
    await survivor.heartbeat("gw-survivor", {})  # any other gateway's heartbeat notices
    session = await (
        await client.get(f"/api/v1/sessions/{grant.session_id}", headers=place.admin.headers)
    ).json()
    assert (session["state"], session["end_reason"]) == ("ended", "gateway_lost")
    desktop = await desktop_row(pools_runtime, opened["id"])
    assert (desktop["in_session"], desktop["state"]) == (False, "in_use")
    assert str(desktop["assigned_user"]) == place.user.id
    async with pools_runtime.db.acquire() as db:
        leases = await db.fetch("SELECT gateway_id FROM gateway_leases")
    assert {"gw-survivor"} <= {row["gateway_id"] for row in leases}
    assert "gw-doomed" not in {row["gateway_id"] for row in leases}
    # The doomed gateway's late report changes nothing.
    await doomed.session_ended(grant.session_id, SessionEndReason.CLIENT_CLOSED, TunnelCounters())
    session = await (
        await client.get(f"/api/v1/sessions/{grant.session_id}", headers=place.admin.headers)
    ).json()
    assert session["end_reason"] == "gateway_lost"
    # The user reconnects to the same desktop.
    again = await open_desktop(client, place)
    assert again["id"] == opened["id"]


async def test_an_administrator_s_disconnect_reaches_the_gateway_holding_the_session(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker, pools_runtime: Runtime
) -> None:
    place = await estate()
    _, grant = await connected_through(client, broker, place, "gw-a")
    requests = broker.disconnect_requests("gw-a")
    first = asyncio.ensure_future(anext(requests))
    await asyncio.sleep(0)  # let the subscription start before the request
    url = f"/api/v1/sessions/{grant.session_id}/disconnect"

    assert (await client.post(url, headers=place.user.headers)).status == 403
    answered = await client.post(url, headers=place.admin.headers)
    assert answered.status == 202
    assert (await answered.json())["disconnect_requested_at"] is not None
    assert (await asyncio.wait_for(first, 10)).session_id == grant.session_id
    await requests.aclose()

    await broker.session_ended(
        grant.session_id, SessionEndReason.ADMIN_DISCONNECT, TunnelCounters()
    )
    again = await client.post(url, headers=place.admin.headers)
    assert again.status == 409
    assert (await again.json())["code"] == "session_not_open"
    assert (
        await client.post(
            f"/api/v1/sessions/{uuid.uuid4()}/disconnect", headers=place.admin.headers
        )
    ).status == 404
    async with pools_runtime.db.acquire() as db:
        rows = await db.fetch(
            "SELECT action, actor, details FROM audit_events WHERE resource_id = $1 ORDER BY id",
            str(grant.session_id),
        )
    assert [row["action"] for row in rows] == ["session.start", "session.disconnect", "session.end"]
    assert rows[1]["actor"] == place.admin.id
    assert details(rows[2]["details"])["reason"] == "admin_disconnect"


async def test_a_disconnect_requested_while_no_one_listened_is_delivered_later(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker
) -> None:
    place = await estate()
    grant = await broker.redeem(
        (await open_desktop(client, place))["connection"]["token"], gateway_id="gw-b"
    )
    response = await client.post(
        f"/api/v1/sessions/{grant.session_id}/disconnect", headers=place.admin.headers
    )
    assert response.status == 202
    requests = broker.disconnect_requests("gw-b")
    assert (await asyncio.wait_for(anext(requests), 10)).session_id == grant.session_id
    await requests.aclose()
