"""A gateway re-asserts the sessions it relays: one ended as ``gateway_lost`` by mistake reopens.

The gateway's lease ran out and its session was ended as lost while it went on relaying the
tunnel. Its next heartbeat names the session: the session reopens, its desktop is in session
again for the same user, audited ``session.reopen``. A session whose desktop was logged off
meanwhile cannot be reopened: the heartbeat hands it back for the gateway to close.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tests.support.sessions import Estate, audit_actions, desktop_row, open_desktop

from deskpool.runtime import Runtime
from deskpool.sessions import reassert
from deskpool.sessions.broker import PlatformSessionBroker, end_lost_gateways
from deskpool.sessions.service import log_off
from deskpool.sessions.tunnel import DisconnectRequest, SessionEndReason, TunnelCounters

MakeEstate = Callable[..., Awaitable[Estate]]


async def _lose(runtime: Runtime, gateway_id: str) -> None:
    """``gateway_id``'s lease runs out while the database is up: its sessions end as lost."""
    async with runtime.db.acquire() as db:
        await db.execute("UPDATE lease_clock SET touched_at = now()")
        await db.execute(
            "UPDATE gateway_leases SET lease_expires_at = now() - interval '1 second'"
            " WHERE gateway_id = $1",
            gateway_id,
        )
    assert await end_lost_gateways(runtime) >= 1


async def _end_reason(runtime: Runtime, session_id: uuid.UUID) -> Any:
    async with runtime.db.acquire() as db:
        return await db.fetchrow(
            "SELECT ended_at, end_reason FROM desktop_sessions WHERE id = $1", session_id
        )


async def test_a_session_the_gateway_still_relays_is_reopened_with_its_desktop(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate()
    opened = await open_desktop(client, place)
    gateway = PlatformSessionBroker(pools_runtime, lease=30.0)
    grant = await gateway.redeem(opened["connection"]["token"], gateway_id="gw-relaying")
    await _lose(pools_runtime, "gw-relaying")
    assert (await _end_reason(pools_runtime, grant.session_id))["end_reason"] == "gateway_lost"
    desktop = await desktop_row(pools_runtime, opened["id"])
    assert (desktop["state"], desktop["in_session"]) == ("in_use", False)

    closing = await gateway.heartbeat(
        "gw-relaying", {grant.session_id: TunnelCounters(bytes_to_browser=10)}
    )
    assert closing == []
    session = await _end_reason(pools_runtime, grant.session_id)
    assert (session["ended_at"], session["end_reason"]) == (None, None)
    desktop = await desktop_row(pools_runtime, opened["id"])
    assert (desktop["state"], desktop["in_session"]) == ("in_use", True)
    assert str(desktop["assigned_user"]) == place.user.id
    assert "session.reopen" in await audit_actions(pools_runtime, str(grant.session_id))
    # The tunnel then ends as any other.
    await gateway.session_ended(grant.session_id, SessionEndReason.CLIENT_CLOSED, TunnelCounters())
    assert (await _end_reason(pools_runtime, grant.session_id))["end_reason"] == "client_closed"


async def test_a_session_whose_desktop_was_logged_off_is_handed_back_to_close(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate()
    opened = await open_desktop(client, place)
    gateway = PlatformSessionBroker(pools_runtime, lease=30.0)
    grant = await gateway.redeem(opened["connection"]["token"], gateway_id="gw-too-late")
    await _lose(pools_runtime, "gw-too-late")
    async with pools_runtime.db.acquire() as db:
        assert await log_off(db, uuid.UUID(opened["id"]), "disconnected past the logoff delay")

    closing = await gateway.heartbeat("gw-too-late", {grant.session_id: TunnelCounters()})
    assert closing == [DisconnectRequest(grant.session_id, SessionEndReason.GATEWAY_LOST)]
    assert (await _end_reason(pools_runtime, grant.session_id))["end_reason"] == "gateway_lost"
    desktop = await desktop_row(pools_runtime, opened["id"])
    assert desktop["in_session"] is False


async def test_a_session_that_fails_to_reopen_keeps_neither_the_lease_nor_the_others(
    client: Any, estate: MakeEstate, pools_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    place = await estate(ready=2)
    gateway = PlatformSessionBroker(pools_runtime, lease=30.0)
    first = await open_desktop(client, place)
    one = await gateway.redeem(first["connection"]["token"], gateway_id="gw-one-fails")
    await _lose(pools_runtime, "gw-one-fails")
    second = await open_desktop(client, place)
    assert second["id"] == first["id"]  # the user's desktop, again
    other = await gateway.redeem(second["connection"]["token"], gateway_id="gw-one-fails")
    await _lose(pools_runtime, "gw-one-fails")
    reopen = reassert._reopen

    async def failing(runtime: Runtime, session_id: uuid.UUID) -> Any:
        if session_id == one.session_id:
            raise RuntimeError("a bug in one session")
        return await reopen(runtime, session_id)

    monkeypatch.setattr(reassert, "_reopen", failing)
    closing = await gateway.heartbeat(
        "gw-one-fails", {one.session_id: TunnelCounters(), other.session_id: TunnelCounters()}
    )
    assert closing == []  # the failed one is tried again by the next heartbeat
    assert (await _end_reason(pools_runtime, other.session_id))["end_reason"] is None
    async with pools_runtime.db.acquire() as db:
        renewed = await db.fetchval(
            "SELECT lease_expires_at > now() FROM gateway_leases WHERE gateway_id = $1",
            "gw-one-fails",
        )
    assert renewed is True
