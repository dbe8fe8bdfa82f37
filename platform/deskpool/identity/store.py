"""SQL of users, groups, group members and OIDC group bindings.

Roles and grants are in :mod:`deskpool.identity.store_roles`. Functions here run one statement
(or a few) on the connection they are given, inside the caller's transaction; they hold no
business rule and raise no HTTP error: :mod:`deskpool.identity.service` does both.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from deskpool.identity.kinds import HUMAN

#: Key of the transaction-level advisory lock every change of access control holds, so that
#: two concurrent changes cannot each leave one platform admin and together none.
IDENTITY_LOCK_KEY = 0x6964656E74  # "ident" in ASCII


def plain(record: Mapping[str, Any]) -> dict[str, Any]:
    """A row as a dict, its UUIDs as strings (how the API renders ids)."""
    return {k: (str(v) if isinstance(v, uuid.UUID) else v) for k, v in dict(record).items()}


async def lock_identity(connection: asyncpg.Connection) -> None:
    """Serialize this transaction with every other change of access control."""
    await connection.execute("SELECT pg_advisory_xact_lock($1)", IDENTITY_LOCK_KEY)


# ------------------------------------------------------------------------------------ users


@dataclass(frozen=True)
class UserRow:
    """A user as stored; ``created`` when this statement created it (a first sign-in).

    ``settled``: this statement gave a user stored before users had kinds its kind.
    """

    id: str
    issuer: str
    subject: str
    email: str | None
    display_name: str | None
    disabled: bool
    created: bool
    kind: str = HUMAN
    settled: bool = False


#: How stale ``last_seen_at`` may be before a sign-in writes it again (issue 39): a sign-in
#: that changes nothing else reads the user and writes nothing more often than this.
LAST_SEEN_INTERVAL = "10 minutes"

#: Common table expressions ending in ``upserted``: the user of the issuer ``$2``, subject ``$3``
#: and kind ``$8`` created at first sign-in with the id ``$1``, or its email (``$4``), name
#: (``$5``), claims (``$6``, ``$7``) and last sign-in refreshed. A user whose row already holds
#: all of it and was seen less than :data:`LAST_SEEN_INTERVAL` ago is only read (``current``):
#: no row is written, so the statement takes no transaction id and its commit flushes nothing;
#: a changed claim is always written (revocation judges a user away by the claims kept). A row
#: stored before users had kinds and not settled yet (``unsettled``, migration 0026) becomes
#: this kind's user, unless this kind has one already: the first sign-in after the upgrade
#: keeps its grants.
UPSERT_USER_CTES = f"""
    current AS (
        SELECT id, issuer, subject, kind, email, display_name, disabled, false AS created,
               false AS settled
          FROM users
         WHERE issuer = $2::text AND subject = $3::text AND kind = $8::text
           AND email IS NOT DISTINCT FROM coalesce($4::text, email)
           AND display_name IS NOT DISTINCT FROM coalesce($5::text, display_name)
           AND claimed_groups = $6::text[] AND claimed_roles = $7::text[]
           AND last_seen_at > now() - interval '{LAST_SEEN_INTERVAL}'
    ),
    settled AS (
        UPDATE users
           SET kind = $8::text,
               email = coalesce($4::text, email),
               display_name = coalesce($5::text, display_name),
               claimed_groups = $6::text[],
               claimed_roles = $7::text[],
               last_seen_at = now()
         WHERE issuer = $2::text AND subject = $3::text AND kind = 'unsettled'
           AND NOT EXISTS (SELECT 1 FROM users o
                            WHERE o.issuer = $2::text AND o.subject = $3::text
                              AND o.kind = $8::text)
        RETURNING id, issuer, subject, kind, email, display_name, disabled, false AS created,
                  true AS settled
    ),
    inserted AS (
        INSERT INTO users (id, issuer, subject, kind, email, display_name, claimed_groups,
                           claimed_roles)
        SELECT $1::uuid, $2::text, $3::text, $8::text, $4::text, $5::text, $6::text[],
               $7::text[]
         WHERE NOT EXISTS (SELECT 1 FROM settled) AND NOT EXISTS (SELECT 1 FROM current)
        ON CONFLICT (issuer, subject, kind) DO UPDATE
            SET email = coalesce(EXCLUDED.email, users.email),
                display_name = coalesce(EXCLUDED.display_name, users.display_name),
                claimed_groups = EXCLUDED.claimed_groups,
                claimed_roles = EXCLUDED.claimed_roles,
                last_seen_at = now()
        RETURNING id, issuer, subject, kind, email, display_name, disabled,
                  (xmax = 0) AS created, false AS settled
    ),
    upserted AS (
        SELECT * FROM current
        UNION ALL SELECT * FROM settled
        UNION ALL SELECT * FROM inserted
    )
