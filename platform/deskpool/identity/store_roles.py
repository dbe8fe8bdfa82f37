"""SQL of roles and grants, and the count of platform admins the lock-out rule needs.

Built-in roles are defined in code (:func:`deskpool.permissions.builtin_roles`); the ``roles``
table holds the custom ones. Functions run on the caller's connection and transaction and hold
no business rule.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import asyncpg

from deskpool.identity.store import plain
from deskpool.permissions import PLATFORM_ADMIN, Grant, Role, builtin_roles

# ------------------------------------------------------------------------------------ roles


async def role_definitions(connection: asyncpg.Connection) -> dict[str, Role]:
    """Every defined role: the built-in ones and the custom ones."""
    rows = await connection.fetch("SELECT key, description, permissions FROM roles")
    return roles_with((row["key"], row["description"], row["permissions"]) for row in rows)


def roles_with(custom: Iterable[tuple[str, Any, Iterable[str]]]) -> dict[str, Role]:
    """The built-in roles and the ``(key, description, permissions)`` of the custom ones.

    A custom role never replaces a built-in one of the same key.
    """
    roles = builtin_roles()
    for key, description, permissions in custom:
        roles.setdefault(key, Role(key, frozenset(permissions), description))
    return roles


def grants_json_sql(of_groups: str) -> str:
    """A column: the user's (``u.id``) and their groups' grants as JSON, for :func:`grants_of_json`.

    :param of_groups: the condition that ``gr.subject_id`` is one of the user's groups, as the
        statement knows them (``IN (SELECT id FROM user_groups)``, ``= ANY(ug.group_ids)``).
    """
    return f"""
       (SELECT coalesce(json_agg(json_build_array(gr.subject_type, gr.role_key, gr.permission)),
                        '[]')
          FROM grants gr
         WHERE (gr.subject_type = 'user' AND gr.subject_id = u.id)
            OR (gr.subject_type = 'group' AND gr.subject_id {of_groups}))"""


#: A value: every custom role as JSON, for :func:`roles_of_json`.
ROLES_JSON_SQL = """
       (SELECT coalesce(json_agg(json_build_array(r.key, r.description, r.permissions)), '[]')
          FROM roles r)"""

#: The columns ``grants`` and ``roles`` of a one-statement read of a principal (``FROM u``,
#: the user's row, with ``user_groups``, their groups' ids), read back by
#: :func:`grants_and_roles`.
GRANTS_AND_ROLES_SQL = (
    f"{grants_json_sql('IN (SELECT id FROM user_groups)')} AS grants,{ROLES_JSON_SQL} AS roles"
)


def grants_of_json(raw: str) -> tuple[list[Grant], list[Grant]]:
    """The user's grants and their groups' grants, from :func:`grants_json_sql`'s column."""
    user_grants: list[Grant] = []
    group_grants: list[Grant] = []
    for subject_type, role_key, permission in json.loads(raw):
        grant = Grant(role=role_key, permission=permission)
        (user_grants if subject_type == "user" else group_grants).append(grant)
    return user_grants, group_grants


def roles_of_json(raw: str) -> dict[str, Role]:
    """Every role, the built-in ones and the custom ones from :data:`ROLES_JSON_SQL`."""
    return roles_with(
        (key, description, permissions) for key, description, permissions in json.loads(raw)
    )


def grants_and_roles(row: Any) -> tuple[list[Grant], list[Grant], dict[str, Role]]:
    """The user's grants, their groups' grants and every role, from :data:`GRANTS_AND_ROLES_SQL`."""
    return (*grants_of_json(row["grants"]), roles_of_json(row["roles"]))


async def insert_role(
    connection: asyncpg.Connection, key: str, description: str, permissions: Sequence[str]
) -> dict[str, Any] | None:
    """Create a custom role; ``None`` when its key is taken."""
    row = await connection.fetchrow(
        """INSERT INTO roles (key, description, permissions) VALUES ($1, $2, $3)
           ON CONFLICT (key) DO NOTHING RETURNING key, description, permissions""",
        key,
        description,
        list(permissions),
    )
    return None if row is None else dict(row)


