"""From a verified token to a :class:`Principal`: first sign-in, bootstrap admins, resolution.

A user exists because an access token of the configured issuer named them: the first time a
subject signs in, its user record is created (audited as ``user.create``). A user is keyed by
issuer, subject and kind: a person and a client of the client credentials grant with the same
subject are two users (:mod:`deskpool.identity.kinds`). At that first sign-in only, a person
(never a client) listed in the bootstrap settings receives the ``platform_admin`` role:

- ``AUTH_BOOTSTRAP_ADMIN_SUBJECTS``: the token's subject equals a listed one, exactly;
- ``AUTH_BOOTSTRAP_ADMIN_EMAILS``: the token's email equals a listed one (compared
  case-insensitively) and its ``email_verified`` claim is exactly the JSON value ``true`` (a
  missing claim, ``false``, ``0`` or a string do not count), and no other user record has that
  email: a second account with a bootstrap email never becomes admin; a warning is logged.

What a user may do is then resolved from the database (its grants, its groups' grants, by
membership or by a bound OIDC group claim) and its token's roles claim.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import asyncpg

from deskpool.actor import BOOTSTRAP, Actor
from deskpool.audit import record_audit_event
from deskpool.auth import VerifiedToken
from deskpool.events import AuditEvent
from deskpool.identity import store, store_roles, store_sign_in
from deskpool.identity.kinds import HUMAN, principal_kind
from deskpool.identity.principal import GroupRef, Principal
from deskpool.permissions import EffectivePermissions, resolve_permissions

if TYPE_CHECKING:
    from deskpool.config import Config

log = logging.getLogger(__name__)

#: The role bootstrap admins and the break-glass command give.
PLATFORM_ADMIN_ROLE = "platform_admin"


def bootstrap_admin_reason(config: Config, token: VerifiedToken) -> str | None:
    """Why a first sign-in receives ``platform_admin``, or ``None``.

    Subjects match exactly; emails case-insensitively, and only when the token's
    ``email_verified`` claim is exactly ``true``. A service principal's token never makes one.
    """
    if principal_kind(token.subject, token.claims) != HUMAN:
        return None
    if token.subject in config["AUTH_BOOTSTRAP_ADMIN_SUBJECTS"]:
        return "subject listed in AUTH_BOOTSTRAP_ADMIN_SUBJECTS"
    emails = {email.lower() for email in config["AUTH_BOOTSTRAP_ADMIN_EMAILS"]}
    verified = token.claims.get("email_verified") is True
    if token.email and token.email.lower() in emails and verified:
        return "email listed in AUTH_BOOTSTRAP_ADMIN_EMAILS"
    return None


async def resolve_effective(
    connection: asyncpg.Connection,
    user_id: str,
    claim_values: Sequence[str],
    claimed_roles: Sequence[str],
) -> tuple[tuple[GroupRef, ...], EffectivePermissions]:
    """A user's groups and what it may do, from the database and its token's claims."""
    groups = tuple(
        GroupRef(*group) for group in await store.groups_of(connection, user_id, claim_values)
    )
    user_grants, group_grants = await store_roles.grants_of(
        connection, user_id, [group.id for group in groups]
    )
    roles = await store_roles.role_definitions(connection)
    effective = resolve_permissions(user_grants, group_grants, roles, claimed_roles=claimed_roles)
    return groups, effective


async def sign_in(
    connection: asyncpg.Connection, config: Config, token: VerifiedToken
) -> Principal:
    """The principal of a verified token; creates the user at its first sign-in.

    One statement (:func:`deskpool.identity.store_sign_in.sign_in_user`): the user written,
    its ``user.create`` event at a first sign-in, and its groups, grants and roles read, all
    committed together with no transaction around them. A token that may make a bootstrap
    admin takes :func:`sign_in_bootstrap` instead.
    """
    if bootstrap_admin_reason(config, token) is not None:
        async with connection.transaction():
            return await sign_in_bootstrap(connection, config, token)
    signed = await store_sign_in.sign_in_user(
        connection, _user_fields(token), occurred_at=datetime.now(UTC), new_id=uuid.uuid4()
    )
    effective = resolve_permissions(
        signed.user_grants, signed.group_grants, signed.roles, claimed_roles=token.roles
    )
    groups = tuple(GroupRef(*group) for group in signed.groups)
    return _principal(signed.user, token, groups, effective)


def _user_fields(token: VerifiedToken) -> store.UserFields:
    """What a sign-in writes of the user, from its token."""
    return store.UserFields(
        issuer=token.issuer,
        subject=token.subject,
        email=token.email,
        display_name=token.name or token.username,
        claimed_groups=token.groups,
        claimed_roles=token.roles,
        kind=principal_kind(token.subject, token.claims),
    )


def _created_event(
    user_id: str, issuer: str, subject: str, email: str | None, kind: str
) -> AuditEvent:
    return Actor(user_id).audit_event(
        store_sign_in.CREATED_ACTION,
        "users",
        user_id,
        store_sign_in.created_details(issuer, subject, email, kind),
    )


def _principal(
    user: store.UserRow,
    token: VerifiedToken,
    groups: tuple[GroupRef, ...],
    effective: EffectivePermissions,
) -> Principal:
    return Principal(
        id=user.id,
        issuer=user.issuer,
        subject=user.subject,
        email=user.email,
        display_name=user.display_name,
        disabled=user.disabled,
        groups=groups,
        claimed_groups=token.groups,
        claimed_roles=token.roles,
        effective=effective,
        kind=user.kind,
    )


async def sign_in_bootstrap(
    connection: asyncpg.Connection, config: Config, token: VerifiedToken
) -> Principal:
    """:func:`sign_in` of a token that may make a bootstrap admin, statement by statement.

    Run it in a transaction: the user, its bootstrap grant and their audit events are
    committed together.
    """
    user = await store.upsert_user(connection, _user_fields(token))
    if user.created:
        await _first_sign_in(connection, config, user, token)
    elif user.settled:
        await Actor(user.id).record(
            connection,
            "user.update",
            "users",
            user.id,
            {"kind": user.kind, "reason": store_sign_in.SETTLED_REASON},
        )
    groups, effective = await resolve_effective(connection, user.id, token.groups, token.roles)
    return _principal(user, token, groups, effective)


async def _first_sign_in(
    connection: asyncpg.Connection, config: Config, user: store.UserRow, token: VerifiedToken
) -> None:
    await record_audit_event(
        connection, _created_event(user.id, user.issuer, user.subject, user.email, user.kind)
    )
    reason = bootstrap_admin_reason(config, token)
    if reason is None:
        return
    if reason.startswith("email") and token.email:
        # One bootstrap admin per email: serialize first sign-ins of that email, then look
        # for another account (committed by a sign-in that held this lock before).
        await connection.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))",
            f"deskpool-bootstrap:{token.email.lower()}",
        )
        others = [
            u for u in await store.users_with_email(connection, token.email) if u["id"] != user.id
        ]
        if others:
            log.warning(
                "not making subject %r a bootstrap admin: the bootstrap email it signed in with "
                "already belongs to another account (%s)",
                user.subject,
                ", ".join(str(other["id"]) for other in others),
            )
            return
    grant = await store_roles.insert_grant(
        connection,
        subject_type="user",
        subject_id=uuid.UUID(user.id),
        role_key=PLATFORM_ADMIN_ROLE,
        permission=None,
        source="bootstrap",
    )
    await Actor.system(BOOTSTRAP).record(
        connection,
        "grant.create",
        "roles",
        str(grant["id"]),
        {"role": PLATFORM_ADMIN_ROLE, "user": user.id, "reason": reason},
    )
