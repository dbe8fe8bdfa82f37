"""A user logs off from their desktop (the console's "Log off"), whatever the pool's policy."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.sessions import (
    Estate,
    audit_actions,
    desktop_row,
    open_desktop,
)

from deskpool.pools.model import PoolKind
from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker
from deskpool.sessions.model import AfterDisconnect, SessionPolicy
from deskpool.sessions.tunnel import SessionEndReason, TunnelCounters

MakeEstate = Callable[..., Awaitable[Estate]]

#: A policy that alone would never log the user off.
NEVER = SessionPolicy(after_disconnect=AfterDisconnect.NEVER)


def logoff_url(desktop_id: str) -> str:
    return f"/api/v1/me/desktops/{desktop_id}/logoff"


async def test_logging_off_closes_the_open_session_then_keeps_a_persistent_desktop(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker, pools_runtime: Runtime
) -> None:
    place = await estate(ready=1, kind=PoolKind.PERSISTENT, policy=NEVER)
    opened = await open_desktop(client, place)
    grant = await broker.redeem(opened["connection"]["token"], gateway_id="gw-o")
    requests = broker.disconnect_requests("gw-o")
    first = asyncio.ensure_future(anext(requests))
    await asyncio.sleep(0)  # let the subscription start before the request

    # Only the desktop's user may log off from it.
    assert (await client.post(logoff_url(opened["id"]), headers=place.admin.headers)).status == 404
    answered = await client.post(logoff_url(opened["id"]), headers=place.user.headers)
    assert answered.status == 202, await answered.text()
    body = await answered.json()
    assert (body["id"], body["state"], body["closing_sessions"]) == (
        opened["id"],
        "in_use",
        [str(grant.session_id)],
    )
    # The gateway holding the session is told at once, and closes it.
    assert (await asyncio.wait_for(first, 10)).session_id == grant.session_id
    await requests.aclose()
    await broker.session_ended(
        grant.session_id, SessionEndReason.ADMIN_DISCONNECT, TunnelCounters()
    )

    session = await (
        await client.get(f"/api/v1/sessions/{grant.session_id}", headers=place.admin.headers)
    ).json()
    assert session["end_reason"] == "user_logoff"
    desktop = await desktop_row(pools_runtime, opened["id"])
    assert (desktop["state"], str(desktop["assigned_user"]), desktop["in_session"]) == (
        "ready",
        place.user.id,
        False,
    )
    actions = await audit_actions(pools_runtime, opened["id"])
    assert actions[-2:] == ["desktop.logoff_request", "desktop.logoff"]
    # The persistent desktop is still the user's: they come back to it.
    assert (await open_desktop(client, place))["id"] == opened["id"]


async def test_logging_off_a_disconnected_desktop_rebuilds_it_at_once(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker, pools_runtime: Runtime
) -> None:
    place = await estate(ready=1, policy=SessionPolicy(logoff_delay=3600))
    opened = await open_desktop(client, place)
    grant = await broker.redeem(opened["connection"]["token"], gateway_id="gw-q")
    await broker.session_ended(grant.session_id, SessionEndReason.CLIENT_CLOSED, TunnelCounters())
    assert (await desktop_row(pools_runtime, opened["id"]))["state"] == "in_use"  # the delay

    answered = await client.post(logoff_url(opened["id"]), headers=place.user.headers)
    assert answered.status == 202, await answered.text()
    body = await answered.json()
    assert (body["state"], body["closing_sessions"]) == ("refreshing", [])
    desktop = await desktop_row(pools_runtime, opened["id"])
    assert (desktop["state"], desktop["assigned_user"]) == ("refreshing", None)
    async with pools_runtime.db.acquire() as db:
        job = await db.fetchrow("SELECT kind, state FROM jobs WHERE resource_id = $1", opened["id"])
        logoff = await db.fetchrow(
            "SELECT actor, details FROM audit_events WHERE resource_id = $1 "
            "AND action = 'desktop.logoff'",
            opened["id"],
        )
    assert (job["kind"], job["state"]) == ("desktop.rebuild", "queued")
    assert logoff["actor"] == place.user.id

    # It is no longer the user's: a second log-off is 404, as is a desktop that does not exist.
    again = await client.post(logoff_url(opened["id"]), headers=place.user.headers)
    assert again.status == 404
    missing = await client.post(logoff_url(str(uuid.uuid4())), headers=place.user.headers)
    assert missing.status == 404
    assert (await client.post(logoff_url("nope"), headers=place.user.headers)).status == 404
