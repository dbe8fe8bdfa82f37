"""SQL of the identity aggregate: users, groups, members, roles, grants and bindings."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from deskpool.errors import Conflict, NotFound
from deskpool.permissions import Grant, PermissionCatalog, Role, builtin_roles


def parse_id(value: str, what: str = "resource") -> uuid.UUID:
    """A path id as a UUID; anything else is simply not found (never a 500)."""
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound(f"No {what} has the id {value!r}.") from None


@dataclass(frozen=True)
class UserRow:
    """A user as stored."""

    id: str
    issuer: str
    subject: str
    email: str | None
    display_name: str | None
    disabled: bool
    created: bool


async def upsert_user(
    connection: asyncpg.Connection,
    *,
    issuer: str,
    subject: str,
    email: str | None,
    display_name: str | None,
) -> UserRow:
    """Create the user at first sign-in, or refresh its email, name and last sign-in."""
    row = await connection.fetchrow(
        """
        INSERT INTO users (issuer, subject, email, display_name)
        VALUES ($1, $2, $3, $4)
        ON CONFLICT (issuer, subject) DO UPDATE
            SET email = coalesce(EXCLUDED.email, users.email),
                display_name = coalesce(EXCLUDED.display_name, users.display_name),
                last_seen_at = now()
        RETURNING id, issuer, subject, email, display_name, disabled, (xmax = 0) AS created
        """,
        issuer,
        subject,
        email,
        display_name,
    )
    assert row is not None
    return UserRow(
        str(row["id"]),
        row["issuer"],
        row["subject"],
        row["email"],
        row["display_name"],
        row["disabled"],
        row["created"],
    )


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


async def grants_of(
    connection: asyncpg.Connection, user_id: str, group_ids: Iterable[str]
) -> tuple[list[Grant], list[Grant]]:
    """The user's own grants and its groups' grants."""
    rows = await connection.fetch(
        """
        SELECT subject_type, role_key, permission FROM grants
         WHERE (subject_type = 'user' AND subject_id = $1)
            OR (subject_type = 'group' AND subject_id = ANY($2::uuid[]))
        """,
        uuid.UUID(user_id),
        [uuid.UUID(g) for g in group_ids],
    )
    user: list[Grant] = []
    group: list[Grant] = []
    for row in rows:
        grant = Grant(role=row["role_key"], permission=row["permission"])
        (user if row["subject_type"] == "user" else group).append(grant)
    return user, group


async def role_definitions(connection: asyncpg.Connection) -> dict[str, Role]:
    """Every defined role: the built-in ones and the custom ones."""
    roles = builtin_roles()
    for row in await connection.fetch("SELECT key, description, permissions FROM roles"):
        roles.setdefault(
            row["key"], Role(row["key"], frozenset(row["permissions"]), row["description"])
        )
    return roles


async def grant(
    connection: asyncpg.Connection,
    *,
    subject_type: str,
    subject_id: str,
    role_key: str | None = None,
    permission: str | None = None,
    source: str = "api",
) -> dict[str, Any]:
    """Create a grant (a role or one permission, to a user or a group); idempotent."""
    catalog = PermissionCatalog.builtin()
    if permission is not None and permission not in catalog:
        raise Conflict(f"Unknown permission {permission!r}.")
    if role_key is not None and role_key not in await role_definitions(connection):
        raise Conflict(f"Unknown role {role_key!r}.")
    table = "users" if subject_type == "user" else "groups"
    if not await connection.fetchval(
        f"SELECT 1 FROM {table} WHERE id = $1", parse_id(subject_id, subject_type)
    ):
        raise Conflict(f"No {subject_type} has the id {subject_id}.")
    row = await connection.fetchrow(
        """
        INSERT INTO grants (subject_type, subject_id, role_key, permission, source)
        VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (subject_type, subject_id, coalesce(role_key, ''), coalesce(permission, ''))
        DO UPDATE SET source = grants.source
        RETURNING id, subject_type, subject_id, role_key, permission, source, created_at
        """,
        subject_type,
        uuid.UUID(subject_id),
        role_key,
        permission,
        source,
    )
    assert row is not None
    return dict(row)


async def ensure_bootstrap_bindings(
    connection: asyncpg.Connection, bindings: Iterable[tuple[str, str]]
) -> list[tuple[str, str]]:
    """Create the configured bindings (and their local groups) if missing; return new ones."""
    created = []
    for claim_value, group_key in bindings:
        group_id = await connection.fetchval(
            """
            INSERT INTO groups (key, name) VALUES ($1, $1)
            ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key
            RETURNING id
            """,
            group_key,
        )
        inserted = await connection.fetchval(
            """
            INSERT INTO oidc_group_bindings (claim_value, group_id, source)
            VALUES ($1, $2, 'bootstrap') ON CONFLICT DO NOTHING RETURNING id
            """,
            claim_value,
            group_id,
        )
        if inserted is not None:
            created.append((claim_value, group_key))
    return created
