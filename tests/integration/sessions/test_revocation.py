"""Access that is taken away ends at once: tokens, tunnels, reconnects and held desktops.

Each way access is taken away (a user disabled, the grant behind a shadow revoked, the
entitlement behind a desktop removed directly, through a group membership, through a claim
binding) is driven through the REST API; the platform's broker is the gateway's side: its
disconnect requests say which tunnels to close and why, its redemption refuses what is no
longer allowed. The real gateway component closes a tunnel in
``test_a_disabled_users_tunnel_closes_with_forbidden_and_access_revoked``.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from tests.support.pools import Caller
from tests.support.sessions import (
    Estate,
    desktop_row,
    details,
    open_desktop,
    running_gateway,
)

from deskpool.auth import VerifiedToken
from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.guacamole import Status
from deskpool.identity.sign_in import sign_in
from deskpool.pools.model import PoolKind
from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker, end_lost_gateways
from deskpool.sessions.model import AfterDisconnect, SessionPolicy
from deskpool.sessions.tunnel import (
    DisconnectRequest,
    SessionEndReason,
    TokenRejected,
    TunnelCounters,
)
from deskpool.testing.tunnels import WebSocketTunnelClient

MakeEstate = Callable[..., Awaitable[Estate]]
NewCaller = Callable[..., Awaitable[Caller]]

#: A policy that alone would never log the user off.
NEVER = SessionPolicy(after_disconnect=AfterDisconnect.NEVER)
REVOKED = SessionEndReason.ACCESS_REVOKED


@pytest.fixture
async def superuser(new_caller: NewCaller) -> Caller:
    """The administrator who takes access away (``platform:admin``)."""
    return await new_caller("platform:admin")


class Gateway:
    """The disconnect requests a gateway id receives through the platform's broker."""

    def __init__(self, broker: PlatformSessionBroker, gateway_id: str) -> None:
        self.broker = broker
        self.id = gateway_id
        self._requests: AsyncIterator[DisconnectRequest] = broker.disconnect_requests(gateway_id)

    async def next_request(self) -> DisconnectRequest:
        """The next disconnect request (the database is polled too: within 10 s)."""
        return await asyncio.wait_for(anext(self._requests), 10)

    async def close(self) -> None:
        await self._requests.aclose()


@dataclass
class Scene:
    """The API, the broker, a listening gateway id and the administrator who takes away."""

    client: Any
    estate: MakeEstate
    broker: PlatformSessionBroker
    gateway: Gateway
    runtime: Runtime
    superuser: Caller

    async def take_away(self, method: str, url: str, body: Any = None) -> None:
        """Take access away as the administrator (asserting the change succeeded)."""
        answered = await self.client.request(method, url, json=body, headers=self.superuser.headers)
        assert answered.status in (200, 204), await answered.text()

    async def refused(self, token: str) -> None:
        """The gateway's redemption refuses ``token`` for ``access_revoked``."""
        with pytest.raises(TokenRejected) as refused:
            await self.broker.redeem(token, gateway_id=self.gateway.id)
        assert refused.value.reason == "access_revoked"

    async def end_as_gateway(self, request: DisconnectRequest) -> None:
        """Close the requested tunnel as the gateway does: it reports the reason it was asked."""
        await self.broker.session_ended(request.session_id, request.reason, TunnelCounters())

    async def audited(self, action: str, resource_id: str) -> list[dict[str, Any]]:
        """The audit events ``action`` on ``resource_id``: actor, outcome and details."""
        async with self.runtime.db.acquire() as connection:
            rows = await connection.fetch(
                "SELECT actor, outcome, details FROM audit_events "
                "WHERE action = $1 AND resource_id = $2 ORDER BY id",
                action,
                resource_id,
            )
        return [{**dict(row), "details": details(row["details"])} for row in rows]

    async def disable(self, user: Caller) -> None:
        """``PATCH /api/v1/users/{id} {"disabled": true}``."""
        await self.take_away("PATCH", f"/api/v1/users/{user.id}", {"disabled": True})


@pytest.fixture
async def scene(
    client: Any,
    estate: MakeEstate,
    broker: PlatformSessionBroker,
    pools_runtime: Runtime,
    superuser: Caller,
) -> AsyncIterator[Scene]:
    listening = Gateway(broker, f"gw-{secrets.token_hex(3)}")
    yield Scene(client, estate, broker, listening, pools_runtime, superuser)
    await listening.close()


async def reconnect(client: Any, caller: Caller, desktop_id: str) -> aiohttp.ClientResponse:
    response: aiohttp.ClientResponse = await client.post(
        f"/api/v1/me/desktops/{desktop_id}/connection", headers=caller.headers
    )
    return response


