"""What changes to groups, members, roles and grants do to people, seen through the API."""

from __future__ import annotations

import functools
import secrets
import uuid
from collections.abc import Awaitable, Callable

from tests.support.identity import (
    Directory,
    Person,
)
from tests.support.pools import (
    pool_model,
)

from deskpool.pools import store as store_pools
from deskpool.pools.model import Pool
from deskpool.testing.processes import until


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    """Wait until ``check()`` holds: a change reaches the principal cache through Redis."""
    await until(check, "the change reaches the caller")


async def permissions(directory: Directory, person: Person) -> set[str]:
    return set((await directory.me(person))["permissions"])


async def a_pool(directory: Directory) -> Pool:
    """A stored pool (on a simulator cluster record of its own) nobody is entitled to."""
    async with directory.runtime.db.acquire() as connection:
        cluster = await connection.fetchval(
            "INSERT INTO clusters (name, driver, endpoint) VALUES ($1, 'simulator', 'sim://') "
            "RETURNING id",
            f"cluster-{secrets.token_hex(4)}",
        )
        return (await store_pools.create_pool(connection, pool_model(cluster))).pool


async def entitle(
    directory: Directory,
    caller: Person,
    pool: Pool,
    subject: str,
    subject_type: str = "group",
    expected: int = 201,
) -> None:
    """``caller`` entitles the group (or user) ``subject`` to ``pool``; answered ``expected``."""
    status, body = await directory.call(
        caller,
        "POST",
        f"/api/v1/pools/{pool.id}/entitlements",
        {"subject_type": subject_type, "subject_id": subject},
    )
    assert status == expected, body


async def offered(directory: Directory, person: Person, pool: Pool, expected: bool) -> bool:
    """Whether ``person`` is (``expected``) or is not offered ``pool`` and let open it.

    The pool has no desktop (and the API no gateway URL), so opening one answers 503 to an
    entitled caller; to anyone else it is 404, as a pool that does not exist.
    """
    status, page = await directory.call(person, "GET", "/api/v1/me/pools")
    assert status == 200, page
    listed = str(pool.id) in [item["id"] for item in page["items"]]
    status, problem = await directory.call(person, "POST", f"/api/v1/me/pools/{pool.id}/desktop")
    assert status in (404, 503), problem
    return (listed, status) == (expected, 503 if expected else 404)


async def may_use(directory: Directory, person: Person, pool: Pool) -> bool:
    return await offered(directory, person, pool, True)


async def may_not_use(directory: Directory, person: Person, pool: Pool) -> bool:
    return await offered(directory, person, pool, False)


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


async def test_membership_of_an_entitled_group_gives_and_takes_its_pools(
    directory: Directory,
) -> None:
    admin = await directory.person(roles=["platform_admin"])
    group = await directory.group(admin)
    pool = await a_pool(directory)
    await entitle(directory, admin, pool, group)
    user = await directory.person()
    assert await may_not_use(directory, user, pool)

    member_path = f"/api/v1/groups/{group}/members/{user.id}"
    assert (await directory.call(admin, "PUT", member_path))[0] == 204
    await eventually(lambda: may_use(directory, user, pool))
    # The entitlement gives the pool, not the group's nonexistent permissions.
    assert await permissions(directory, user) == set()

    assert (await directory.call(admin, "DELETE", member_path))[0] == 204
    await eventually(lambda: may_not_use(directory, user, pool))


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
        assert (await directory.call(person, "GET", "/api/v1/jobs"))[0] == 200
        assert (await directory.call(person, "GET", "/api/v1/audit-events"))[0] == 403

    path = f"/api/v1/roles/{key}"
    status, _ = await directory.call(
        admin, "PATCH", path, {"permissions": ["jobs:manage", "audit:read"]}
    )
    assert status == 200
    for person in (direct, member, claimant):
        await eventually(functools.partial(has, directory, person, "jobs:manage"))
        # What the role now holds is what its holders may do.
        assert (await directory.call(person, "GET", "/api/v1/audit-events"))[0] == 200

    # Deleting the role takes its grants with it.
    assert (await directory.call(admin, "DELETE", path))[0] == 204
    for person in (direct, member, claimant):
        await eventually(functools.partial(lacks, directory, person, "jobs:manage"))
        assert await permissions(directory, person) == set()
        assert (await directory.call(person, "GET", "/api/v1/audit-events"))[0] == 403
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
    pool = await a_pool(directory)
    await entitle(directory, admin, pool, group)
    assert "audit:read" in await permissions(directory, member)
    assert await may_use(directory, member, pool)

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
    # The member has lost the pool the group was entitled to.
    await eventually(lambda: may_not_use(directory, member, pool))
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
