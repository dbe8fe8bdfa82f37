"""Pool session policies: set through the pools API, applied when sessions end and by the worker."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from tests.integration.sessions.test_start_revocation import entitle
from tests.support.pools import (
    Caller,
    pool_body,
)
from tests.support.sessions import (
    Estate,
    audit_actions,
    connected_through,
    desktop_row,
    open_desktop,
)

from deskpool.client_policy.model import DEFAULT_CLIENT_POLICY
from deskpool.pools.model import PoolKind
from deskpool.provisioning.starts import end_stale_starts
from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker
from deskpool.sessions.maintenance import check_sessions
from deskpool.sessions.model import AfterDisconnect, SessionPolicy
from deskpool.sessions.tunnel import SessionEndReason, TunnelCounters

MakeEstate = Callable[..., Awaitable[Estate]]

IMMEDIATELY = SessionPolicy(after_disconnect=AfterDisconnect.LOGOFF_IMMEDIATELY)


async def test_a_pool_s_session_policy_is_set_and_changed_through_the_api(
    client: Any, new_caller: Any, api_cluster: Any
) -> None:
    admin = await new_caller("pools:manage", "pools:read")
    cluster_id = await api_cluster()
    pool = pool_body(cluster_id, name=f"policy-{uuid.uuid4().hex[:6]}", min_size=0, max_size=2)
    plain = await client.post("/api/v1/pools", json=pool, headers=admin.headers)
    assert plain.status == 201, await plain.text()
    assert (await plain.json())["session_policy"] == {
        "protocol": "auto",
        "after_disconnect": "logoff_after_delay",
        "logoff_delay": 600,
        "idle_timeout": None,
        "max_session_duration": None,
        "recording": {"enabled": False, "include_keys": False},
        "client": DEFAULT_CLIENT_POLICY.as_json(),
    }
    created = await client.post(
        "/api/v1/pools",
        json={
            **pool,
            "name": pool["name"] + "-b",
            "naming_pattern": "q" + pool["naming_pattern"],
            "session_policy": {"after_disconnect": "logoff_immediately", "idle_timeout": 900},
        },
        headers=admin.headers,
    )
    assert created.status == 201, await created.text()
    body = await created.json()
    assert body["session_policy"]["after_disconnect"] == "logoff_immediately"
    assert body["session_policy"]["idle_timeout"] == 900
    url = f"/api/v1/pools/{body['id']}"
    changed = await client.patch(
        url,
        json={
            "session_policy": {
                "max_session_duration": 28800,
                "protocol": "rdp",
                "recording": {"enabled": True},
            }
        },
        headers=admin.headers,
    )
    assert changed.status == 200, await changed.text()
    policy = (await changed.json())["session_policy"]
    assert policy == {
        "protocol": "rdp",
        "after_disconnect": "logoff_immediately",
        "logoff_delay": 600,
        "idle_timeout": 900,
        "max_session_duration": 28800,
        "recording": {"enabled": True, "include_keys": False},
        "client": DEFAULT_CLIENT_POLICY.as_json(),
    }
    assert (await (await client.get(url, headers=admin.headers)).json())["session_policy"] == policy
    for bad in (
        {"logoff_delay": -1},
        {"idle_timeout": 0},
        {"after_disconnect": "sometimes"},
        {"recording": {"enabled": "maybe"}},
    ):
        refused = await client.patch(url, json={"session_policy": bad}, headers=admin.headers)
        assert refused.status == 422, bad
        problem = await refused.json()
        assert any(
            error["pointer"].startswith("/session_policy/") for error in problem["errors"]
        ), problem


async def test_logoff_at_once_rebuilds_a_non_persistent_desktop_before_anyone_else_gets_it(
    client: Any,
    estate: MakeEstate,
    broker: PlatformSessionBroker,
    pools_runtime: Runtime,
    new_caller: Callable[..., Awaitable[Caller]],
) -> None:
    place = await estate(ready=1, max_size=1, policy=IMMEDIATELY)
    opened, grant = await connected_through(client, broker, place, "gw-p")
    await broker.session_ended(grant.session_id, SessionEndReason.CLIENT_CLOSED, TunnelCounters())

    desktop = await desktop_row(pools_runtime, opened["id"])
    assert (desktop["state"], desktop["assigned_user"], desktop["in_session"]) == (
        "refreshing",
        None,
        False,
    )
    async with pools_runtime.db.acquire() as db:
        job = await db.fetchrow("SELECT kind, state FROM jobs WHERE resource_id = $1", opened["id"])
    assert (job["kind"], job["state"]) == ("desktop.rebuild", "queued")
    assert (await audit_actions(pools_runtime, opened["id"]))[-1] == "desktop.logoff"
    # Nobody gets the used desktop meanwhile: one who asks waits for it rebuilt (202, reserved
    # to him while it is refreshing, handed over once ready).
    other = await new_caller()
    await entitle(pools_runtime, place, other)
    waiting = await client.post(f"/api/v1/me/pools/{place.pool.id}/desktop", headers=other.headers)
    assert waiting.status == 202, await waiting.text()
    assert ((await waiting.json())["id"], (await waiting.json())["state"]) == (
        opened["id"],
        "refreshing",
    )
    # The pool is at its maximum with nothing free: the next one is refused.
    again = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    assert again.status == 503
    assert (await again.json())["code"] == "no_desktop_available"
    # Counted by pool and reason: the shipped DeskpoolPoolWithoutDesktops alert reads it.
    labels = {"pool_id": str(place.pool.id), "reason": "no_desktop_available"}
    assert pools_runtime.metrics.get_sample_value("deskpool_logon_failures_total", labels) == 1


async def test_a_lost_gateway_never_logs_the_user_off_at_once(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker, pools_runtime: Runtime
) -> None:
    place = await estate(ready=1, policy=IMMEDIATELY)
    opened, grant = await connected_through(client, broker, place, "gw-gone")
    async with pools_runtime.db.acquire() as db:
        await db.execute(
            "UPDATE gateway_leases SET lease_expires_at = now() - interval '1 second' "
            "WHERE gateway_id = 'gw-gone'"
        )
    done = await check_sessions(pools_runtime, sweep_starts=end_stale_starts)
    assert done.lost_sessions >= 1
    assert done.logged_off == 0
    desktop = await desktop_row(pools_runtime, opened["id"])
    assert (desktop["state"], str(desktop["assigned_user"])) == ("in_use", place.user.id)
    again = await open_desktop(client, place)
    assert again["id"] == opened["id"]  # the user comes back to the same desktop
    assert str(grant.desktop_id) == again["id"]


async def test_a_daemon_failure_ends_the_session_and_keeps_the_desktop(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker, pools_runtime: Runtime
) -> None:
    # The gateway could not reach the desktop daemon (down, slow, or refusing the handshake).
    place = await estate(ready=1, policy=IMMEDIATELY)
    opened, grant = await connected_through(client, broker, place, "gw-e")
    assert (await desktop_row(pools_runtime, opened["id"]))["in_session"] is True
    await broker.session_ended(grant.session_id, SessionEndReason.DAEMON_ERROR, TunnelCounters())
    desktop = await desktop_row(pools_runtime, opened["id"])
    assert (desktop["state"], str(desktop["assigned_user"]), desktop["in_session"]) == (
        "in_use",
        place.user.id,
        False,
    )
    assert (await open_desktop(client, place))["id"] == opened["id"]


async def test_logoff_after_the_delay_keeps_a_persistent_desktop_assigned(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker, pools_runtime: Runtime
) -> None:
    place = await estate(ready=1, kind=PoolKind.PERSISTENT, policy=SessionPolicy(logoff_delay=60))
    opened, grant = await connected_through(client, broker, place, "gw-d")
    await broker.session_ended(grant.session_id, SessionEndReason.CLIENT_CLOSED, TunnelCounters())

    # Within the delay: still logged on.
    await check_sessions(pools_runtime, sweep_starts=end_stale_starts)
    assert (await desktop_row(pools_runtime, opened["id"]))["state"] == "in_use"
    back = await open_desktop(client, place)
    assert back["id"] == opened["id"]

    async with pools_runtime.db.acquire() as db:  # the delay passes
        await db.execute(
            "UPDATE desktop_sessions SET ended_at = ended_at - interval '2 minutes' "
            "WHERE desktop_id = $1::uuid",
            opened["id"],
        )
        await db.execute(
            "UPDATE connection_tokens SET issued_at = issued_at - interval '2 minutes' "
            "WHERE desktop_id = $1::uuid",
            opened["id"],
        )
        await db.execute(
            "UPDATE desktops SET state_changed_at = state_changed_at - interval '2 minutes' "
            "WHERE id = $1::uuid",
            opened["id"],
        )
    done = await check_sessions(pools_runtime, sweep_starts=end_stale_starts)
    assert done.logged_off == 1
    desktop = await desktop_row(pools_runtime, opened["id"])
    assert (desktop["state"], str(desktop["assigned_user"])) == ("ready", place.user.id)
    assert (await open_desktop(client, place))["id"] == opened["id"]


async def test_sessions_past_their_limits_or_their_desktop_are_asked_to_close(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker, pools_runtime: Runtime
) -> None:
    place = await estate(ready=3, policy=SessionPolicy(max_session_duration=3600, idle_timeout=600))
    grants = [
        await broker.redeem(
            (await open_desktop(client, place))["connection"]["token"], gateway_id="gw-m"
        )
        for _ in range(3)
    ]
    long, idle, moved = grants
    async with pools_runtime.db.acquire() as db:
        await db.execute(
            "UPDATE desktop_sessions SET started_at = now() - interval '2 hours' WHERE id = $1",
            long.session_id,
        )
        await db.execute(
            "UPDATE desktop_sessions SET last_activity_at = now() - interval '11 minutes' "
            "WHERE id = $1",
            idle.session_id,
        )
        await db.execute("DELETE FROM desktops WHERE id = $1", moved.desktop_id)
    requests = broker.disconnect_requests("gw-m")
    done = await check_sessions(pools_runtime, sweep_starts=end_stale_starts)
    assert done.disconnects_requested == 3
    asked = {(await anext(requests)).session_id for _ in range(3)}
    await requests.aclose()
    assert asked == {grant.session_id for grant in grants}
    for grant in grants:
        await broker.session_ended(
            grant.session_id, SessionEndReason.ADMIN_DISCONNECT, TunnelCounters()
        )
    reasons = {}
    for grant in grants:
        session = await (
            await client.get(f"/api/v1/sessions/{grant.session_id}", headers=place.admin.headers)
        ).json()
        reasons[grant.session_id] = session["end_reason"]
    assert reasons == {
        long.session_id: "max_duration",
        idle.session_id: "idle_timeout",
        moved.session_id: "admin_disconnect",
    }