async def test_disabling_a_user_refuses_his_tokens_closes_his_tunnel_and_logs_him_off(
    scene: Scene,
) -> None:
    place = await scene.estate(ready=1, policy=NEVER)
    opened = await open_desktop(scene.client, place)
    grant = await scene.broker.redeem(opened["connection"]["token"], gateway_id=scene.gateway.id)
    # A second token, issued before the user is disabled and never redeemed.
    waiting = await reconnect(scene.client, place.user, opened["id"])
    assert waiting.status == 200, await waiting.text()
    unredeemed = (await waiting.json())["connection"]["token"]

    await scene.disable(place.user)

    # The gateway holding the tunnel is asked to close it, for access_revoked.
    request = await scene.gateway.next_request()
    assert request == DisconnectRequest(grant.session_id, REVOKED)
    await scene.refused(unredeemed)
    await scene.end_as_gateway(request)

    session = await (
        await scene.client.get(f"/api/v1/sessions/{grant.session_id}", headers=place.admin.headers)
    ).json()
    assert session["end_reason"] == "access_revoked"
    # Logged off, whatever the pool's policy: the non-persistent desktop is rebuilt.
    desktop = await desktop_row(scene.runtime, opened["id"])
    assert (desktop["state"], desktop["assigned_user"]) == ("refreshing", None)
    # Reconnecting is refused: the user cannot call the API any more.
    assert (await reconnect(scene.client, place.user, opened["id"])).status == 403

    [asked] = await scene.audited("session.disconnect", str(grant.session_id))
    assert (asked["actor"], asked["details"]["reason"]) == (scene.superuser.id, "access_revoked")
    [refusal] = await scene.audited("session.refuse", opened["id"])
    assert (refusal["outcome"], refusal["details"]["reason"]) == ("denied", "access_revoked")
    logoffs = await scene.audited("desktop.logoff", opened["id"])
    assert logoffs[-1]["details"]["reason"] == "session ended (access_revoked)"
    assert await scene.audited("user.disable", place.user.id)


async def test_disabling_a_user_logs_him_off_a_desktop_he_has_no_tunnel_to(
    scene: Scene,
) -> None:
    place = await scene.estate(ready=1, kind=PoolKind.PERSISTENT, policy=NEVER)
    opened = await open_desktop(scene.client, place)
    grant = await scene.broker.redeem(opened["connection"]["token"], gateway_id="gw-gone")
    await scene.broker.session_ended(
        grant.session_id, SessionEndReason.CLIENT_CLOSED, TunnelCounters()
    )
    assert (await desktop_row(scene.runtime, opened["id"]))["state"] == "in_use"

    await scene.disable(place.user)
    # A persistent desktop follows its rule after log-off: ready, and still its user's.
    desktop = await desktop_row(scene.runtime, opened["id"])
    assert (desktop["state"], str(desktop["assigned_user"])) == ("ready", place.user.id)
    [logoff] = await scene.audited("desktop.logoff", opened["id"])
    assert (logoff["actor"], logoff["details"]["reason"]) == (scene.superuser.id, "access revoked")


async def test_revoking_the_grant_behind_a_shadow_closes_it_and_refuses_its_tokens(
    scene: Scene,
) -> None:
    place = await scene.estate(ready=1)
    opened = await open_desktop(scene.client, place)
    watched = await scene.broker.redeem(opened["connection"]["token"], gateway_id=scene.gateway.id)
    await scene.broker.session_connected(watched.session_id, connection_id="$watched")

    async def shadow_token() -> str:
        response = await scene.client.post(
            f"/api/v1/sessions/{watched.session_id}/shadow", headers=place.admin.headers
        )
        assert response.status == 200, await response.text()
        return str((await response.json())["connection"]["token"])

    viewer = await scene.broker.redeem(await shadow_token(), gateway_id=scene.gateway.id)
    assert viewer.read_only
    unredeemed = await shadow_token()
    async with scene.runtime.db.acquire() as connection:
        grant_id = await connection.fetchval(
            "SELECT id FROM grants WHERE subject_id = $1 AND permission = 'sessions:manage'",
            uuid.UUID(place.admin.id),
        )
    await scene.take_away("DELETE", f"/api/v1/grants/{grant_id}")

    # Only the viewer's tunnel closes: the user's own session goes on.
    request = await scene.gateway.next_request()
    assert request == DisconnectRequest(viewer.session_id, REVOKED)
    await scene.refused(unredeemed)
    await scene.end_as_gateway(request)
    async with scene.runtime.db.acquire() as connection:
        ends = dict(
            await connection.fetch(
                "SELECT id, end_reason FROM desktop_sessions WHERE id = ANY($1::uuid[])",
                [watched.session_id, viewer.session_id],
            )
        )
    assert ends == {watched.session_id: None, viewer.session_id: "access_revoked"}
    desktop = await desktop_row(scene.runtime, opened["id"])
    assert (desktop["state"], desktop["in_session"]) == ("in_use", True)
    [asked] = await scene.audited("session.disconnect", str(viewer.session_id))
    assert asked["details"]["read_only"] is True


