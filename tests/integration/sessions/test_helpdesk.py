"""The help desk and messages to users, through the API (tests/integration/sessions fixtures).

Written from issue 38's help desk: find a user, see why he can or cannot open each pool (and
through which entitlement), send him a message his open desktop shows, log him off.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.pools import Caller
from tests.support.sessions import Estate, audit_actions, connected_through

from deskpool.pools.model import PoolState
from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker

MakeEstate = Callable[..., Awaitable[Estate]]


async def _group_entitled_to(runtime: Runtime, pool_id: uuid.UUID, user_id: str) -> str:
    """A new group the user is a member of, entitled to the pool; its key."""
    key = f"team-{uuid.uuid4().hex[:6]}"
    async with runtime.db.acquire() as connection:
        group_id = await connection.fetchval(
            "INSERT INTO groups (key, name) VALUES ($1, $1) RETURNING id", key
        )
        await connection.execute(
            "INSERT INTO group_members (group_id, user_id) VALUES ($1, $2::uuid)", group_id, user_id
        )
        await connection.execute(
            "INSERT INTO pool_entitlements (pool_id, subject_type, subject_id) "
            "VALUES ($1, 'group', $2)",
            pool_id,
            group_id,
        )
    return key


async def _page(client: Any, estate: Estate, user_id: str) -> dict[str, Any]:
    response = await client.get(f"/api/v1/helpdesk/users/{user_id}", headers=estate.admin.headers)
    body = await response.json()
    assert response.status == 200, body
    return dict(body)


async def test_the_help_desk_says_why_a_user_can_or_cannot_open_each_pool(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker, pools_runtime: Runtime
) -> None:
    mine = await estate(ready=2)
    other = await estate(ready=1)  # the user is not entitled to it
    through_group = await estate(ready=0, state=PoolState.DISABLED)
    key = await _group_entitled_to(pools_runtime, through_group.pool.id, mine.user.id)

    page = await _page(client, mine, mine.user.id)
    pools = {pool["pool_id"]: pool for pool in page["pools"]}
    direct = pools[str(mine.pool.id)]
    assert (direct["can_open"], direct["access"]) == (True, "available")
    assert direct["paths"] == [{"kind": "direct", "group_id": None, "group_key": None}]
    refused = pools[str(other.pool.id)]
    assert (refused["can_open"], refused["access"], refused["paths"]) == (
        False,
        "not_entitled",
        [],
    )
    assert "not entitled" in refused["explanation"]
    disabled = pools[str(through_group.pool.id)]
    assert (disabled["can_open"], disabled["access"]) == (False, "pool_disabled")
    assert [(p["kind"], p["group_key"]) for p in disabled["paths"]] == [("group", key)]
    assert page["user"]["id"] == mine.user.id

    # He opens his desktop: the help desk shows the session with its pool and logon phases,
    # and the pool as the one he holds a desktop in.
    opened, grant = await connected_through(client, broker, mine, "gw-helpdesk")
    page = await _page(client, mine, mine.user.id)
    [session] = page["sessions"]
    assert (session["id"], session["state"]) == (str(grant.session_id), "open")
    assert session["pool_name"] == mine.pool.name
    assert [p["phase"] for p in session["logon"]["phases"]][:2] == ["asked", "allocated"]
    assert [d["id"] for d in page["desktops"]] == [opened["id"]]
    assert {p["pool_id"]: p["access"] for p in page["pools"]}[str(mine.pool.id)] == (
        "holds_desktop"
    )

    # Disabled, he can open nothing.
    async with pools_runtime.db.acquire() as connection:
        await connection.execute(
            "UPDATE users SET disabled = true WHERE id = $1::uuid", mine.user.id
        )
    page = await _page(client, mine, mine.user.id)
    assert {p["access"] for p in page["pools"]} == {"user_disabled"}


async def test_failed_logons_and_search(
    client: Any, estate: MakeEstate, new_caller: Callable[..., Awaitable[Caller]]
) -> None:
    place = await estate(ready=0, max_size=0)  # nothing ready, and it may not grow
    refused = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    assert refused.status == 503
    page = await _page(client, place, place.user.id)
    [failed] = page["failed_logons"]
    assert (failed["failure_reason"], failed["pool_name"]) == (
        "no_desktop_available",
        place.pool.name,
    )
    assert {p["pool_id"]: p["access"] for p in page["pools"]}[str(place.pool.id)] == (
        "no_desktop_available"
    )

    subject = page["user"]["subject"]
    desk = await new_caller("users:read", "sessions:read")
    found = await client.get(
        "/api/v1/helpdesk/users", params={"q": subject[-6:].upper()}, headers=desk.headers
    )
    assert found.status == 200
    assert [user["id"] for user in (await found.json())["items"]] == [place.user.id]
    # Who may not read users cannot search; who may not read sessions sees no user's page.
    no_users = await client.get(
        "/api/v1/helpdesk/users", params={"q": subject}, headers=place.admin.headers
    )
    assert no_users.status == 403
    forbidden = await client.get(
        f"/api/v1/helpdesk/users/{place.user.id}", headers=place.user.headers
    )
    assert forbidden.status == 403
    missing = await client.get(
        f"/api/v1/helpdesk/users/{uuid.uuid4()}", headers=place.admin.headers
    )
    assert missing.status == 404


async def test_a_message_reaches_the_users_with_a_session_and_those_who_connect_later(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker, pools_runtime: Runtime
) -> None:
    place = await estate(ready=2)
    _opened, grant = await connected_through(client, broker, place, "gw-messages")

    async def mine(headers: Any) -> list[dict[str, Any]]:
        response = await client.get("/api/v1/me/messages", headers=headers)
        assert response.status == 200
        return list((await response.json())["items"])

    sent = await client.post(
        "/api/v1/messages",
        json={
            "target_kind": "pool",
            "target_id": str(place.pool.id),
            "severity": "warning",
            "body": "  Maintenance at 18:00: save your work.  ",
        },
        headers=place.admin.headers,
    )
    message = await sent.json()
    assert sent.status == 201, message
    assert (message["body"], message["severity"]) == (
        "Maintenance at 18:00: save your work.",
        "warning",
    )
    assert [m["id"] for m in await mine(place.user.headers)] == [message["id"]]
    assert "message.send" in await audit_actions(pools_runtime, str(place.pool.id))

    # Dismissed, it is not shown again; another user's message cannot be dismissed by him.
    to_session = await client.post(
        "/api/v1/messages",
        json={"target_kind": "session", "target_id": str(grant.session_id), "body": "Hello"},
        headers=place.admin.headers,
    )
    assert to_session.status == 201
    dismissed = await client.post(
        f"/api/v1/me/messages/{message['id']}/dismiss", headers=place.user.headers
    )
    assert dismissed.status == 204
    assert [m["body"] for m in await mine(place.user.headers)] == ["Hello"]
    stranger = await estate(ready=0)
    not_his = await client.post(
        f"/api/v1/me/messages/{(await to_session.json())['id']}/dismiss",
        headers=stranger.user.headers,
    )
    assert not_his.status == 404
    assert await mine(stranger.user.headers) == []

    # A message to a user with no session is kept for his next one.
    to_user = await client.post(
        "/api/v1/messages",
        json={"target_kind": "user", "target_id": stranger.user.id, "body": "Call the desk"},
        headers=place.admin.headers,
    )
    assert to_user.status == 201
    assert [m["body"] for m in await mine(stranger.user.headers)] == ["Call the desk"]


async def test_bad_messages_are_refused_at_their_field(client: Any, estate: MakeEstate) -> None:
    place = await estate(ready=0)
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"target_kind": "pool", "target_id": str(place.pool.id), "body": "   "}, 422, "/body"),
        (
            {"target_kind": "pool", "target_id": str(place.pool.id), "body": "x" * 2001},
            422,
            "/body",
        ),
        (
            {
                "target_kind": "pool",
                "target_id": str(place.pool.id),
                "body": "hi",
                "valid_for_seconds": 10**12,
            },
            422,
            "/valid_for_seconds",
        ),
        ({"target_kind": "session", "target_id": str(uuid.uuid4()), "body": "hi"}, 404, ""),
    ]
    for body, status, pointer in cases:
        response = await client.post("/api/v1/messages", json=body, headers=place.admin.headers)
        problem = await response.json()
        assert response.status == status, problem
        if pointer:
            assert pointer in [error["pointer"] for error in problem["errors"]], problem
    refused = await client.post(
        "/api/v1/messages",
        json={"target_kind": "pool", "target_id": str(place.pool.id), "body": "hi"},
        headers=place.user.headers,
    )
    assert refused.status == 403


async def test_the_help_desk_logs_a_user_off(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker, pools_runtime: Runtime
) -> None:
    place = await estate(ready=1)
    opened, grant = await connected_through(client, broker, place, "gw-logoff")
    wrong = await client.post(
        f"/api/v1/helpdesk/users/{uuid.uuid4()}/desktops/{opened['id']}/logoff",
        headers=place.admin.headers,
    )
    assert wrong.status == 404
    logged_off = await client.post(
        f"/api/v1/helpdesk/users/{place.user.id}/desktops/{opened['id']}/logoff",
        headers=place.admin.headers,
    )
    assert logged_off.status == 202
    async with pools_runtime.db.acquire() as connection:
        asked = await connection.fetchval(
            "SELECT disconnect_requested_at IS NOT NULL FROM desktop_sessions WHERE id = $1",
            grant.session_id,
        )
    assert asked
    assert "desktop.forced_logoff" in await audit_actions(pools_runtime, opened["id"])
