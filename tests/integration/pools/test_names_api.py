"""Names where the API gave only ids (issue 37), each page with one query per kind of name.

Sessions, desktops, audit events, grants and the image history name their users and pools.

A user is shown by display name and email; an actor that is not a user (``system:...``) and a
user since deleted are left unnamed (null), never guessed.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.pools import Caller, add_desktops, pool_body

from deskpool.pools import store as store_pools
from deskpool.pools.model import DesktopState
from deskpool.runtime import Runtime
from deskpool.sessions import store as sessions_store

NewCaller = Callable[..., Awaitable[Caller]]
NewCluster = Callable[..., Awaitable[str]]


async def get(client: Any, path: str, caller: Caller) -> Any:
    response = await client.get(path, headers=caller.headers)
    assert response.status == 200, await response.text()
    return await response.json()


async def name_user(runtime: Runtime, user_id: str, name: str | None, email: str) -> None:
    async with runtime.db.acquire() as connection:
        await connection.execute(
            "UPDATE users SET display_name = $2, email = $3 WHERE id = $1",
            uuid.UUID(user_id),
            name,
            email,
        )


async def test_pages_name_their_users_and_pools(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster, pools_runtime: Runtime
) -> None:
    admin = await new_caller(
        "pools:manage", "desktops:read", "sessions:read", "audit:read", "roles:read"
    )
    user = await new_caller()
    nameless = await new_caller()
    await name_user(pools_runtime, admin.id, "Ada Admin", "ada@example.test")
    await name_user(pools_runtime, user.id, "Desk User", "desk@example.test")
    await name_user(pools_runtime, nameless.id, None, "only-email@example.test")
    cluster_id = await api_cluster(templates=[{"name": "ubuntu-22.04"}])
    response = await client.post(
        "/api/v1/pools",
        headers=admin.headers,
        json=pool_body(cluster_id, name="named-pool", kind="persistent", spare=0, min_size=0),
    )
    assert response.status == 201, await response.text()
    pool_id = (await response.json())["id"]
    async with pools_runtime.db.acquire() as connection:
        pool = await store_pools.get_pool(connection, uuid.UUID(pool_id))
        assert pool is not None
        (mine,) = await add_desktops(
            connection, pool, 1, DesktopState.IN_USE, assigned_user=uuid.UUID(user.id)
        )
        (other,) = await add_desktops(
            connection, pool, 1, DesktopState.IN_USE, assigned_user=uuid.UUID(nameless.id)
        )
        for owner, desktop in ((user, mine), (nameless, other)):
            await sessions_store.insert_session(
                connection,
                user_id=uuid.UUID(owner.id),
                desktop_id=desktop,
                pool_id=uuid.UUID(pool_id),
                desktop_name=f"d-{owner.id[:4]}",
                protocol="rdp",
                gateway_id="gw-1",
            )

    sessions = await get(client, f"/api/v1/sessions?pool_id={pool_id}", admin)
    named = {(s["user_name"], s["user_email"], s["pool_name"]) for s in sessions["items"]}
    assert named == {
        ("Desk User", "desk@example.test", "named-pool"),
        ("only-email@example.test", "only-email@example.test", "named-pool"),
    }
    one = next(s for s in sessions["items"] if s["user_id"] == user.id)
    shown = await get(client, f"/api/v1/sessions/{one['id']}", admin)
    assert (shown["user_name"], shown["pool_name"]) == ("Desk User", "named-pool")

    desktops = await get(client, f"/api/v1/desktops?assigned_user={user.id}", admin)
    ((desktop),) = desktops["items"]
    assert (
        desktop["assigned_user_name"],
        desktop["assigned_user_email"],
        desktop["pool_name"],
    ) == ("Desk User", "desk@example.test", "named-pool")

    images = await get(client, f"/api/v1/pools/{pool_id}/images", admin)
    assert [(i["set_by"], i["set_by_name"]) for i in images["items"]] == [(admin.id, "Ada Admin")]

    # The audit trail: the actor and the resource by name; the ids its details hold, named.
    events = await get(client, "/api/v1/audit-events?action=pool.create", admin)
    created = next(e for e in events["items"] if e["resource_id"] == pool_id)
    assert (created["actor_name"], created["actor_email"], created["resource_name"]) == (
        "Ada Admin",
        "ada@example.test",
        "named-pool",
    )
    # Found by the actor's email or part of the name, as by the id.
    for actor in ("ada@example.test", "Ada", admin.id):
        found = await get(client, f"/api/v1/audit-events?action=pool.create&actor={actor}", admin)
        assert [e["resource_id"] for e in found["items"]] == [pool_id], actor
    nobody = await get(client, "/api/v1/audit-events?action=pool.create&actor=", admin)
    assert nobody["items"] == []
    async with pools_runtime.db.acquire() as connection:
        await connection.execute(
            """INSERT INTO audit_events (actor, action, resource_type, resource_id, outcome,
                                         details)
               VALUES ('system:test', 'test.names', 'pools', $1, 'success', $2::jsonb)""",
            pool_id,
            f'{{"user": "{user.id}", "nested": {{"pool": "{pool_id}"}}, "gone": "{uuid.uuid4()}"}}',
        )
    (event,) = (await get(client, "/api/v1/audit-events?action=test.names", admin))["items"]
    assert (event["actor_name"], event["resource_name"]) == (None, "named-pool")
    assert event["names"] == {user.id: "Desk User", pool_id: "named-pool"}

    grants = await get(client, f"/api/v1/grants?subject_id={admin.id}", admin)
    assert {(g["subject_name"], g["subject_email"]) for g in grants["items"]} == {
        ("Ada Admin", "ada@example.test")
    }


async def test_a_person_is_entitled_before_the_first_sign_in(
    client: Any,
    new_caller: NewCaller,
    api_cluster: NewCluster,
    bearer: Callable[..., dict[str, str]],
) -> None:
    """A person added by the issuer's subject, then entitled, finds the pool at first sign-in.

    Adding the person grants nothing by itself; only the entitlement (pools:manage) hands out.
    """
    admin = await new_caller("users:manage", "users:read", "pools:manage", "audit:read")
    reader = await new_caller("users:read")
    body = {"subject": "new-person-7", "display_name": "New Person"}
    assert (await client.post("/api/v1/users", headers=reader.headers, json=body)).status == 403
    response = await client.post("/api/v1/users", headers=admin.headers, json=body)
    assert response.status == 201, await response.text()
    added = await response.json()
    assert (added["subject"], added["display_name"]) == ("new-person-7", "New Person")
    again = await client.post("/api/v1/users", headers=admin.headers, json=body)
    assert again.status == 409
    assert (await again.json())["code"] == "user_exists"
    found = await get(client, "/api/v1/users?q=new%20person", admin)
    assert [u["id"] for u in found["items"]] == [added["id"]]

    cluster_id = await api_cluster(templates=[{"name": "ubuntu-22.04"}])
    response = await client.post(
        "/api/v1/pools", headers=admin.headers, json=pool_body(cluster_id, name="ahead-pool")
    )
    pool_id = (await response.json())["id"]
    entitled = await client.post(
        f"/api/v1/pools/{pool_id}/entitlements",
        headers=admin.headers,
        json={"subject_type": "user", "subject_id": added["id"]},
    )
    assert entitled.status == 201, await entitled.text()

    person = bearer("new-person-7", email="new@example.test", name="New Person")
    me = await (await client.get("/api/v1/me", headers=person)).json()
    assert me["id"] == added["id"]
    assert me["permissions"] == []
    pools = await (await client.get("/api/v1/me/pools", headers=person)).json()
    assert [p["id"] for p in pools["items"]] == [pool_id]
    audit = await get(client, f"/api/v1/audit-events?resource_id={added['id']}", admin)
    assert [e["action"] for e in audit["items"]] == ["user.create"]