async def _entitlement_taken_away(scene: Scene, place: Estate, method: str, url: str) -> None:
    """Open the pool's desktop, take the entitlement away (``method url``), check the ends.

    The pool is persistent: the desktop stays its user's, ``ready``, but he cannot reopen it.
    """
    opened = await open_desktop(scene.client, place)
    grant = await scene.broker.redeem(opened["connection"]["token"], gateway_id=scene.gateway.id)
    waiting = await reconnect(scene.client, place.user, opened["id"])
    unredeemed = (await waiting.json())["connection"]["token"]

    await scene.take_away(method, url)

    request = await scene.gateway.next_request()
    assert request == DisconnectRequest(grant.session_id, REVOKED)
    await scene.refused(unredeemed)
    await scene.end_as_gateway(request)
    desktop = await desktop_row(scene.runtime, opened["id"])
    assert (desktop["state"], str(desktop["assigned_user"])) == ("ready", place.user.id)
    again = await reconnect(scene.client, place.user, opened["id"])
    assert again.status == 403, await again.text()
    assert (await again.json())["code"] == "access_revoked"
    reopened = await scene.client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    assert reopened.status == 404
    [asked] = await scene.audited("session.disconnect", str(grant.session_id))
    assert asked["details"]["reason"] == "access_revoked"


async def test_removing_a_users_entitlement_ends_what_it_allowed(scene: Scene) -> None:
    place = await scene.estate(ready=1, kind=PoolKind.PERSISTENT, policy=NEVER)
    url = f"/api/v1/pools/{place.pool.id}/entitlements/user/{place.user.id}"
    await _entitlement_taken_away(scene, place, "DELETE", url)


async def _group_entitled_to(runtime: Runtime, place: Estate, claim: str | None = None) -> str:
    """A new group entitled to the estate's pool instead of its user (bound to ``claim``)."""
    async with runtime.db.acquire() as connection:
        group_id = await connection.fetchval(
            "INSERT INTO groups (key, name) VALUES ($1, 'Desk users') RETURNING id",
            f"desk-{secrets.token_hex(4)}",
        )
        await connection.execute(
            "INSERT INTO pool_entitlements (pool_id, subject_type, subject_id) "
            "VALUES ($1, 'group', $2)",
            place.pool.id,
            group_id,
        )
        await connection.execute(
            "DELETE FROM pool_entitlements WHERE subject_type = 'user' AND subject_id = $1",
            uuid.UUID(place.user.id),
        )
        if claim is None:
            await connection.execute(
                "INSERT INTO group_members (group_id, user_id) VALUES ($1, $2)",
                group_id,
                uuid.UUID(place.user.id),
            )
        else:
            await connection.execute(
                "INSERT INTO oidc_group_bindings (claim_value, group_id) VALUES ($1, $2)",
                claim,
                group_id,
            )
    return str(group_id)


async def test_removing_the_group_membership_behind_a_desktop_ends_what_it_allowed(
    scene: Scene,
) -> None:
    place = await scene.estate(ready=1, kind=PoolKind.PERSISTENT, policy=NEVER)
    group_id = await _group_entitled_to(scene.runtime, place)
    url = f"/api/v1/groups/{group_id}/members/{place.user.id}"
    await _entitlement_taken_away(scene, place, "DELETE", url)


async def test_removing_the_claim_binding_behind_a_desktop_ends_what_it_allowed(
    scene: Scene, bearer: Callable[..., dict[str, str]]
) -> None:
    place = await scene.estate(ready=1, kind=PoolKind.PERSISTENT, policy=NEVER)
    claim = f"staff-{secrets.token_hex(3)}"
    await _group_entitled_to(scene.runtime, place, claim=claim)
    async with scene.runtime.db.acquire() as connection:
        subject = await connection.fetchval(
            "SELECT subject FROM users WHERE id = $1", uuid.UUID(place.user.id)
        )
        binding_id = await connection.fetchval(
            "SELECT id FROM oidc_group_bindings WHERE claim_value = $1", claim
        )
    # The user signs in with a token carrying the claim: that is what entitles him.
    user = Caller(place.user.id, bearer(subject, groups=[claim]))
    claimed = Estate(place.pool, place.desktops, user, place.admin)
    await _entitlement_taken_away(
        scene, claimed, "DELETE", f"/api/v1/oidc-group-bindings/{binding_id}"
    )


