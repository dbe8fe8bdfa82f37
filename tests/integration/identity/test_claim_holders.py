"""Enabling or disabling a user counts what the user holds by an OIDC group claim too.

The attack of issue 33 §3: an administrator disabled a user who is a platform admin only
through a claim binding (his token's groups claim names a value bound to a group granted
``platform_admin``), and a holder of only ``users:manage`` enabled him again, so his ``/me``
showed ``platform:admin``; the same with a pool entitlement reached through a claim binding;
and that holder could disable the claim admin in the first place. What the user holds is judged
from the claims of his last sign-in, which the users table keeps.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from tests.integration.identity.test_escalation import assert_denied
from tests.integration.identity.test_membership import a_pool, entitle
from tests.support.identity import Directory, Person, principal_of

from deskpool.actor import Actor
from deskpool.identity.rules import EscalationDenied


@pytest.fixture
async def admin(directory: Directory) -> Person:
    return await directory.person(roles=["platform_admin"])


async def bound_claim(directory: Directory, admin: Person, group: str) -> str:
    """A new claim value, bound by ``admin`` to ``group``."""
    claim = f"claim-{uuid.uuid4().hex[:8]}"
    body = {"claim_value": claim, "group_id": group}
    status, created = await directory.call(admin, "POST", "/api/v1/oidc-group-bindings", body)
    assert status == 201, created
    return claim


async def claim_admin(directory: Directory, admin: Person) -> Person:
    """A user who is a platform admin only by the group claim of his token (signed in once)."""
    admins = await directory.group(admin, {"role_key": "platform_admin"})
    claim = await bound_claim(directory, admin, admins)
    person = await directory.person(groups=[claim])
    assert (await directory.me(person))["is_platform_admin"]
    return person


async def disabled(directory: Directory, person: Person) -> bool:
    value: bool = await directory.runtime.db.fetchval(
        "SELECT disabled FROM users WHERE id = $1", uuid.UUID(person.id)
    )
    return value


async def patch(directory: Directory, caller: Person, who: Person, off: bool) -> tuple[int, Any]:
    return await directory.call(caller, "PATCH", f"/api/v1/users/{who.id}", {"disabled": off})


async def test_a_users_manager_cannot_enable_a_claim_admin_again(
    directory: Directory, admin: Person
) -> None:
    target = await claim_admin(directory, admin)
    users_manager = await directory.person(permissions=["users:manage"])
    assert (await patch(directory, admin, target, True))[0] == 200

    assert_denied(*await patch(directory, users_manager, target, False), "platform:admin")
    assert await disabled(directory, target)
    status, body = await directory.call(target, "GET", "/api/v1/me")
    assert status == 403, body
    assert "platform:admin" not in str(body)

    # A platform admin enables him; his /me shows platform:admin again.
    assert (await patch(directory, admin, target, False))[0] == 200
    assert "platform:admin" in (await directory.me(target))["permissions"]


async def test_a_users_manager_cannot_disable_a_claim_admin(
    directory: Directory, admin: Person
) -> None:
    target = await claim_admin(directory, admin)
    users_manager = await directory.person(permissions=["users:manage"])

    assert_denied(*await patch(directory, users_manager, target, True), "platform:admin")
    assert not await disabled(directory, target)
    assert (await directory.me(target))["is_platform_admin"]
    refusal = await directory.runtime.db.fetchrow(
        "SELECT resource_type, details FROM audit_events WHERE actor = $1 "
        "AND action = 'access.escalation_denied' AND outcome = 'denied'",
        users_manager.id,
    )
    assert refusal is not None
    assert refusal["resource_type"] == "users"
    assert '"platform:admin"' in refusal["details"]

    assert (await patch(directory, admin, target, True))[0] == 200
    assert await disabled(directory, target)


async def test_a_pool_reached_by_a_claim_needs_pools_manage(
    directory: Directory, admin: Person
) -> None:
    pool = await a_pool(directory)
    users_group = await directory.group(admin)
    await entitle(directory, admin, pool, users_group)
    claim = await bound_claim(directory, admin, users_group)
    target = await directory.person(groups=[claim])
    status, page = await directory.call(target, "GET", "/api/v1/me/pools")
    assert status == 200, page
    assert [item["id"] for item in page["items"]] == [str(pool.id)]
    users_manager = await directory.person(permissions=["users:manage"])

    assert_denied(*await patch(directory, users_manager, target, True), "pools:manage")
    assert not await disabled(directory, target)
    assert (await patch(directory, admin, target, True))[0] == 200
    assert_denied(*await patch(directory, users_manager, target, False), "pools:manage")
    assert await disabled(directory, target)
    assert (await directory.call(target, "GET", "/api/v1/me/pools"))[0] == 403

    # Who also holds pools:manage may do both.
    pools_and_users = await directory.person(permissions=["users:manage", "pools:manage"])
    assert (await patch(directory, pools_and_users, target, False))[0] == 200
    assert (await patch(directory, pools_and_users, target, True))[0] == 200
    assert (await patch(directory, admin, target, False))[0] == 200


async def test_a_permission_the_actor_lacks_is_counted_both_ways(
    directory: Directory, admin: Person
) -> None:
    auditors = await directory.group(admin, {"permission": "audit:read"})
    claim = await bound_claim(directory, admin, auditors)
    target = await directory.person(groups=[claim])
    assert "audit:read" in (await directory.me(target))["permissions"]
    users_manager = await directory.person(permissions=["users:manage"])
    assert_denied(*await patch(directory, users_manager, target, True), "audit:read")
    # A holder of what the user holds may disable and enable him.
    holder = await directory.person(permissions=["users:manage", "audit:read"])
    assert (await patch(directory, holder, target, True))[0] == 200
    assert (await patch(directory, holder, target, False))[0] == 200
    # A user holding nothing stays the users manager's to disable and enable.
    plain = await directory.person()
    await directory.me(plain)
    assert (await patch(directory, users_manager, plain, True))[0] == 200
    assert (await patch(directory, users_manager, plain, False))[0] == 200


async def test_the_rule_is_in_the_service(directory: Directory, admin: Person) -> None:
    target = await claim_admin(directory, admin)
    users_manager = await directory.person(permissions=["users:manage"])
    caller = principal_of(await directory.me(users_manager), "users:manage")
    from deskpool.identity.user_state import set_user_disabled

    with pytest.raises(EscalationDenied) as refused:
        await set_user_disabled(
            directory.runtime, Actor.of_principal(caller), uuid.UUID(target.id), True
        )
    assert refused.value.missing == ["platform:admin"]
    assert not await disabled(directory, target)
