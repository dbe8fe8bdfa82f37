"""What every change of access control shares: its transaction and the rules' checks.

A change runs in :func:`changing` (a transaction holding the identity lock, refusals of the
escalation rule audited, every process told once committed), checks the rules of
:mod:`deskpool.identity.rules` with what the actor holds now (:func:`held`), and ends what it
took away with :func:`revoke`. The use cases are in :mod:`deskpool.identity.service` (groups,
roles, grants, bindings) and :mod:`deskpool.identity.user_state` (enabling and disabling users).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

import asyncpg

from deskpool.actor import Actor
from deskpool.identity import rules, store, store_roles
from deskpool.identity.access import Revocation, revoke_lost_access
from deskpool.identity.authenticator import identity_changed
from deskpool.identity.refusals import audited_refusals
from deskpool.identity.sign_in import resolve_effective
from deskpool.permissions import EffectivePermissions

if TYPE_CHECKING:
    from deskpool.runtime import Runtime


@contextlib.asynccontextmanager
async def changing(runtime: Runtime, actor: Actor) -> AsyncIterator[asyncpg.Connection]:
    """A transaction holding the identity lock; announces the change once committed.

    A change refused by the escalation rule is rolled back, then recorded as a denied
    ``access.escalation_denied`` event in a transaction of its own.
    """
    async with (
        audited_refusals(runtime, actor),
        runtime.db.acquire() as connection,
        connection.transaction(),
    ):
        await store.lock_identity(connection)
        yield connection
    await identity_changed(runtime)


async def held(connection: asyncpg.Connection, actor: Actor) -> EffectivePermissions | None:
    """What the actor holds now (``None``: the operator's own instructions, not limited)."""
    principal = actor.principal
    if principal is None:
        return None
    _, effective = await resolve_effective(
        connection, principal.id, principal.claimed_groups, principal.claimed_roles
    )
    return effective


async def check_escalation(
    connection: asyncpg.Connection,
    actor: Actor,
    conferred: frozenset[str],
    what: str,
    resource_type: str = "roles",
) -> None:
    """Refuse a change conferring what the actor does not hold (see :mod:`.rules`)."""
    if conferred:
        rules.check_escalation(await held(connection, actor), conferred, what, resource_type)


async def check_takes_from_admin(
    connection: asyncpg.Connection,
    actor: Actor,
    what: str,
    resource_type: str,
    *,
    users: Sequence[uuid.UUID] = (),
    groups: Sequence[uuid.UUID] = (),
    role_key: str | None = None,
    carries_admin: bool = False,
) -> None:
    """Refuse a change that takes from a holder of ``platform:admin`` unless the actor is one.

    Called before the change: afterwards, the holder may hold it no more.
    """
    actor_holds = await held(connection, actor)
    if actor_holds is None or actor_holds.is_platform_admin:
        return
    concerned = carries_admin
    if not concerned:
        roles = await store_roles.role_definitions(connection)
        concerned = await store_roles.concerns_admin(
            connection, rules.admin_role_keys(roles), users=users, groups=groups, role_key=role_key
        )
    rules.check_takes_from_admin(actor_holds, concerned, what, resource_type)


async def admins(connection: asyncpg.Connection) -> int:
    """How many enabled users hold ``platform:admin`` through the database."""
    roles = await store_roles.role_definitions(connection)
    return await store_roles.count_enabled_admins(connection, rules.admin_role_keys(roles))


@contextlib.asynccontextmanager
async def keeping_an_admin(connection: asyncpg.Connection, what: str) -> AsyncIterator[None]:
    """Refuse (and roll back) the enclosed change if it leaves no enabled platform admin."""
    before = await admins(connection)
    yield
    rules.check_admins_remain(before, await admins(connection), what)


async def revoke(
    connection: asyncpg.Connection, actor: Actor, users: list[uuid.UUID] | None
) -> Revocation:
    """End what the change took away from ``users`` (``None``: anyone holding a desktop)."""
    return await revoke_lost_access(connection, actor.audit_event, users)


async def group_confers(connection: asyncpg.Connection, group_id: uuid.UUID) -> frozenset[str]:
    """What a group's grants confer on its members."""
    roles = await store_roles.role_definitions(connection)
    return rules.conferred_by_grants(await store_roles.group_grants(connection, group_id), roles)
