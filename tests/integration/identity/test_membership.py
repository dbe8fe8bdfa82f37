"""What changes to groups, members, roles and grants do to people, seen through the API."""

from __future__ import annotations

import asyncio
import functools
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable

from tests.integration.identity.conftest import Directory, Person
from tests.integration.pools.conftest import pool_model

from deskpool.pools import store_pools


async def eventually(check: Callable[[], Awaitable[bool]], seconds: float = 5.0) -> None:
    """Wait until ``check()`` holds: a change reaches the principal cache through Redis."""
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, "the change never reached the caller"
        await asyncio.sleep(0.02)


async def permissions(directory: Directory, person: Person) -> set[str]:
    return set((await directory.me(person))["permissions"])


async def test_membership_gives_and_takes_the_groups_permissions(directory: Directory) -> None:
    admin = await directory.person(roles=["platform_admin"])
    operators = await directory.group(admin, {"role_key": "operator"})
    auditors = await directory.group(admin, {"permission": "audit:read"})
    user = await directory.person()
    assert await permissions(directory, user) == set()

    member_path = f"/api/v1/groups/{operators}/members/{user.id}"
    assert (await directory.call(admin, "PUT", member_path))[0] == 204
    await eventually(lambda: has(directory, user, "pools:manage"))
    assert (await directory.call(user, "GET", "/api/v1/pools"))[0] == 200
    me = await directory.me(user)
    assert [(group["id"], group["via"]) for group in me["groups"]] == [(operators, "member")]
    assert "operator" in me["roles"]

    # Members are listed; a second group adds to the first.
    status, page = await directory.call(admin, "GET", f"/api/v1/groups/{operators}/members")
    assert status == 200
    assert [member["user_id"] for member in page["items"]] == [user.id]
    auditor_path = f"/api/v1/groups/{auditors}/members/{user.id}"
    assert (await directory.call(admin, "PUT", auditor_path))[0] == 204
    await eventually(lambda: has(directory, user, "audit:read"))

    # Removed from the operators, the user keeps only what the auditors hold.
    assert (await directory.call(admin, "DELETE", member_path))[0] == 204
    await eventually(lambda: lacks(directory, user, "pools:manage"))
    assert await permissions(directory, user) == {"audit:read"}
    assert (await directory.call(user, "GET", "/api/v1/pools"))[0] == 403
    assert (await directory.call(admin, "DELETE", member_path))[0] == 404


async def test_a_role_change_reaches_everyone_holding_it(directory: Directory) -> None:
    admin = await directory.person(roles=["platform_admin"])
    key = f"role-{secrets.token_hex(4)}"
    status, _ = await directory.call(
        admin, "POST", "/api/v1/roles", {"key": key, "permissions": ["jobs:read"]}
    )
    assert status == 201
    group = await directory.group(admin, {"role_key": key})
    direct = await directory.person(roles=[key])
    member = await directory.person(member_of=[group])
    claim = f"claim-{secrets.token_hex(4)}"
    status, _ = await directory.call(
        admin, "POST", "/api/v1/oidc-group-bindings", {"claim_value": claim, "group_id": group}
    )
    assert status == 201
    claimant = await directory.person(groups=[claim])
    for person in (direct, member, claimant):
        assert await permissions(directory, person) == {"jobs:read"}

    path = f"/api/v1/roles/{key}"
    status, _ = await directory.call(admin, "PATCH", path, {"permissions": ["jobs:manage"]})
    assert status == 200
    for person in (direct, member, claimant):
        await eventually(functools.partial(has, directory, person, "jobs:manage"))

    # Deleting the role takes its grants with it.
    assert (await directory.call(admin, "DELETE", path))[0] == 204
    for person in (direct, member, claimant):
        await eventually(functools.partial(lacks, directory, person, "jobs:read"))
    assert not await directory.runtime.db.fetchval(
        "SELECT count(*) FROM grants WHERE role_key = $1", key
    )


async def test_revoking_a_grant_and_disabling_a_user(directory: Directory) -> None:
    admin = await directory.person(roles=["platform_admin"])
    user = await directory.person()
    status, grant = await directory.call(
        admin,
        "POST",
        "/api/v1/grants",
        {"subject_type": "user", "subject_id": user.id, "permission": "clusters:read"},
    )
    assert status == 201
    assert grant["source"] == "api"
    await eventually(lambda: has(directory, user, "clusters:read"))
    assert (await directory.call(admin, "DELETE", f"/api/v1/grants/{grant['id']}"))[0] == 204
    await eventually(lambda: lacks(directory, user, "clusters:read"))

    path = f"/api/v1/users/{user.id}"
    status, body = await directory.call(admin, "PATCH", path, {"disabled": True})
    assert status == 200
    assert body["disabled"] is True

    async def refused() -> bool:
        return (await directory.client.get("/api/v1/me", headers=user.headers)).status == 403

    await eventually(refused)
    assert (await directory.call(admin, "PATCH", path, {"disabled": False}))[0] == 200
    await eventually(lambda: enabled(directory, user))


async def test_deleting_a_group_removes_its_members_grants_bindings_and_entitlements(
    directory: Directory,
) -> None:
    admin = await directory.person(roles=["platform_admin"])
    group = await directory.group(admin, {"role_key": "auditor"})
    member = await directory.person(member_of=[group])
    claim = f"claim-{secrets.token_hex(4)}"
    status, binding = await directory.call(
        admin, "POST", "/api/v1/oidc-group-bindings", {"claim_value": claim, "group_id": group}
    )
    assert status == 201
    async with directory.runtime.db.acquire() as connection:
        cluster = await connection.fetchval(
            "INSERT INTO clusters (name, driver, endpoint) VALUES ($1, 'simulator', 'sim://') "
            "RETURNING id",
            f"cluster-{secrets.token_hex(4)}",
        )
        pool = (await store_pools.create_pool(connection, pool_model(cluster))).pool
    status, _ = await directory.call(
        admin,
        "POST",
        f"/api/v1/pools/{pool.id}/entitlements",
        {"subject_type": "group", "subject_id": group},
    )
    assert status == 201
    assert "audit:read" in await permissions(directory, member)

    assert (await directory.call(admin, "DELETE", f"/api/v1/groups/{group}"))[0] == 204
    assert (await directory.call(admin, "GET", f"/api/v1/groups/{group}"))[0] == 404
    status, page = await directory.call(admin, "GET", f"/api/v1/pools/{pool.id}/entitlements")
    assert status == 200
    assert page["items"] == []
    db = directory.runtime.db
    group_id = uuid.UUID(group)
    assert not await db.fetchval("SELECT count(*) FROM grants WHERE subject_id = $1", group_id)
    assert not await db.fetchval("SELECT count(*) FROM group_members WHERE group_id = $1", group_id)
    assert not await db.fetchval(
        "SELECT count(*) FROM oidc_group_bindings WHERE id = $1", uuid.UUID(binding["id"])
    )
    await eventually(lambda: lacks(directory, member, "audit:read"))
    event = await db.fetchrow(
        "SELECT actor, details FROM audit_events WHERE action = 'group.delete' "
        "AND resource_id = $1",
        group,
    )
    assert event["actor"] == admin.id


async def has(directory: Directory, person: Person, permission: str) -> bool:
    return permission in await permissions(directory, person)


async def lacks(directory: Directory, person: Person, permission: str) -> bool:
    return permission not in await permissions(directory, person)


async def enabled(directory: Directory, person: Person) -> bool:
    return (await directory.client.get("/api/v1/me", headers=person.headers)).status == 200
