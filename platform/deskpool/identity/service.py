"""Access administration, one function per use case: groups, roles, grants, bindings.

Each change validates, checks the rules of :mod:`deskpool.identity.rules` (nobody hands out
more than they hold; the instance keeps an enabled platform admin), changes, and records its
audit event, in one transaction that holds the identity lock; once committed, every process is
told to drop the principals it cached. A change that takes access away (disabling a user,
removing a membership, a grant, a role's permission, a binding) also ends, in that
transaction, the sessions and desktops it no longer allows (:mod:`deskpool.revocation`). The
API, the command line and plugins call these same functions, so each rule lives here once.
Users are listed, enabled and disabled in :mod:`deskpool.identity.user_state`; what every
change shares (its transaction, the rules' checks) is in :mod:`deskpool.identity.changes`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import asyncpg

from deskpool.actor import Actor
from deskpool.errors import Conflict, FieldError, NotFound, ValidationFailed, found
from deskpool.identity import rules, store, store_roles
from deskpool.identity.access import announce, users_of_group, users_with_claim
from deskpool.identity.changes import changing as _changing
from deskpool.identity.changes import check_escalation as _check_escalation
from deskpool.identity.changes import check_takes_from_admin as _check_takes_from_admin
from deskpool.identity.changes import group_confers as _group_confers
from deskpool.identity.changes import keeping_an_admin as _keeping_an_admin
from deskpool.identity.changes import revoke as _revoke
from deskpool.permissions import (
    PLATFORM_ADMIN,
    PermissionCatalog,
    Role,
    builtin_roles,
)
from deskpool.pools.store_entitlements import (
    SubjectType,
    entitled_anywhere,
    revoke_subject_entitlements,
)

if TYPE_CHECKING:
    from deskpool.runtime import Runtime


# ----------------------------------------------------------------------------------- groups


async def list_groups(
    db: asyncpg.Pool, *, after_key: str | None, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` groups by key after ``after_key``."""
    async with db.acquire() as connection:
        return await store.list_groups(connection, after_key=after_key, limit=limit)


async def get_group(db: asyncpg.Pool, group_id: uuid.UUID) -> dict[str, Any]:
    """One group. :raises NotFound: no such group."""
    async with db.acquire() as connection:
        group = found(await store.get_group(connection, group_id), "group", group_id)
    return group


async def create_group(
    runtime: Runtime, actor: Actor, *, key: str, name: str, description: str
) -> dict[str, Any]:
    """Create a group (it confers nothing until it is granted something).

    :raises Conflict: the key is taken.
    """
    async with runtime.db.acquire() as connection, connection.transaction():
        group = await store.insert_group(connection, key, name, description)
        if group is None:
            raise Conflict(f"A group with the key {key!r} exists.")
        await actor.record(connection, "group.create", "groups", group["id"], {"key": key})
    return group


async def update_group(
    runtime: Runtime,
    actor: Actor,
    group_id: uuid.UUID,
    *,
    name: str | None,
    description: str | None,
    fields: Sequence[str],
) -> dict[str, Any]:
    """Change a group's name or description. :raises NotFound: no such group."""
    async with runtime.db.acquire() as connection, connection.transaction():
        group = found(
            await store.update_group(connection, group_id, name, description), "group", group_id
        )
        await actor.record(
            connection, "group.update", "groups", str(group_id), {"fields": sorted(fields)}
        )
    return group