async def update_role(
    connection: asyncpg.Connection,
    key: str,
    description: str | None,
    permissions: Sequence[str] | None,
) -> dict[str, Any] | None:
    """Change a custom role (``None`` keeps a field); ``None`` when there is no such role."""
    row = await connection.fetchrow(
        """UPDATE roles SET description = coalesce($2, description),
                  permissions = coalesce($3, permissions), updated_at = now()
           WHERE key = $1 RETURNING key, description, permissions""",
        key,
        description,
        None if permissions is None else list(permissions),
    )
    return None if row is None else dict(row)


async def delete_role(connection: asyncpg.Connection, key: str) -> bool:
    """Delete a custom role and every grant of it; ``False`` when there was no such role."""
    if not await connection.fetchval("DELETE FROM roles WHERE key = $1 RETURNING true", key):
        return False
    await connection.execute("DELETE FROM grants WHERE role_key = $1", key)
    return True


# ----------------------------------------------------------------------------------- grants


async def list_grants(
    connection: asyncpg.Connection,
    *,
    after: uuid.UUID | None,
    subject_type: str | None,
    subject_id: uuid.UUID | None,
    role_key: str | None,
    limit: int,
) -> list[dict[str, Any]]:
    """Up to ``limit`` grants by id after ``after``, with the given filters.

    Each carries its subject's name (``subject_name``) and, for a user, email (``subject_email``).
    """
    rows = await connection.fetch(
        """SELECT g.*,
                  coalesce(nullif(u.display_name, ''), u.email, u.subject, gr.name) AS subject_name,
                  u.email AS subject_email
             FROM grants g
             LEFT JOIN users u ON g.subject_type = 'user' AND u.id = g.subject_id
             LEFT JOIN groups gr ON g.subject_type = 'group' AND gr.id = g.subject_id
            WHERE ($1::uuid IS NULL OR g.id > $1)
              AND ($2::text IS NULL OR g.subject_type = $2)
              AND ($3::uuid IS NULL OR g.subject_id = $3)
              AND ($4::text IS NULL OR g.role_key = $4)
            ORDER BY g.id LIMIT $5""",
        after,
        subject_type,
        subject_id,
        role_key,
        limit,
    )
    return [plain(row) for row in rows]


async def subject_exists(
    connection: asyncpg.Connection, subject_type: str, subject_id: uuid.UUID
) -> bool:
    """Whether the user or group ``subject_id`` exists."""
    table = "users" if subject_type == "user" else "groups"
    return bool(await connection.fetchval(f"SELECT true FROM {table} WHERE id = $1", subject_id))


async def insert_grant(
    connection: asyncpg.Connection,
    *,
    subject_type: str,
    subject_id: uuid.UUID,
    role_key: str | None,
    permission: str | None,
    source: str,
) -> dict[str, Any]:
    """Grant a role or one permission to a user or a group; the existing grant if it exists."""
    row = await connection.fetchrow(
        """
        INSERT INTO grants (subject_type, subject_id, role_key, permission, source)
        VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (subject_type, subject_id, coalesce(role_key, ''), coalesce(permission, ''))
        DO UPDATE SET source = grants.source
        RETURNING id, subject_type, subject_id, role_key, permission, source, created_at
        """,
        subject_type,
        subject_id,
        role_key,
        permission,
        source,
    )
    assert row is not None
    return plain(row)


async def get_grant(connection: asyncpg.Connection, grant_id: uuid.UUID) -> dict[str, Any] | None:
    """One grant; ``None`` when there is none."""
    row = await connection.fetchrow("SELECT * FROM grants WHERE id = $1", grant_id)
    return None if row is None else plain(row)


