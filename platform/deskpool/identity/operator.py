"""What the operator's own configuration and command line change in access control.

These are not API callers, so the escalation rule does not apply to them: whoever sets the
environment of the processes or holds the database credentials already controls the instance.

- :func:`apply_bootstrap_bindings`: ``AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS`` is configuration.
  At startup each API process makes the stored bootstrap bindings equal to the setting:
  configured ones are created (with their local group, when missing), ones no longer configured
  are removed; every change is audited with the actor ``system:bootstrap``. The API cannot
  delete a bootstrap binding (409 ``configured_binding``): remove it from the setting. A
  binding confers whatever its group holds; giving that group permissions through the API is
  subject to the escalation rule like any other grant.
- :func:`break_glass_grant`: ``deskpool admin grant`` gives a user the ``platform_admin`` role
  (and enables it) with database access alone, audited with the actor ``break-glass:cli``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import asyncpg

from deskpool.actor import BOOTSTRAP, BREAK_GLASS, Actor
from deskpool.errors import Conflict, NotFound, StartupError
from deskpool.identity import store, store_roles
from deskpool.identity.sign_in import PLATFORM_ADMIN_ROLE


async def apply_bootstrap_bindings(
    connection: asyncpg.Connection, bindings: Iterable[tuple[str, str]]
) -> bool:
    """Make the stored bootstrap bindings those of the setting; whether anything changed.

    :param bindings: ``(claim value, local group key)`` pairs.
    :raises StartupError: a group key is not a valid key.
    """
    wanted = list(dict.fromkeys(bindings))
    actor = Actor.system(BOOTSTRAP)
    changed = False
    async with connection.transaction():
        await store.lock_identity(connection)
        for claim_value, group_key in wanted:
            try:
                async with connection.transaction():
                    group_id = await store.ensure_group(connection, group_key)
            except asyncpg.CheckViolationError:
                raise StartupError(
                    f"AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS names the local group key "
                    f"{group_key!r}, which is not valid (lowercase letters, digits, '.', '_' "
                    "and '-')"
                ) from None
            binding_id = await store.insert_binding(connection, claim_value, group_id, "bootstrap")
            if binding_id is not None:
                changed = True
                await actor.record(
                    connection,
                    "oidc_group_binding.create",
                    "roles",
                    str(binding_id),
                    {
                        "claim_value": claim_value,
                        "group": group_key,
                        "source": "AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS",
                    },
                )
        for binding in await store.bootstrap_bindings(connection):
            if (binding["claim_value"], binding["group_key"]) in wanted:
                continue
            changed = True
            await store.delete_binding(connection, uuid.UUID(binding["id"]))
            await actor.record(
                connection,
                "oidc_group_binding.delete",
                "roles",
                binding["id"],
                {
                    "claim_value": binding["claim_value"],
                    "group": binding["group_key"],
                    "reason": "no longer in AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS",
                },
            )
    return changed


@dataclass(frozen=True)
class BreakGlassResult:
    """What :func:`break_glass_grant` did."""

    user_id: str
    issuer: str
    subject: str
    email: str | None
    user_created: bool
    grant_created: bool
    enabled: bool


async def break_glass_grant(
    connection: asyncpg.Connection,
    *,
    email: str | None = None,
    subject: str | None = None,
    issuer: str | None = None,
    operator: str = "",
) -> BreakGlassResult:
    """Give one user the ``platform_admin`` role and enable it, on the operator's authority.

    By ``subject`` (with its ``issuer``): the user record is created when that subject never
    signed in, so its first sign-in finds it an admin. By ``email``: the one user who signed in
    with that email (case-insensitively); an email never creates a user, since anyone may
    claim an email at an identity provider.

    :param operator: who ran the command (the operating-system user), for the audit trail.
    :raises NotFound: no user has that email.
    :raises Conflict: several users have that email, or neither email nor subject was given.
    """
    if (email is None) == (subject is None):
        raise Conflict("Give exactly one of an email or a subject.")
    actor = Actor.system(BREAK_GLASS)
    details = {"reason": "break-glass", "operator": operator}
    async with connection.transaction():
        await store.lock_identity(connection)
        created = False
        if subject is not None:
            if not issuer:
                raise Conflict("A subject needs its issuer (--issuer or AUTH_OIDC_ISSUER_URL).")
            user = await store.find_user(connection, issuer, subject)
            if user is None:
                user = await store.insert_user(connection, issuer, subject, None)
                created = True
                await actor.record(
                    connection, "user.create", "users", user["id"], {**details, "subject": subject}
                )
        else:
            assert email is not None
            matches = await store.users_with_email(connection, email)
            if not matches:
                raise NotFound(
                    f"No user has signed in with the email {email!r}; use --subject, or sign in "
                    "once first."
                )
            if len(matches) > 1:
                subjects = ", ".join(f"{m['subject']!r} ({m['issuer']})" for m in matches)
                raise Conflict(
                    f"Several users have the email {email!r}: {subjects}; choose one with "
                    "--subject."
                )
            user = matches[0]
        user_id = uuid.UUID(user["id"])
        before = await store_roles.list_grants(
            connection,
            after=None,
            subject_type="user",
            subject_id=user_id,
            role_key=PLATFORM_ADMIN_ROLE,
            limit=1,
        )
        grant = await store_roles.insert_grant(
            connection,
            subject_type="user",
            subject_id=user_id,
            role_key=PLATFORM_ADMIN_ROLE,
            permission=None,
            source="break_glass",
        )
        if not before:
            await actor.record(
                connection,
                "grant.create",
                "roles",
                grant["id"],
                {**details, "role": PLATFORM_ADMIN_ROLE, "user": user["id"]},
            )
        enabled = bool(user["disabled"])
        if enabled:
            await store.set_user_disabled(connection, user_id, False)
            await actor.record(connection, "user.enable", "users", user["id"], details)
    return BreakGlassResult(
        user_id=user["id"],
        issuer=user["issuer"],
        subject=user["subject"],
        email=user["email"],
        user_created=created,
        grant_created=not before,
        enabled=enabled,
    )