"""


@dataclass(frozen=True)
class UserFields:
    """What a sign-in writes of a user, from its token."""

    issuer: str
    subject: str
    email: str | None
    display_name: str | None
    claimed_groups: Sequence[str] = ()
    claimed_roles: Sequence[str] = ()
    #: ``human`` or ``service`` (:func:`deskpool.identity.kinds.principal_kind`).
    kind: str = HUMAN

    def parameters(self, new_id: uuid.UUID) -> tuple[Any, ...]:
        """The parameters ``$1`` to ``$8`` of :data:`UPSERT_USER_CTES`."""
        return (
            new_id,
            self.issuer,
            self.subject,
            self.email,
            self.display_name,
            list(self.claimed_groups),
            list(self.claimed_roles),
            self.kind,
        )


def user_row(row: Mapping[str, Any]) -> UserRow:
    """The :class:`UserRow` of a row of ``upserted`` (:data:`UPSERT_USER_CTES`)."""
    return UserRow(
        str(row["id"]),
        row["issuer"],
        row["subject"],
        row["email"],
        row["display_name"],
        row["disabled"],
        row["created"],
        row["kind"],
        row["settled"],
    )


async def upsert_user(connection: asyncpg.Connection, fields: UserFields) -> UserRow:
    """Create the user at first sign-in, or refresh its email, name, claims and last sign-in.

    The group and role claims of this sign-in are kept, so a later change of access can be
    judged while the user is away (:mod:`deskpool.revocation`).
    """
    row = await connection.fetchrow(
        f"WITH {UPSERT_USER_CTES} SELECT * FROM upserted", *fields.parameters(uuid.uuid4())
    )
    assert row is not None
    return user_row(row)


async def list_users(
    connection: asyncpg.Connection,
    *,
    after: uuid.UUID | None,
    text: str | None,
    disabled: bool | None,
    limit: int,
) -> list[dict[str, Any]]:
    """Up to ``limit`` users by id after ``after``.

    :param text: matches email or display name (substring, case-insensitive), when given.
    :param disabled: matches the users' state, when given.
    """
    rows = await connection.fetch(
        """
        SELECT * FROM users
         WHERE ($1::uuid IS NULL OR id > $1)
           AND ($2::text IS NULL OR lower(email) LIKE $2 OR lower(display_name) LIKE $2)
           AND ($3::boolean IS NULL OR disabled = $3)
         ORDER BY id LIMIT $4
        """,
        after,
        None if not text else f"%{text.lower()}%",
        disabled,
        limit,
    )
    return [plain(row) for row in rows]


async def user_labels(
    connection: asyncpg.Connection, user_ids: Iterable[uuid.UUID]
) -> dict[uuid.UUID, tuple[str, str | None]]:
    """How each of ``user_ids`` that exists is named, in one query.

    :returns: by id, (display name, else email, else subject; email).
    """
    rows = await connection.fetch(
        """SELECT id, coalesce(nullif(display_name, ''), email, subject) AS name, email
             FROM users WHERE id = ANY($1::uuid[])""",
        list(set(user_ids)),
    )
    return {row["id"]: (row["name"], row["email"]) for row in rows}


async def get_user(connection: asyncpg.Connection, user_id: uuid.UUID) -> dict[str, Any] | None:
    """The user of ``user_id``, or ``None``."""
    row = await connection.fetchrow("SELECT * FROM users WHERE id = $1", user_id)
    return None if row is None else plain(row)


async def find_user(
    connection: asyncpg.Connection, issuer: str, subject: str
) -> dict[str, Any] | None:
    """The person (not a service principal) of an issuer's subject, or ``None``.

    A row stored before users had kinds and not settled yet counts, after a ``human`` one.
    """
    row = await connection.fetchrow(
        """SELECT * FROM users WHERE issuer = $1 AND subject = $2 AND kind <> 'service'
            ORDER BY kind = 'unsettled' LIMIT 1""",
        issuer,
        subject,
    )
    return None if row is None else plain(row)


async def users_with_email(connection: asyncpg.Connection, email: str) -> list[dict[str, Any]]:
    """Every user whose email is ``email`` (compared case-insensitively), oldest first."""
    rows = await connection.fetch(
        "SELECT * FROM users WHERE lower(email) = lower($1) ORDER BY created_at, id", email
    )
    return [plain(row) for row in rows]


async def insert_user(
    connection: asyncpg.Connection, issuer: str, subject: str, email: str | None
) -> dict[str, Any]:
    """Create a person's user record before its first sign-in (the break-glass command)."""
    row = await connection.fetchrow(
        "INSERT INTO users (issuer, subject, email) VALUES ($1, $2, $3) RETURNING *",
        issuer,
        subject,
        email,
    )
    assert row is not None
    return plain(row)


