"""Only those who may manage pools hand out desktops; only platform admins take from one.

The attacks of issue 21 §3, each replayed through the API: a holder of ``groups:manage`` who
adds herself to a group entitled to a pool, a holder of ``roles:manage`` who binds the claim
value every token carries to such a group, and a holder of ``users:manage`` and
``roles:manage`` who takes another platform admin's grant and disables him. Each is refused
with 403 ``escalation_denied`` naming what is missing, changes nothing, and is audited; a
caller holding what is missing makes the same change.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from tests.integration.identity.test_escalation import assert_denied
from tests.integration.identity.test_membership import a_pool, entitle, may_not_use, may_use
from tests.support.identity import (
    Directory,
    Person,
    principal_of,
)

from deskpool.actor import Actor
from deskpool.identity.rules import EscalationDenied
from deskpool.pool_admin import service as pools_service
from deskpool.pools.store_entitlements import SubjectType


@pytest.fixture
async def admin(directory: Directory) -> Person:
    return await directory.person(roles=["platform_admin"])


async def members(directory: Directory, group: str) -> list[str]:
    rows = await directory.runtime.db.fetch(
        "SELECT user_id FROM group_members WHERE group_id = $1", uuid.UUID(group)
    )
    return [str(row["user_id"]) for row in rows]


async def denials(directory: Directory, person: Person) -> int:
    count: int = await directory.runtime.db.fetchval(
        "SELECT count(*) FROM audit_events WHERE action = 'access.escalation_denied' "
        "AND actor = $1 AND outcome = 'denied'",
        person.id,
    )
    return count


async def test_a_groups_manager_cannot_join_an_entitled_group(
    directory: Directory, admin: Person
) -> None:
    group = await directory.group(admin)  # confers no permission at all
    pool = await a_pool(directory)
    await entitle(directory, admin, pool, group)
    groups_manager = await directory.person(permissions=["groups:manage"])
    other = await directory.person()

    for who in (groups_manager, other):
        path = f"/api/v1/groups/{group}/members/{who.id}"
        assert_denied(*await directory.call(groups_manager, "PUT", path), "pools:manage")
    assert await members(directory, group) == []
    assert await may_not_use(directory, groups_manager, pool)
    assert await denials(directory, groups_manager) == 2

    # A group not entitled to any pool stays the groups manager's to fill.
    plain = await directory.group(admin)
    path = f"/api/v1/groups/{plain}/members/{other.id}"
    assert (await directory.call(groups_manager, "PUT", path))[0] == 204
    # Entitling that group later needs pools:manage (the entitlement route and service).
    await entitle(directory, groups_manager, pool, plain, expected=403)
    assert await may_not_use(directory, other, pool)

    # Who may manage pools may hand the pool out through the group.
    pools_and_groups = await directory.person(permissions=["groups:manage", "pools:manage"])
    path = f"/api/v1/groups/{group}/members/{other.id}"
    assert (await directory.call(pools_and_groups, "PUT", path))[0] == 204
    assert await may_use(directory, other, pool)


async def test_a_roles_manager_cannot_bind_a_claim_to_an_entitled_group(
    directory: Directory, admin: Person
) -> None:
    group = await directory.group(admin)
    pool = await a_pool(directory)
    await entitle(directory, admin, pool, group)
    roles_manager = await directory.person(permissions=["roles:manage"])
    everyone = f"everyone-{uuid.uuid4().hex[:8]}"  # the claim value every token carries
    body = {"claim_value": everyone, "group_id": group}

    status, problem = await directory.call(
        roles_manager, "POST", "/api/v1/oidc-group-bindings", body
    )
    assert_denied(status, problem, "pools:manage")
    nobody = await directory.person(groups=[everyone])
    assert await may_not_use(directory, nobody, pool)
    assert not await directory.runtime.db.fetchval(
        "SELECT true FROM oidc_group_bindings WHERE claim_value = $1", everyone
    )
    assert await denials(directory, roles_manager) == 1

    holder = await directory.person(permissions=["roles:manage", "pools:manage"])
    status, created = await directory.call(holder, "POST", "/api/v1/oidc-group-bindings", body)
    assert status == 201, created
    assert await may_use(directory, nobody, pool)


async def test_enabling_or_disabling_a_user_entitled_to_a_pool_needs_pools_manage(
    directory: Directory, admin: Person
) -> None:
    pool = await a_pool(directory)
    group = await directory.group(admin)
    await entitle(directory, admin, pool, group)
    direct = await directory.person()
    await entitle(directory, admin, pool, direct.id, "user")
    member = await directory.person(member_of=[group])
    users_manager = await directory.person(permissions=["users:manage"])
    for person in (direct, member):
        path = f"/api/v1/users/{person.id}"
        # Disabling him is judged the same way (issue 33 §3).
        assert_denied(
            *await directory.call(users_manager, "PATCH", path, {"disabled": True}),
            "pools:manage",
        )
        assert (await directory.call(admin, "PATCH", path, {"disabled": True}))[0] == 200
        assert_denied(
            *await directory.call(users_manager, "PATCH", path, {"disabled": False}),
            "pools:manage",
        )
        assert (await directory.call(admin, "PATCH", path, {"disabled": False}))[0] == 200


async def test_the_entitlement_service_checks_pools_manage(
    directory: Directory, admin: Person
) -> None:
    pool = await a_pool(directory)
    group = await directory.group(admin)
    caller = principal_of(await directory.me(admin), "groups:manage")
    with pytest.raises(EscalationDenied) as refused:
        await pools_service.grant_entitlement(
            directory.runtime,
            Actor.of_principal(caller),
            pool.id,
            SubjectType.GROUP,
            uuid.UUID(group),
        )
    assert refused.value.missing == ["pools:manage"]
    assert not await directory.runtime.db.fetchval(
        "SELECT true FROM pool_entitlements WHERE pool_id = $1", pool.id
    )


async def test_only_a_platform_admin_takes_from_a_platform_admin(
    directory: Directory, admin: Person
) -> None:
    other_admin = await directory.person(roles=["platform_admin"])
    grant_id = await directory.runtime.db.fetchval(
        "SELECT id FROM grants WHERE subject_id = $1", uuid.UUID(other_admin.id)
    )
    manager = await directory.person(permissions=["users:manage", "roles:manage"])

    async def refused(method: str, path: str, body: Any = None) -> None:
        assert_denied(*await directory.call(manager, method, path, body), "platform:admin")

    # Neither his grant of platform_admin nor any other grant of his.
    await refused("DELETE", f"/api/v1/grants/{grant_id}")
    status, other = await directory.call(
        admin,
        "POST",
        "/api/v1/grants",
        {"subject_type": "user", "subject_id": other_admin.id, "permission": "users:read"},
    )
    assert status == 201, other
    await refused("DELETE", f"/api/v1/grants/{other['id']}")
    await refused("PATCH", f"/api/v1/users/{other_admin.id}", {"disabled": True})
    assert (await directory.me(other_admin))["is_platform_admin"]
    assert await denials(directory, manager) == 3

    # An admin by a group: removing the member, deleting the group or its grant.
    admins = await directory.group(admin, {"role_key": "platform_admin"})
    by_group = await directory.person(member_of=[admins])
    group_grant = await directory.runtime.db.fetchval(
        "SELECT id FROM grants WHERE subject_id = $1", uuid.UUID(admins)
    )
    groups_manager = await directory.person(permissions=["groups:manage", "roles:manage"])
    for method, path in (
        ("DELETE", f"/api/v1/groups/{admins}/members/{by_group.id}"),
        ("DELETE", f"/api/v1/groups/{admins}"),
        ("DELETE", f"/api/v1/grants/{group_grant}"),
    ):
        assert_denied(*await directory.call(groups_manager, method, path), "platform:admin")
    assert (await directory.me(by_group))["is_platform_admin"]

    # A custom role an admin holds: taking permissions from it, or deleting it.
    key = f"role-{uuid.uuid4().hex[:8]}"
    status, _ = await directory.call(
        admin, "POST", "/api/v1/roles", {"key": key, "permissions": ["jobs:read"]}
    )
    assert status == 201
    status, _ = await directory.call(
        admin,
        "POST",
        "/api/v1/grants",
        {"subject_type": "user", "subject_id": other_admin.id, "role_key": key},
    )
    assert status == 201
    roles_manager = await directory.person(permissions=["roles:manage", "jobs:manage"])
    path = f"/api/v1/roles/{key}"
    assert_denied(
        *await directory.call(roles_manager, "PATCH", path, {"permissions": ["roles:read"]}),
        "platform:admin",
    )
    assert_denied(
        *await directory.call(roles_manager, "DELETE", f"/api/v1/roles/{key}"), "platform:admin"
    )

    # The same changes on someone who is no platform admin stay the managers' to make.
    plain = await directory.person(permissions=["jobs:read"])
    plain_grant = await directory.runtime.db.fetchval(
        "SELECT id FROM grants WHERE subject_id = $1", uuid.UUID(plain.id)
    )
    assert (await directory.call(manager, "DELETE", f"/api/v1/grants/{plain_grant}"))[0] == 204
    path = f"/api/v1/users/{plain.id}"
    assert (await directory.call(manager, "PATCH", path, {"disabled": True}))[0] == 200

    # And a platform admin does it all.
    assert (await directory.call(admin, "DELETE", f"/api/v1/grants/{grant_id}"))[0] == 204
    path = f"/api/v1/users/{other_admin.id}"
    assert (await directory.call(admin, "PATCH", path, {"disabled": True}))[0] == 200
