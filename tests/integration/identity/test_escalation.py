"""Nobody hands out more than they hold: every path that confers a permission, through the API.

Each case has a caller who holds the operation's permission (so the route lets it in) but not
what the change would confer: it gets 403 ``escalation_denied`` naming the missing permissions,
nothing changes, and the refusal is in the audit trail. A caller who holds everything conferred
(or a platform admin) makes the same change.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from tests.support.identity import (
    Directory,
    Person,
    principal_of,
)

from deskpool.actor import Actor
from deskpool.identity import service
from deskpool.identity.rules import EscalationDenied
from deskpool.testing.pytest_plugin import served


def assert_denied(status: int, body: Any, *missing: str) -> None:
    assert status == 403, body
    assert body["code"] == "escalation_denied", body
    assert body["missing_permissions"] == sorted(missing), body
    for name in missing:
        assert name in body["detail"]


async def grants_of(directory: Directory, subject_id: str) -> list[tuple[str, str]]:
    rows = await directory.runtime.db.fetch(
        "SELECT coalesce(role_key, ''), coalesce(permission, '') FROM grants WHERE subject_id = $1",
        uuid.UUID(subject_id),
    )
    return sorted((row[0], row[1]) for row in rows)


@pytest.fixture
async def admin(directory: Directory) -> Person:
    return await directory.person(roles=["platform_admin"])


async def test_granting_a_role_or_permission(directory: Directory, admin: Person) -> None:
    roles_manager = await directory.person(permissions=["roles:manage"])
    target = await directory.person()

    async def grant(caller: Person, who: Person, **what: str) -> tuple[int, Any]:
        body = {"subject_type": "user", "subject_id": who.id, **what}
        return await directory.call(caller, "POST", "/api/v1/grants", body)

    # Themselves or anyone: platform_admin, platform:admin, a role or a permission not held.
    for who in (roles_manager, target):
        assert_denied(*await grant(roles_manager, who, role_key="platform_admin"), "platform:admin")
        assert_denied(
            *await grant(roles_manager, who, permission="platform:admin"), "platform:admin"
        )
        assert_denied(*await grant(roles_manager, who, permission="pools:manage"), "pools:manage")
    status, body = await grant(roles_manager, target, role_key="auditor")
    assert_denied(status, body, *[p for p in body["missing_permissions"]])
    assert "roles:read" not in body["missing_permissions"]  # held: manage implies read
    assert {"pools:read", "audit:read"} <= set(body["missing_permissions"])
    assert await grants_of(directory, target.id) == []
    assert await grants_of(directory, roles_manager.id) == [("", "roles:manage")]

    # What the caller holds, it may hand out (roles:manage implies roles:read).
    status, body = await grant(roles_manager, target, permission="roles:read")
    assert status == 201, body
    holder = await directory.person(permissions=["roles:manage", "pools:manage"])
    status, body = await grant(holder, target, permission="pools:manage")
    assert status == 201, body
    # A platform admin hands out anything.
    status, body = await grant(admin, target, role_key="platform_admin")
    assert status == 201, body

    # The refusals are in the audit trail, by the caller, as denied.
    rows = await directory.runtime.db.fetch(
        "SELECT details FROM audit_events WHERE action = 'access.escalation_denied' AND actor = $1",
        roles_manager.id,
    )
    assert len(rows) == 7


async def test_group_grants_are_checked_like_user_grants(
    directory: Directory, admin: Person
) -> None:
    roles_manager = await directory.person(permissions=["roles:manage"])
    group = await directory.group(admin)
    status, body = await directory.call(
        roles_manager,
        "POST",
        "/api/v1/grants",
        {"subject_type": "group", "subject_id": group, "role_key": "operator"},
    )
    assert status == 403
    assert "clusters:manage" in body["missing_permissions"]


async def test_creating_a_role(directory: Directory, admin: Person) -> None:
    roles_manager = await directory.person(permissions=["roles:manage"])
    key = f"role-{uuid.uuid4().hex[:8]}"

    async def create(caller: Person, *permissions: str) -> tuple[int, Any]:
        body = {"key": key, "permissions": list(permissions)}
        return await directory.call(caller, "POST", "/api/v1/roles", body)

    # A role may be claimed in a token (AUTH_OIDC_ROLES_CLAIM) as soon as it exists: creating
    # one confers its permissions, granted or not.
    assert_denied(*await create(roles_manager, "platform:admin"), "platform:admin")
    assert_denied(*await create(roles_manager, "roles:read", "jobs:manage"), "jobs:manage")
    status, body = await directory.call(admin, "GET", f"/api/v1/roles/{key}")
    assert status == 404
    status, body = await create(roles_manager, "roles:read", "roles:manage")
    assert status == 201, body
    status, body = await directory.call(
        admin, "POST", "/api/v1/roles", {"key": f"{key}-x", "permissions": ["platform:admin"]}
    )
    assert status == 201, body


async def test_changing_a_role_that_others_hold(directory: Directory, admin: Person) -> None:
    key = f"role-{uuid.uuid4().hex[:8]}"
    status, _ = await directory.call(
        admin, "POST", "/api/v1/roles", {"key": key, "permissions": ["pools:read"]}
    )
    assert status == 201
    holder = await directory.person(roles=[key])
    roles_manager = await directory.person(permissions=["roles:manage", "pools:read"])

    async def change(caller: Person, *permissions: str) -> tuple[int, Any]:
        body = {"permissions": list(permissions)}
        return await directory.call(caller, "PATCH", f"/api/v1/roles/{key}", body)

    assert_denied(*await change(roles_manager, "pools:read", "platform:admin"), "platform:admin")
    assert_denied(*await change(roles_manager, "pools:manage"), "pools:manage")
    me = await directory.me(holder)
    assert me["permissions"] == ["pools:read"]
    # Adding what the caller holds, or taking permissions away, is allowed.
    status, body = await change(roles_manager, "pools:read", "roles:read")
    assert status == 200, body
    status, body = await directory.call(
        roles_manager, "PATCH", f"/api/v1/roles/{key}", {"description": "changed"}
    )
    assert status == 200, body
    status, body = await change(admin, "pools:read", "platform:admin")
    assert status == 200, body


async def test_adding_a_group_member(directory: Directory, admin: Person) -> None:
    admins = await directory.group(admin, {"role_key": "platform_admin"})
    operators = await directory.group(admin, {"role_key": "operator"})
    empty = await directory.group(admin)
    groups_manager = await directory.person(permissions=["groups:manage"])
    other = await directory.person()

    async def add(caller: Person, group: str, who: Person) -> tuple[int, Any]:
        return await directory.call(caller, "PUT", f"/api/v1/groups/{group}/members/{who.id}")

    for who in (groups_manager, other):
        assert_denied(*await add(groups_manager, admins, who), "platform:admin")
        status, body = await add(groups_manager, operators, who)
        assert status == 403
        assert "pools:manage" in body["missing_permissions"]
    members = await directory.runtime.db.fetchval(
        "SELECT count(*) FROM group_members WHERE group_id = ANY($1::uuid[])",
        [uuid.UUID(admins), uuid.UUID(operators)],
    )
    assert members == 0
    assert (await add(groups_manager, empty, other))[0] == 204
    assert (await add(admin, admins, other))[0] == 204
    assert (await directory.me(other))["is_platform_admin"]


async def test_binding_a_claim_to_a_group(directory: Directory, admin: Person) -> None:
    admins = await directory.group(admin, {"role_key": "platform_admin"})
    roles_manager = await directory.person(permissions=["roles:manage"])
    claim = f"claim-{uuid.uuid4().hex[:8]}"
    body = {"claim_value": claim, "group_id": admins}
    assert_denied(
        *await directory.call(roles_manager, "POST", "/api/v1/oidc-group-bindings", body),
        "platform:admin",
    )
    claimant = await directory.person(groups=[claim])
    assert not (await directory.me(claimant))["is_platform_admin"]
    status, created = await directory.call(admin, "POST", "/api/v1/oidc-group-bindings", body)
    assert status == 201, created
    assert created["source"] == "api"


async def test_enabling_a_user_confers_what_it_holds(directory: Directory, admin: Person) -> None:
    other_admin = await directory.person(roles=["platform_admin"])
    users_manager = await directory.person(permissions=["users:manage"])
    path = f"/api/v1/users/{other_admin.id}"
    assert (await directory.call(admin, "PATCH", path, {"disabled": True}))[0] == 200
    assert_denied(
        *await directory.call(users_manager, "PATCH", path, {"disabled": False}), "platform:admin"
    )
    assert (await directory.call(admin, "PATCH", path, {"disabled": False}))[0] == 200
    # A plain user is enabled by anyone who may manage users.
    plain = await directory.person()
    plain_path = f"/api/v1/users/{plain.id}"
    assert (await directory.call(users_manager, "PATCH", plain_path, {"disabled": True}))[0] == 200
    assert (await directory.call(users_manager, "PATCH", plain_path, {"disabled": False}))[0] == 200


async def test_the_rule_is_in_the_service_not_only_the_api(
    directory: Directory, admin: Person
) -> None:
    roles_manager = await directory.person(permissions=["roles:manage"])
    me = await directory.me(roles_manager)
    caller = principal_of(me, *me["permissions"])
    with pytest.raises(EscalationDenied) as refused:
        await service.create_grant(
            directory.runtime,
            Actor.of_principal(caller),
            subject_type="user",
            subject_id=uuid.UUID(roles_manager.id),
            role_key="platform_admin",
        )
    assert refused.value.missing == ["platform:admin"]
    # A claimed role counts as held: the service resolves the caller's token claims too.
    claimed = dataclasses.replace(caller, claimed_roles=("platform_admin",))
    grant = await service.create_grant(
        directory.runtime,
        Actor.of_principal(claimed),
        subject_type="user",
        subject_id=uuid.UUID(roles_manager.id),
        permission="jobs:read",
    )
    assert grant["permission"] == "jobs:read"


async def test_bootstrap_bindings_are_configuration_not_a_caller(
    secure_environ: dict[str, str], aiohttp_client: Any, bearer: Any, identity_provider: Any
) -> None:
    """``AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS`` is applied at startup on the operator's authority.

    It gives nobody a way around the rule, and the API cannot delete what it configures.
    """
    tag = uuid.uuid4().hex[:8]
    claim, key = f"idp-admins-{tag}", f"admins-{tag}"
    environ = {**secure_environ, "AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS": f"{claim}={key}"}
    async with served(environ, aiohttp_client) as (runtime, client):
        directory = Directory(runtime, client, identity_provider.issuer_url, bearer)
        binding = await runtime.db.fetchrow(
            "SELECT b.id, b.source, g.id AS group_id FROM oidc_group_bindings b "
            "JOIN groups g ON g.id = b.group_id WHERE b.claim_value = $1 AND g.key = $2",
            claim,
            key,
        )
        assert binding is not None
        assert binding["source"] == "bootstrap"
        created = await runtime.db.fetchrow(
            "SELECT actor, outcome FROM audit_events WHERE action = 'oidc_group_binding.create' "
            "AND resource_id = $1",
            str(binding["id"]),
        )
        assert dict(created) == {"actor": "system:bootstrap", "outcome": "success"}

        # The binding confers what its group holds; giving the group more is a grant like any.
        admin = await directory.person(roles=["platform_admin"])
        roles_manager = await directory.person(permissions=["roles:manage"])
        grant = {"subject_type": "group", "subject_id": str(binding["group_id"])}
        assert_denied(
            *await directory.call(
                roles_manager, "POST", "/api/v1/grants", {**grant, "role_key": "platform_admin"}
            ),
            "platform:admin",
        )
        status, _ = await directory.call(
            admin, "POST", "/api/v1/grants", {**grant, "role_key": "platform_admin"}
        )
        assert status == 201
        claimant = await directory.person(groups=[claim])
        assert (await directory.me(claimant))["is_platform_admin"]
        # Nor can a caller add itself to the configured group.
        groups_manager = await directory.person(permissions=["groups:manage"])
        assert_denied(
            *await directory.call(
                groups_manager,
                "PUT",
                f"/api/v1/groups/{binding['group_id']}/members/{groups_manager.id}",
            ),
            "platform:admin",
        )
        # The API cannot delete a configured binding.
        status, body = await directory.call(
            admin, "DELETE", f"/api/v1/oidc-group-bindings/{binding['id']}"
        )
        assert status == 409
        assert body["code"] == "configured_binding"

    # Removed from the setting, it is removed at the next start, and that is audited.
    async with served(secure_environ, aiohttp_client) as (runtime, _):
        assert not await runtime.db.fetchval(
            "SELECT true FROM oidc_group_bindings WHERE id = $1", binding["id"]
        )
        deleted = await runtime.db.fetchval(
            "SELECT actor FROM audit_events WHERE action = 'oidc_group_binding.delete' "
            "AND resource_id = $1",
            str(binding["id"]),
        )
        assert deleted == "system:bootstrap"