async def set_display_name(
    connection: asyncpg.Connection, user_id: uuid.UUID, display_name: str
) -> dict[str, Any]:
    """Name a user added before its first sign-in (the sign-in's token names it after)."""
    row = await connection.fetchrow(
        "UPDATE users SET display_name = $2 WHERE id = $1 RETURNING *", user_id, display_name
    )
    assert row is not None
    return plain(row)


async def set_user_disabled(
    connection: asyncpg.Connection, user_id: uuid.UUID, disabled: bool
) -> dict[str, Any] | None:
    """Disable or enable a user; ``None`` when there is no such user."""
    row = await connection.fetchrow(
        "UPDATE users SET disabled = $2 WHERE id = $1 RETURNING *", user_id, disabled
    )
    return None if row is None else plain(row)


# ----------------------------------------------------------------------------------- groups


async def list_groups(
    connection: asyncpg.Connection, *, after_key: str | None, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` groups by key after ``after_key``."""
    rows = await connection.fetch(
        "SELECT * FROM groups WHERE $1::text IS NULL OR key > $1 ORDER BY key LIMIT $2",
        after_key,
        limit,
    )
    return [plain(row) for row in rows]


async def insert_group(
    connection: asyncpg.Connection, key: str, name: str, description: str
) -> dict[str, Any] | None:
    """Create a group; ``None`` when its key is taken."""
    row = await connection.fetchrow(
        """INSERT INTO groups (key, name, description) VALUES ($1, $2, $3)
           ON CONFLICT (key) DO NOTHING RETURNING *""",
        key,
        name,
        description,
    )
    return None if row is None else plain(row)


async def ensure_group(connection: asyncpg.Connection, key: str) -> uuid.UUID:
    """The id of the group ``key``, created (named after its key) when missing.

    :raises asyncpg.CheckViolationError: ``key`` is not a valid group key.
    """
    group_id: uuid.UUID = await connection.fetchval(
        """
        INSERT INTO groups (key, name) VALUES ($1, $1)
        ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key
        RETURNING id
        """,
        key,
    )
    return group_id


async def get_group(connection: asyncpg.Connection, group_id: uuid.UUID) -> dict[str, Any] | None:
    """The group of ``group_id``, or ``None``."""
    row = await connection.fetchrow("SELECT * FROM groups WHERE id = $1", group_id)
    return None if row is None else plain(row)


async def update_group(
    connection: asyncpg.Connection,
    group_id: uuid.UUID,
    name: str | None,
    description: str | None,
) -> dict[str, Any] | None:
    """Change a group's name or description (``None`` keeps it); ``None`` when missing."""
    row = await connection.fetchrow(
        """UPDATE groups SET name = coalesce($2, name), description = coalesce($3, description)
           WHERE id = $1 RETURNING *""",
        group_id,
        name,
        description,
    )
    return None if row is None else plain(row)


async def delete_group(connection: asyncpg.Connection, group_id: uuid.UUID) -> str | None:
    """Delete a group (its members and bindings go with it); its key, ``None`` when missing."""
    key: str | None = await connection.fetchval(
        "DELETE FROM groups WHERE id = $1 RETURNING key", group_id
    )
    return key


async def list_members(
    connection: asyncpg.Connection, group_id: uuid.UUID, *, after: uuid.UUID | None, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` members of a group, by user id after ``after``."""
    rows = await connection.fetch(
        """SELECT u.id AS user_id, u.email, u.display_name, m.added_at
             FROM group_members m JOIN users u ON u.id = m.user_id
            WHERE m.group_id = $1 AND ($2::uuid IS NULL OR u.id > $2)
            ORDER BY u.id LIMIT $3""",
        group_id,
        after,
        limit,
    )
    return [plain(row) for row in rows]


async def is_member(
    connection: asyncpg.Connection, group_id: uuid.UUID, user_id: uuid.UUID
) -> bool:
    """Whether a user is a member of a group."""
    found = await connection.fetchval(
        "SELECT true FROM group_members WHERE group_id = $1 AND user_id = $2", group_id, user_id
    )
    return bool(found)


async def add_member(
    connection: asyncpg.Connection, group_id: uuid.UUID, user_id: uuid.UUID
) -> bool:
    """Make a user a member of a group; ``False`` when it already was."""
    added = await connection.fetchval(
        """INSERT INTO group_members (group_id, user_id) VALUES ($1, $2)
           ON CONFLICT DO NOTHING RETURNING true""",
        group_id,
        user_id,
    )
    return bool(added)


async def remove_member(
    connection: asyncpg.Connection, group_id: uuid.UUID, user_id: uuid.UUID
) -> bool:
    """Remove a user from a group; ``False`` when it was not a member."""
    removed = await connection.fetchval(
        "DELETE FROM group_members WHERE group_id = $1 AND user_id = $2 RETURNING true",
        group_id,
        user_id,
    )
    return bool(removed)


async def groups_of(
    connection: asyncpg.Connection, user_id: str, claim_values: Sequence[str]
) -> list[tuple[str, str, str]]:
    """(id, key, via) of the user's groups: by membership, or bound to a claim value."""
    rows = await connection.fetch(
        """
        SELECT g.id, g.key, 'member' AS via FROM groups g
          JOIN group_members m ON m.group_id = g.id AND m.user_id = $1
        UNION
        SELECT g.id, g.key, 'claim' AS via FROM groups g
          JOIN oidc_group_bindings b ON b.group_id = g.id AND b.claim_value = ANY($2::text[])
        ORDER BY 2, 3 DESC
        """,
        uuid.UUID(user_id),
        list(claim_values),
    )
    seen: dict[str, tuple[str, str, str]] = {}
    for row in rows:
        seen.setdefault(str(row["id"]), (str(row["id"]), row["key"], row["via"]))
    return list(seen.values())


async def member_group_ids(connection: asyncpg.Connection, user_id: uuid.UUID) -> list[str]:
    """The ids of the groups ``user_id`` is a member of (not those bound to its claims)."""
    rows = await connection.fetch("SELECT group_id FROM group_members WHERE user_id = $1", user_id)
    return [str(row["group_id"]) for row in rows]


# -------------------------------------------------------------------------- group bindings

_BINDING_SELECT = """
    SELECT b.id, b.claim_value, b.group_id, g.key AS group_key, b.source, b.created_at
      FROM oidc_group_bindings b JOIN groups g ON g.id = b.group_id
"""


async def list_bindings(
    connection: asyncpg.Connection, *, after: uuid.UUID | None, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` bindings by id after ``after``."""
    rows = await connection.fetch(
        f"{_BINDING_SELECT} WHERE $1::uuid IS NULL OR b.id > $1 ORDER BY b.id LIMIT $2",
        after,
        limit,
    )
    return [plain(row) for row in rows]


async def get_binding(
    connection: asyncpg.Connection, binding_id: uuid.UUID
) -> dict[str, Any] | None:
    """The binding of ``binding_id``, or ``None``."""
    row = await connection.fetchrow(f"{_BINDING_SELECT} WHERE b.id = $1", binding_id)
    return None if row is None else plain(row)


async def insert_binding(
    connection: asyncpg.Connection, claim_value: str, group_id: uuid.UUID, source: str = "api"
) -> uuid.UUID | None:
    """Bind a claim value to a group; ``None`` when that binding exists."""
    binding_id: uuid.UUID | None = await connection.fetchval(
        """INSERT INTO oidc_group_bindings (claim_value, group_id, source) VALUES ($1, $2, $3)
           ON CONFLICT DO NOTHING RETURNING id""",
        claim_value,
        group_id,
        source,
    )
    return binding_id


async def delete_binding(connection: asyncpg.Connection, binding_id: uuid.UUID) -> None:
    """Delete a binding."""
    await connection.execute("DELETE FROM oidc_group_bindings WHERE id = $1", binding_id)


async def bootstrap_bindings(connection: asyncpg.Connection) -> list[dict[str, Any]]:
    """Every binding made from ``AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS``."""
    rows = await connection.fetch(f"{_BINDING_SELECT} WHERE b.source = 'bootstrap'")
    return [plain(row) for row in rows]