async def delete_grant(
    connection: asyncpg.Connection, grant_id: uuid.UUID
) -> dict[str, Any] | None:
    """Revoke a grant; the revoked grant, ``None`` when there was none."""
    row = await connection.fetchrow("DELETE FROM grants WHERE id = $1 RETURNING *", grant_id)
    return None if row is None else plain(row)


async def delete_subject_grants(
    connection: asyncpg.Connection, subject_type: str, subject_id: uuid.UUID
) -> None:
    """Revoke every grant of a user or group (it is being deleted)."""
    await connection.execute(
        "DELETE FROM grants WHERE subject_type = $1 AND subject_id = $2", subject_type, subject_id
    )


def _grant(row: asyncpg.Record) -> Grant:
    return Grant(role=row["role_key"], permission=row["permission"])


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
        (user if row["subject_type"] == "user" else group).append(_grant(row))
    return user, group


async def group_grants(connection: asyncpg.Connection, group_id: uuid.UUID) -> list[Grant]:
    """The grants of one group."""
    rows = await connection.fetch(
        "SELECT role_key, permission FROM grants WHERE subject_type = 'group' AND subject_id = $1",
        group_id,
    )
    return [_grant(row) for row in rows]


#: The users holding ``platform:admin`` through the database ($1 the permission, $2 the keys of
#: the roles carrying it): a grant to the user, or to a group the user is a member of.
_ADMINS = """
    admin_grants AS (
        SELECT subject_type, subject_id FROM grants
         WHERE permission = $1 OR role_key = ANY($2::text[])
    ),
    admins AS (
        SELECT subject_id AS user_id FROM admin_grants WHERE subject_type = 'user'
        UNION
        SELECT m.user_id FROM admin_grants a JOIN group_members m ON m.group_id = a.subject_id
         WHERE a.subject_type = 'group'
    )
"""


async def count_enabled_admins(connection: asyncpg.Connection, admin_roles: Sequence[str]) -> int:
    """How many enabled users hold ``platform:admin`` through the database.

    Through a grant of the permission, or of a role in ``admin_roles``, to the user or to a
    group the user is a member of. Claims of an access token (bound groups, roles) are not
    stored, so admins by a claim are not counted.
    """
    count: int = await connection.fetchval(
        f"""
        WITH {_ADMINS}
        SELECT count(*) FROM users u JOIN admins a ON a.user_id = u.id WHERE NOT u.disabled
        """,
        PLATFORM_ADMIN,
        list(admin_roles),
    )
    return count


async def concerns_admin(
    connection: asyncpg.Connection,
    admin_roles: Sequence[str],
    *,
    users: Sequence[uuid.UUID] = (),
    groups: Sequence[uuid.UUID] = (),
    role_key: str | None = None,
) -> bool:
    """Whether a holder of ``platform:admin`` through the database is concerned by a change.

    Concerned are: the ``users``; the members of the ``groups``, and the groups themselves when
    they hold ``platform:admin`` (members or not: a claim binding makes claimants of them); the
    holders of the role ``role_key`` (by a grant to them or to a group they are a member of).
    Enabled or disabled users alike.
    """
    found: bool = await connection.fetchval(
        f"""
        WITH {_ADMINS},
        concerned AS (
            SELECT unnest($3::uuid[]) AS user_id
            UNION
            SELECT user_id FROM group_members WHERE group_id = ANY($4::uuid[])
            UNION
            SELECT subject_id FROM grants WHERE subject_type = 'user' AND role_key = $5
            UNION
            SELECT m.user_id FROM grants g JOIN group_members m ON m.group_id = g.subject_id
             WHERE g.subject_type = 'group' AND g.role_key = $5
        )
        SELECT EXISTS (SELECT 1 FROM admins JOIN concerned USING (user_id))
            OR EXISTS (SELECT 1 FROM admin_grants
                        WHERE subject_type = 'group' AND subject_id = ANY($4::uuid[]))
        """,
        PLATFORM_ADMIN,
        list(admin_roles),
        list(users),
        list(groups),
        role_key,
    )
    return found
