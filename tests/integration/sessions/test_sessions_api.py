"""The sessions API: lists and filters, the caller's own, reconnecting, shadowing, configuration."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tests.support.sessions import (
    Estate,
    connected_through,
    desktop_row,
    open_desktop,
)

from deskpool.api.pagination import encode_cursor
from deskpool.pools.model import PoolKind
from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker
from deskpool.sessions.tunnel import SessionEndReason, TokenRejected, TunnelCounters
from deskpool.testing.pytest_plugin import served

MakeEstate = Callable[..., Awaitable[Estate]]


async def test_sessions_are_listed_with_filters_and_each_user_sees_their_own(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker
) -> None:
    place = await estate(ready=2)
    first = await broker.redeem(
        (await open_desktop(client, place))["connection"]["token"], gateway_id="gw-l"
    )
    await broker.session_ended(first.session_id, SessionEndReason.CLIENT_CLOSED, TunnelCounters())
    second = await broker.redeem(
        (await open_desktop(client, place))["connection"]["token"], gateway_id="gw-l"
    )
    admin = place.admin.headers

    def ids(page: dict[str, Any]) -> list[str]:
        return [item["id"] for item in page["items"]]

    async def listed(url: str, headers: dict[str, str]) -> dict[str, Any]:
        response = await client.get(url, headers=headers)
        assert response.status == 200, await response.text()
        return dict(await response.json())

    pool_filter = f"/api/v1/sessions?pool_id={place.pool.id}"
    assert ids(await listed(pool_filter, admin)) == [str(second.session_id), str(first.session_id)]
    assert ids(await listed(f"{pool_filter}&state=open", admin)) == [str(second.session_id)]
    assert ids(await listed(f"{pool_filter}&state=ended", admin)) == [str(first.session_id)]
    by_user = await listed(f"/api/v1/sessions?user_id={place.user.id}&limit=1", admin)
    assert ids(by_user) == [str(second.session_id)]
    rest = await listed(f"/api/v1/sessions?user_id={place.user.id}&cursor={by_user['next']}", admin)
    assert ids(rest) == [str(first.session_id)]
    by_desktop = await listed(f"/api/v1/sessions?desktop_id={first.desktop_id}", admin)
    assert ids(by_desktop) == [str(second.session_id), str(first.session_id)]

    assert (await client.get("/api/v1/sessions", headers=place.user.headers)).status == 403
    mine = await listed("/api/v1/me/sessions?state=open", place.user.headers)
    assert ids(mine) == [str(second.session_id)]
    assert mine["items"][0]["state"] == "open"
    assert ids(await listed("/api/v1/me/sessions", admin)) == []
    assert (await client.get(f"/api/v1/sessions/{uuid.uuid4()}", headers=admin)).status == 404
    assert (await client.get("/api/v1/sessions/nope", headers=admin)).status == 404
    forged = encode_cursor(["yesterday", "nobody"])
    assert (await client.get(f"/api/v1/sessions?cursor={forged}", headers=admin)).status == 400


async def test_an_administrator_watches_a_live_session_read_only(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker, pools_runtime: Runtime
) -> None:
    place = await estate()
    opened, grant = await connected_through(client, broker, place, "gw-s")
    url = f"/api/v1/sessions/{grant.session_id}/shadow"
    early = await client.post(url, headers=place.admin.headers)
    assert early.status == 409  # the daemon has not finished the handshake
    await broker.session_connected(grant.session_id, connection_id="$0f5e-live")

    assert (await client.post(url, headers=place.user.headers)).status == 403
    response = await client.post(url, headers=place.admin.headers)
    assert response.status == 200, await response.text()
    body = await response.json()
    assert body["session"]["id"] == str(grant.session_id)
    viewer = await broker.redeem(body["connection"]["token"], gateway_id="gw-t")
    assert viewer.read_only
    assert viewer.join_connection_id == "$0f5e-live"
    assert str(viewer.user_id) == place.admin.id
    assert viewer.desktop_id == grant.desktop_id

    # The viewer leaving changes nothing for the user; the user leaving closes the view.
    watching = broker.disconnect_requests("gw-t")
    await broker.session_ended(grant.session_id, SessionEndReason.CLIENT_CLOSED, TunnelCounters())
    assert (await anext(watching)).session_id == viewer.session_id
    await watching.aclose()
    await broker.session_ended(
        viewer.session_id, SessionEndReason.ADMIN_DISCONNECT, TunnelCounters()
    )
    ended = await (
        await client.get(f"/api/v1/sessions/{viewer.session_id}", headers=place.admin.headers)
    ).json()
    assert (ended["read_only"], ended["shadow_of"], ended["end_reason"]) == (
        True,
        str(grant.session_id),
        "desktop_closed",
    )
    assert (await client.post(url, headers=place.admin.headers)).status == 409
    desktop = await desktop_row(pools_runtime, opened["id"])
    assert desktop["in_session"] is False


async def test_reconnecting_gives_a_new_token_to_the_same_desktop(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker, pools_runtime: Runtime
) -> None:
    place = await estate(ready=2, kind=PoolKind.PERSISTENT)
    opened = await open_desktop(client, place)
    url = f"/api/v1/me/desktops/{opened['id']}/connection"
    again = await client.post(url, headers=place.user.headers)
    assert again.status == 200
    body = await again.json()
    assert body["id"] == opened["id"]
    assert body["connection"]["token"] != opened["connection"]["token"]
    # Logged off from a persistent desktop: reconnecting hands it back first.
    async with pools_runtime.db.acquire() as db:
        await db.execute("UPDATE desktops SET state = 'ready' WHERE id = $1::uuid", opened["id"])
    back = await client.post(url, headers=place.user.headers)
    assert back.status == 200
    assert (await desktop_row(pools_runtime, opened["id"]))["state"] == "in_use"
    grant = await broker.redeem((await back.json())["connection"]["token"], gateway_id="gw-r")
    assert str(grant.desktop_id) == opened["id"]
    async with pools_runtime.db.acquire() as db:
        await db.execute(
            "UPDATE desktops SET state = 'refreshing' WHERE id = $1::uuid", opened["id"]
        )
    # Being rebuilt: it is on its way to ready, so the user waits for it (start on connect).
    waiting = await client.post(url, headers=place.user.headers)
    assert waiting.status == 202
    assert (await waiting.json())["id"] == opened["id"]
    async with pools_runtime.db.acquire() as db:
        await db.execute("UPDATE desktops SET state = 'failed' WHERE id = $1::uuid", opened["id"])
    not_ready = await client.post(url, headers=place.user.headers)
    assert not_ready.status == 503
    assert (await not_ready.json())["code"] == "desktop_not_ready"
    assert (
        await client.post(
            f"/api/v1/me/desktops/{uuid.uuid4()}/connection", headers=place.user.headers
        )
    ).status == 404


@pytest.mark.parametrize(
    ("url", "app_env"),
    [("", "production"), ("ws://gateway.example.test/tunnel", "production")],
)
async def test_opening_a_desktop_without_a_usable_tunnel_url_allocates_nothing(
    url: str,
    app_env: str,
    pools_environ: dict[str, str],
    estate: MakeEstate,
    aiohttp_client: Any,
    pools_runtime: Runtime,
) -> None:
    place = await estate()
    environ = {**pools_environ, "GATEWAY_PUBLIC_WS_URL": url, "APP_ENV": app_env}
    async with served(environ, aiohttp_client) as (_, client):
        response = await client.post(
            f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
        )
        assert response.status == 503
        problem = await response.json()
        assert problem["code"] == "gateway_not_configured"
        assert "GATEWAY_PUBLIC_WS_URL" in problem["detail"]
    desktop = await desktop_row(pools_runtime, place.desktops[0])
    assert (desktop["state"], desktop["assigned_user"]) == ("ready", None)


async def test_a_ws_url_is_accepted_in_development(
    pools_environ: dict[str, str], estate: MakeEstate, aiohttp_client: Any
) -> None:
    place = await estate()
    environ = {
        **pools_environ,
        "GATEWAY_PUBLIC_WS_URL": "ws://127.0.0.1:8081/tunnel",
        "APP_ENV": "development",
    }
    async with served(environ, aiohttp_client) as (_, client):
        body = await open_desktop(client, place)
    assert body["connection"]["url"] == "ws://127.0.0.1:8081/tunnel"
    assert body["connection"]["protocol"] == "vnc"


async def test_a_desktop_whose_vm_is_not_running_answers_a_retryable_problem(
    client: Any, estate: MakeEstate, pools_runtime: Runtime, broker: PlatformSessionBroker
) -> None:
    place = await estate()
    async with pools_runtime.db.acquire() as db:
        await db.execute(
            "UPDATE desktops SET vm_id = 'no-such-vm' WHERE id = $1", place.desktops[0]
        )
    response = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    assert response.status == 503
    assert response.headers["Retry-After"] == "5"
    assert (await response.json())["code"] == "desktop_unreachable"
    desktop = await desktop_row(pools_runtime, place.desktops[0])
    assert str(desktop["assigned_user"]) == place.user.id  # kept for the next attempt
    with pytest.raises(TokenRejected):
        await broker.redeem("x" * 43, gateway_id="gw-x")