async def test_a_claim_gained_after_a_sign_in_that_wrote_nothing_is_revoked_with_its_binding(
    scene: Scene, bearer: Callable[..., dict[str, str]]
) -> None:
    # A sign-in whose user row is current writes nothing (issue 39); the claim the next one
    # brings is written all the same, so taking its binding away finds the user.
    place = await scene.estate(ready=1, kind=PoolKind.PERSISTENT, policy=NEVER)
    claim = f"staff-{secrets.token_hex(3)}"
    await _group_entitled_to(scene.runtime, place, claim=claim)
    async with scene.runtime.db.acquire() as connection:
        user = await connection.fetchrow(
            "SELECT issuer, subject FROM users WHERE id = $1", uuid.UUID(place.user.id)
        )
        binding_id = await connection.fetchval(
            "SELECT id FROM oidc_group_bindings WHERE claim_value = $1", claim
        )
        quiet = VerifiedToken.from_claims(
            {"iss": user["issuer"], "sub": user["subject"], "aud": "deskpool", "exp": 2**31}
        )
        await sign_in(connection, scene.runtime.config, quiet)
        written = await connection.fetchval(
            "SELECT xmin::text FROM users WHERE id = $1", uuid.UUID(place.user.id)
        )
        await sign_in(connection, scene.runtime.config, quiet)
        assert written == await connection.fetchval(
            "SELECT xmin::text FROM users WHERE id = $1", uuid.UUID(place.user.id)
        )
    claimed = Estate(
        place.pool,
        place.desktops,
        Caller(place.user.id, bearer(user["subject"], groups=[claim])),
        place.admin,
    )
    await _entitlement_taken_away(
        scene, claimed, "DELETE", f"/api/v1/oidc-group-bindings/{binding_id}"
    )


async def test_an_entitlement_removed_while_another_still_allows_the_desktop_ends_nothing(
    scene: Scene,
) -> None:
    place = await scene.estate(ready=1, policy=NEVER)
    group_id = await _group_entitled_to(scene.runtime, place)
    async with scene.runtime.db.acquire() as connection:
        await connection.execute(
            "INSERT INTO pool_entitlements (pool_id, subject_type, subject_id) "
            "VALUES ($1, 'user', $2)",
            place.pool.id,
            uuid.UUID(place.user.id),
        )
    opened = await open_desktop(scene.client, place)
    grant = await scene.broker.redeem(opened["connection"]["token"], gateway_id="gw-kept")

    await scene.take_away("DELETE", f"/api/v1/groups/{group_id}/members/{place.user.id}")
    async with scene.runtime.db.acquire() as connection:
        asked = await connection.fetchval(
            "SELECT disconnect_requested_at FROM desktop_sessions WHERE id = $1", grant.session_id
        )
    assert asked is None
    assert (await reconnect(scene.client, place.user, opened["id"])).status == 200


async def test_a_disabled_users_tunnel_closes_with_forbidden_and_access_revoked(
    scene: Scene, pools_environ: dict[str, str], desktop_daemon: DesktopDaemonSimulator
) -> None:
    place = await scene.estate()
    opened = await open_desktop(scene.client, place)
    async with (
        running_gateway(pools_environ, desktop_daemon) as url,
        aiohttp.ClientSession() as session,
    ):
        tunnel = await WebSocketTunnelClient.connect(
            session, url, {"token": opened["connection"]["token"]}
        )
        await tunnel.until("sync")
        assert tunnel.uuid is not None
        await scene.disable(place.user)
        closed = await tunnel.closed(within=10)
        assert closed.status == Status.CLIENT_FORBIDDEN
    record = await (
        await scene.client.get(f"/api/v1/sessions/{tunnel.uuid}", headers=place.admin.headers)
    ).json()
    assert record["end_reason"] == "access_revoked", record


async def test_a_revoked_session_whose_gateway_is_lost_still_logs_its_user_off(
    scene: Scene,
) -> None:
    place = await scene.estate(ready=1, policy=NEVER)
    opened = await open_desktop(scene.client, place)
    grant = await scene.broker.redeem(opened["connection"]["token"], gateway_id="gw-doomed-r")
    await scene.disable(place.user)
    # The gateway dies before it closes the tunnel: its lease runs out.
    async with scene.runtime.db.acquire() as connection:
        await connection.execute(
            "UPDATE gateway_leases SET lease_expires_at = now() - interval '1 second' "
            "WHERE gateway_id = 'gw-doomed-r'"
        )
    assert await end_lost_gateways(scene.runtime) == 1
    async with scene.runtime.db.acquire() as connection:
        reason = await connection.fetchval(
            "SELECT end_reason FROM desktop_sessions WHERE id = $1", grant.session_id
        )
    assert reason == "gateway_lost"
    desktop = await desktop_row(scene.runtime, opened["id"])
    assert (desktop["state"], desktop["assigned_user"]) == ("refreshing", None)