async def delete_group(runtime: Runtime, actor: Actor, group_id: uuid.UUID) -> None:
    """Delete a group with its members, grants, bindings and pool entitlements.

    :raises NotFound: no such group.
    :raises EscalationDenied: it holds ``platform:admin`` or has a member who does, and the
        actor is no platform admin.
    :raises LastPlatformAdmin: its members would take the last platform admin with them.
    """
    async with _changing(runtime, actor) as connection:
        found(await store.get_group(connection, group_id), "group", group_id)
        await _check_takes_from_admin(
            connection, actor, "delete this group", "groups", groups=[group_id]
        )
        concerned = await users_of_group(connection, group_id)
        async with _keeping_an_admin(connection, "delete this group"):
            key = found(await store.delete_group(connection, group_id), "group", group_id)
            await store_roles.delete_subject_grants(connection, "group", group_id)
        await revoke_subject_entitlements(connection, SubjectType.GROUP, group_id)
        await actor.record(connection, "group.delete", "groups", str(group_id), {"key": key})
        revoked = await _revoke(connection, actor, concerned)
    await announce(runtime, revoked)


async def list_group_members(
    db: asyncpg.Pool, group_id: uuid.UUID, *, after: uuid.UUID | None, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` members of a group. :raises NotFound: no such group."""
    async with db.acquire() as connection:
        found(await store.get_group(connection, group_id), "group", group_id)
        return await store.list_members(connection, group_id, after=after, limit=limit)


async def add_group_member(
    runtime: Runtime, actor: Actor, group_id: uuid.UUID, user_id: uuid.UUID
) -> None:
    """Make a user a member of a group (nothing happens when it already is).

    :raises NotFound: no such group or user.
    :raises EscalationDenied: the group holds what the actor does not, or it is entitled to a
        pool and the actor does not hold ``pools:manage``.
    """
    async with _changing(runtime, actor) as connection:
        found(await store.get_group(connection, group_id), "group", group_id)
        found(await store.get_user(connection, user_id), "user", user_id)
        if await store.is_member(connection, group_id, user_id):
            return
        # Checked before the change: a caller adding itself must not hold it by then.
        conferred = rules.with_pool_access(
            await _group_confers(connection, group_id),
            await entitled_anywhere(connection, None, [group_id]),
        )
        await _check_escalation(
            connection, actor, conferred, "add a member to this group", "groups"
        )
        await store.add_member(connection, group_id, user_id)
        await actor.record(
            connection, "group.member_add", "groups", str(group_id), {"user": str(user_id)}
        )


async def remove_group_member(
    runtime: Runtime, actor: Actor, group_id: uuid.UUID, user_id: uuid.UUID
) -> None:
    """Remove a user from a group.

    :raises NotFound: the user is not a member.
    :raises EscalationDenied: the user holds ``platform:admin`` and the actor does not.
    :raises LastPlatformAdmin: the membership made the last platform admin.
    """
    async with _changing(runtime, actor) as connection:
        if not await store.is_member(connection, group_id, user_id):
            raise NotFound("That user is not a member of that group.")
        await _check_takes_from_admin(
            connection, actor, "remove this member", "groups", users=[user_id]
        )
        async with _keeping_an_admin(connection, "remove this member"):
            if not await store.remove_member(connection, group_id, user_id):
                raise NotFound("That user is not a member of that group.")
        await actor.record(
            connection, "group.member_remove", "groups", str(group_id), {"user": str(user_id)}
        )
        revoked = await _revoke(connection, actor, [user_id])
    await announce(runtime, revoked)


# ------------------------------------------------------------------------------------ roles


@dataclass(frozen=True)
class RoleView:
    """A role as the API shows it."""

    key: str
    description: str
    permissions: list[str]
    builtin: bool

    @classmethod
    def of(cls, role: Role) -> RoleView:
        """The view of a defined role."""
        builtin = role.key in builtin_roles()
        return cls(role.key, role.description, sorted(role.permissions), builtin)


async def list_roles(db: asyncpg.Pool, *, after_key: str | None, limit: int) -> list[RoleView]:
    """Up to ``limit`` roles (built-in and custom) by key after ``after_key``."""
    async with db.acquire() as connection:
        roles = await store_roles.role_definitions(connection)
    keys = sorted(key for key in roles if after_key is None or key > after_key)
    return [RoleView.of(roles[key]) for key in keys[:limit]]


async def get_role(db: asyncpg.Pool, key: str) -> RoleView:
    """One role. :raises NotFound: no such role."""
    async with db.acquire() as connection:
        role = found(
            (await store_roles.role_definitions(connection)).get(key), "role", repr(key), "key"
        )
    return RoleView.of(role)


def _check_catalog(names: Sequence[str]) -> None:
    catalog = PermissionCatalog.builtin()
    bad = [
        FieldError(f"/permissions/{i}", f"unknown permission {name!r}")
        for i, name in enumerate(names)
        if name not in catalog
    ]
    if bad:
        raise ValidationFailed(bad)


def _custom(key: str, verb: str) -> None:
    if key in builtin_roles():
        raise Conflict(f"{key!r} is a built-in role and cannot be {verb}.")


async def create_role(
    runtime: Runtime, actor: Actor, *, key: str, description: str, permissions: Sequence[str]
) -> RoleView:
    """Create a custom role.

    :raises ValidationFailed: a permission is not in the catalog.
    :raises Conflict: the key is a built-in role's or taken.
    :raises EscalationDenied: the role carries what the actor does not hold.
    """
    _check_catalog(permissions)
    if key in builtin_roles():
        raise Conflict(f"{key!r} is a built-in role.")
    wanted = sorted(set(permissions))
    async with _changing(runtime, actor) as connection:
        await _check_escalation(connection, actor, frozenset(wanted), f"create the role {key!r}")
        row = await store_roles.insert_role(connection, key, description, wanted)
        if row is None:
            raise Conflict(f"A role with the key {key!r} exists.")
        await actor.record(
            connection, "role.create", "roles", key, {"permissions": list(row["permissions"])}
        )
    return RoleView(key, row["description"], list(row["permissions"]), False)


async def update_role(
    runtime: Runtime,
    actor: Actor,
    key: str,
    *,
    description: str | None,
    permissions: Sequence[str] | None,
) -> RoleView:
    """Change a custom role.

    :raises Conflict: the role is built in.
    :raises NotFound: no such role.
    :raises EscalationDenied: it gains a permission the actor does not hold (whoever holds
        the role, or claims it in a token, would hold it too).
    :raises EscalationDenied: it loses permissions while it carries ``platform:admin`` or a
        platform admin holds it, and the actor is no platform admin.
    :raises LastPlatformAdmin: it loses ``platform:admin`` that the last admins held by it.
    """
    _custom(key, "changed")
    if permissions is not None:
        _check_catalog(permissions)
    wanted = None if permissions is None else sorted(set(permissions))
    async with _changing(runtime, actor) as connection:
        current = found(
            (await store_roles.role_definitions(connection)).get(key), "role", repr(key), "key"
        )
        added = frozenset(wanted or ()) - current.permissions
        await _check_escalation(connection, actor, added, f"add permissions to the role {key!r}")
        if wanted is not None and current.permissions - frozenset(wanted):
            await _check_takes_from_admin(
                connection,
                actor,
                f"take permissions from the role {key!r}",
                "roles",
                role_key=key,
                carries_admin=PLATFORM_ADMIN in current.permissions,
            )
        async with _keeping_an_admin(connection, f"remove {PLATFORM_ADMIN} from the role {key!r}"):
            row = await store_roles.update_role(connection, key, description, wanted)
        assert row is not None
        await actor.record(
            connection, "role.update", "roles", key, {"permissions": list(row["permissions"])}
        )
        # Whoever held the role (granted, through a group, or claimed) may have lost access.
        removed = current.permissions - frozenset(row["permissions"])
        revoked = await _revoke(connection, actor, None if removed else [])
    await announce(runtime, revoked)
    return RoleView(key, row["description"], list(row["permissions"]), False)


async def delete_role(runtime: Runtime, actor: Actor, key: str) -> None:
    """Delete a custom role and its grants.

    :raises Conflict: the role is built in.
    :raises NotFound: no such role.
    :raises EscalationDenied: it carries ``platform:admin`` or a platform admin holds it, and
        the actor is no platform admin.
    :raises LastPlatformAdmin: the last platform admins held ``platform:admin`` by it.
    """
    _custom(key, "deleted")
    async with _changing(runtime, actor) as connection:
        current = found(
            (await store_roles.role_definitions(connection)).get(key), "role", repr(key), "key"
        )
        await _check_takes_from_admin(
            connection,
            actor,
            f"delete the role {key!r}",
            "roles",
            role_key=key,
            carries_admin=PLATFORM_ADMIN in current.permissions,
        )
        async with _keeping_an_admin(connection, f"delete the role {key!r}"):
            if not await store_roles.delete_role(connection, key):
                raise NotFound(f"No role has the key {key!r}.")
        await actor.record(connection, "role.delete", "roles", key)
        revoked = await _revoke(connection, actor, None)
    await announce(runtime, revoked)


# ----------------------------------------------------------------------------------- grants


async def list_grants(
    db: asyncpg.Pool,
    *,
    after: uuid.UUID | None,
    subject_type: str | None,
    subject_id: uuid.UUID | None,
    role_key: str | None,
    limit: int,
) -> list[dict[str, Any]]:
    """Up to ``limit`` grants by id after ``after``, with the given filters."""
    async with db.acquire() as connection:
        return await store_roles.list_grants(
            connection,
            after=after,
            subject_type=subject_type,
            subject_id=subject_id,
            role_key=role_key,
            limit=limit,
        )


async def create_grant(
    runtime: Runtime,
    actor: Actor,
    *,
    subject_type: str,
    subject_id: uuid.UUID,
    role_key: str | None = None,
    permission: str | None = None,
) -> dict[str, Any]:
    """Grant a role or one permission to a user or a group (the existing grant if it exists).

    :raises ValidationFailed: not exactly one of a role or a permission.
    :raises Conflict: an unknown permission, role or subject.
    :raises EscalationDenied: it confers what the actor does not hold.
    """
    if (role_key is None) == (permission is None):
        raise ValidationFailed([FieldError("", "Give exactly one of role_key or permission.")])
    if permission is not None and permission not in PermissionCatalog.builtin():
        raise Conflict(f"Unknown permission {permission!r}.")
    async with _changing(runtime, actor) as connection:
        roles = await store_roles.role_definitions(connection)
        if role_key is not None and role_key not in roles:
            raise Conflict(f"Unknown role {role_key!r}.")
        if not await store_roles.subject_exists(connection, subject_type, subject_id):
            raise Conflict(f"No {subject_type} has the id {subject_id}.")
        conferred = rules.conferred_by_grant(role_key, permission, roles)
        what = f"grant the role {role_key!r}" if role_key else f"grant {permission}"
        await _check_escalation(connection, actor, conferred, what)
        grant = await store_roles.insert_grant(
            connection,
            subject_type=subject_type,
            subject_id=subject_id,
            role_key=role_key,
            permission=permission,
            source="api",
        )
        await actor.record(
            connection,
            "grant.create",
            "roles",
            grant["id"],
            {
                "subject_type": subject_type,
                "subject_id": str(subject_id),
                "role": role_key,
                "permission": permission,
            },
        )
    return grant


async def delete_grant(runtime: Runtime, actor: Actor, grant_id: uuid.UUID) -> None:
    """Revoke a grant.

    :raises NotFound: no such grant.
    :raises EscalationDenied: its subject holds ``platform:admin`` (a group: or has a member
        who does) and the actor does not.
    :raises LastPlatformAdmin: it made the last enabled platform admin.
    """
    async with _changing(runtime, actor) as connection:
        held = found(await store_roles.get_grant(connection, grant_id), "grant", grant_id)
        subject = uuid.UUID(str(held["subject_id"]))
        by_user = held["subject_type"] == "user"
        await _check_takes_from_admin(
            connection,
            actor,
            "revoke this grant",
            "roles",
            users=[subject] if by_user else [],
            groups=[] if by_user else [subject],
        )
        async with _keeping_an_admin(connection, "revoke this grant"):
            grant = found(await store_roles.delete_grant(connection, grant_id), "grant", grant_id)
        await actor.record(
            connection,
            "grant.delete",
            "roles",
            str(grant_id),
            {
                "subject_type": grant["subject_type"],
                "subject_id": grant["subject_id"],
                "role": grant["role_key"],
                "permission": grant["permission"],
            },
        )
        subject = uuid.UUID(str(grant["subject_id"]))
        concerned = (
            [subject]
            if grant["subject_type"] == "user"
            else await users_of_group(connection, subject)
        )
        revoked = await _revoke(connection, actor, concerned)
    await announce(runtime, revoked)


# ------------------------------------------------------------------------- group bindings


async def list_bindings(
    db: asyncpg.Pool, *, after: uuid.UUID | None, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` OIDC group claim bindings by id after ``after``."""
    async with db.acquire() as connection:
        return await store.list_bindings(connection, after=after, limit=limit)


async def create_binding(
    runtime: Runtime, actor: Actor, *, claim_value: str, group_id: uuid.UUID
) -> dict[str, Any]:
    """Bind an OIDC group claim value to a local group.

    :raises Conflict: no such group, or the binding exists.
    :raises EscalationDenied: the group holds what the actor does not (everyone whose token
        carries the value would hold it), or it is entitled to a pool and the actor does not
        hold ``pools:manage``.
    """
    async with _changing(runtime, actor) as connection:
        if await store.get_group(connection, group_id) is None:
            raise Conflict(f"No group has the id {group_id}.")
        conferred = rules.with_pool_access(
            await _group_confers(connection, group_id),
            await entitled_anywhere(connection, None, [group_id]),
        )
        await _check_escalation(connection, actor, conferred, "bind a claim to this group")
        binding_id = await store.insert_binding(connection, claim_value, group_id)
        if binding_id is None:
            raise Conflict("That claim value is already bound to that group.")
        binding = await store.get_binding(connection, binding_id)
        assert binding is not None
        await actor.record(
            connection,
            "oidc_group_binding.create",
            "roles",
            str(binding_id),
            {"claim_value": claim_value, "group": str(group_id)},
        )
    return binding


class ConfiguredBinding(Conflict):
    """A binding of ``AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS`` cannot be deleted through the API."""

    code = "configured_binding"
    title = "The binding is configured"


async def delete_binding(runtime: Runtime, actor: Actor, binding_id: uuid.UUID) -> None:
    """Delete an OIDC group claim binding made through the API.

    :raises NotFound: no such binding.
    :raises ConfiguredBinding: it comes from ``AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS``.
    :raises EscalationDenied: its group carries ``platform:admin`` and the actor does not.
    """
    async with _changing(runtime, actor) as connection:
        binding = found(await store.get_binding(connection, binding_id), "binding", binding_id)
        if binding["source"] == "bootstrap":
            raise ConfiguredBinding(
                "This binding comes from AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS; remove it from that "
                "setting and restart the API to delete it."
            )
        group_id = uuid.UUID(str(binding["group_id"]))
        await _check_takes_from_admin(
            connection,
            actor,
            "delete this binding",
            "roles",
            carries_admin=PLATFORM_ADMIN in await _group_confers(connection, group_id),
        )
        await store.delete_binding(connection, binding_id)
        await actor.record(
            connection,
            "oidc_group_binding.delete",
            "roles",
            str(binding_id),
            {"claim_value": binding["claim_value"], "group": binding["group_id"]},
        )
        concerned = await users_with_claim(connection, binding["claim_value"])
        revoked = await _revoke(connection, actor, concerned)
    await announce(runtime, revoked)
