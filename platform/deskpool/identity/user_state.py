"""Users: listed, read, disabled and enabled.

Users are created at their first sign-in (:mod:`deskpool.identity.sign_in`). Disabling or
enabling one is judged on everything the user holds, by every route, as of their last sign-in:
direct grants, the groups they are a member of, the groups bound to the group claim values of
their last token (kept in the users table at each sign-in), the roles of that token's roles
claim, and the pools they are entitled to through any of these. Nobody hands out more than they
hold, and nobody takes from someone who holds more: the actor must hold every permission the
user holds, and ``pools:manage`` when the user is entitled to a pool
(:func:`deskpool.identity.rules.check_holds_all`). A holder of ``platform:admin``, by any route,
is therefore disabled or enabled only by a platform admin. The check is made here, in the
service, so the API, the command line and plugins all meet it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import asyncpg

from deskpool.actor import Actor
from deskpool.errors import Conflict, LocatedFieldError, ValidationFailed, found
from deskpool.identity import rules, store
from deskpool.identity.access import announce
from deskpool.identity.changes import changing, held, keeping_an_admin, revoke
from deskpool.identity.sign_in import resolve_effective
from deskpool.pools.store_entitlements import entitled_anywhere

if TYPE_CHECKING:
    from deskpool.runtime import Runtime


@dataclass(frozen=True, slots=True)
class UserLabel:
    """How a user is shown where an id would be.

    :ivar name: the display name, else the email, else the subject.
    """

    name: str
    email: str | None


async def user_labels(
    db: asyncpg.Pool, user_ids: Iterable[uuid.UUID | None]
) -> dict[uuid.UUID, UserLabel]:
    """The labels of the users of ``user_ids`` that exist (``None`` skipped), in one query.

    A page of sessions, desktops or images names its users with it.
    """
    wanted = {user_id for user_id in user_ids if user_id is not None}
    if not wanted:
        return {}
    async with db.acquire() as connection:
        labels = await store.user_labels(connection, wanted)
    return {user_id: UserLabel(name, email) for user_id, (name, email) in labels.items()}


async def list_users(
    db: asyncpg.Pool,
    *,
    after: uuid.UUID | None,
    text: str | None,
    disabled: bool | None,
    limit: int,
) -> list[dict[str, Any]]:
    """Up to ``limit`` users by id after ``after``, filtered by ``text`` and ``disabled``."""
    async with db.acquire() as connection:
        return await store.list_users(
            connection, after=after, text=text, disabled=disabled, limit=limit
        )


async def get_user(db: asyncpg.Pool, user_id: uuid.UUID) -> dict[str, Any]:
    """One user. :raises NotFound: no such user."""
    async with db.acquire() as connection:
        user = found(await store.get_user(connection, user_id), "user", user_id)
    return user


class UserExists(Conflict):
    """A user of that issuer and subject exists (it signed in, or was added before)."""

    code = "user_exists"
    title = "The user exists"


async def add_user(
    runtime: Runtime,
    actor: Actor,
    *,
    subject: str,
    display_name: str | None,
    issuer: str | None = None,
) -> dict[str, Any]:
    """Add a person before their first sign-in, so they can be entitled (and found) ahead.

    The record is keyed as a sign-in keys it (issuer, subject, the kind of a person): that
    person's first sign-in finds it, with its entitlements and memberships; a client (service
    principal) of the same subject does not. No email is taken: anyone may claim an email at an
    identity provider, the subject is the issuer's own. Adding a user confers nothing, so there is
    nothing to check beyond ``users:manage``: what it is then given (an entitlement, a
    membership, a grant) is checked where it is given.

    :param issuer: the subject's issuer; by default the actor's own.
    :raises UserExists: that subject of that issuer exists.
    """
    issuer = issuer or (actor.principal.issuer if actor.principal is not None else None)
    if not issuer:
        raise ValidationFailed([LocatedFieldError("/issuer", "Give the subject's issuer.")])
    async with changing(runtime, actor) as connection:
        if await store.find_user(connection, issuer, subject) is not None:
            raise UserExists(f"A user of {issuer} has the subject {subject!r}.")
        user = await store.insert_user(connection, issuer, subject, None)
        if display_name:
            user = await store.set_display_name(connection, uuid.UUID(user["id"]), display_name)
        await actor.record(
            connection,
            "user.create",
            "users",
            str(user["id"]),
            {"subject": subject, "issuer": issuer, "before_first_sign_in": True},
        )
    return user


async def holds(connection: asyncpg.Connection, user: Mapping[str, Any]) -> frozenset[str]:
    """Everything ``user`` (a users row) holds, by every route, as of its last sign-in.

    Its permissions (direct grants, groups by membership or by the group claims of its last
    sign-in, roles of its last roles claim), with ``pools:manage`` added when it is entitled to
    a pool (directly or through one of those groups): only who may manage pools hands one out.
    """
    groups, effective = await resolve_effective(
        connection, str(user["id"]), user["claimed_groups"], user["claimed_roles"]
    )
    entitled = await entitled_anywhere(connection, user["id"], [group.id for group in groups])
    return rules.with_pool_access(effective.permissions, entitled)


async def set_user_disabled(
    runtime: Runtime, actor: Actor, user_id: uuid.UUID, disabled: bool
) -> dict[str, Any]:
    """Disable or enable a user.

    :raises NotFound: no such user.
    :raises CannotDisableSelf: the actor disables itself.
    :raises LastPlatformAdmin: disabling the last enabled platform admin.
    :raises EscalationDenied: the user holds, by any route (claim bindings included), a
        permission the actor does not hold (``platform:admin`` included), or is entitled to a
        pool and the actor does not hold ``pools:manage``.
    """
    if disabled and actor.principal is not None and actor.principal.id == str(user_id):
        raise rules.CannotDisableSelf()
    what = "disable this user" if disabled else "enable this user"
    async with changing(runtime, actor) as connection:
        current = found(await store.get_user(connection, user_id), "user", user_id)
        if current["disabled"] != disabled:
            actor_holds = await held(connection, actor)
            if actor_holds is not None:
                user_holds = await holds(connection, current)
                rules.check_holds_all(actor_holds, user_holds, what, "users")
        async with keeping_an_admin(connection, "disable this user"):
            user = await store.set_user_disabled(connection, user_id, disabled)
        assert user is not None
        action = "user.disable" if disabled else "user.enable"
        await actor.record(connection, action, "users", str(user_id))
        revoked = await revoke(connection, actor, [user_id] if disabled else [])
    await announce(runtime, revoked)
    return user
