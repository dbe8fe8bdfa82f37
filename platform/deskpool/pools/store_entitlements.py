"""SQL of entitlements: which users and groups may open a pool's desktops.

An entitlement names a pool and a subject (a user, or a group whose members it entitles). A
user is entitled to a pool directly or through any group they belong to; the groups come from
the caller (the principal's memberships), so this store reads no membership itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import asyncpg

from deskpool.db.rows import Db, as_uuid, record_from_row
from deskpool.errors import NotFound


class SubjectType(StrEnum):
    """Who an entitlement is granted to."""

    USER = "user"
    GROUP = "group"


@dataclass(frozen=True, slots=True)
class Entitlement:
    """A user or group that may open a pool's desktops."""

    pool_id: uuid.UUID
    subject_type: SubjectType
    subject_id: uuid.UUID
    created_at: datetime


def _entitlement(row: Mapping[str, Any]) -> Entitlement:
    return record_from_row(Entitlement, row, subject_type=SubjectType(row["subject_type"]))


async def subject_exists(db: Db, subject_type: SubjectType, subject_id: uuid.UUID) -> bool:
    """Whether the user or group exists."""
    table = "users" if subject_type is SubjectType.USER else "groups"
    return bool(await db.fetchval(f"SELECT true FROM {table} WHERE id = $1", subject_id))


async def grant_entitlement(
    connection: asyncpg.Connection,
    pool_id: uuid.UUID,
    subject_type: SubjectType,
    subject_id: uuid.UUID,
) -> tuple[Entitlement, bool]:
    """Entitle the user or group to the pool; return it and whether it is new.

    :raises NotFound: the pool is gone.
    """
    try:
        row = await connection.fetchrow(
            """
            INSERT INTO pool_entitlements (pool_id, subject_type, subject_id)
            VALUES ($1, $2, $3)
            ON CONFLICT (pool_id, subject_type, subject_id) DO NOTHING
            RETURNING *
            """,
            pool_id,
            str(subject_type),
            subject_id,
        )
    except asyncpg.ForeignKeyViolationError:
        raise NotFound(f"No pool has the id {pool_id}.") from None
    if row is not None:
        return _entitlement(row), True
    row = await connection.fetchrow(
        """
        SELECT * FROM pool_entitlements
         WHERE pool_id = $1 AND subject_type = $2 AND subject_id = $3
        """,
        pool_id,
        str(subject_type),
        subject_id,
    )
    assert row is not None
    return _entitlement(row), False


async def revoke_entitlement(
    connection: asyncpg.Connection,
    pool_id: uuid.UUID,
    subject_type: SubjectType,
    subject_id: uuid.UUID,
) -> bool:
    """Remove an entitlement; ``False`` when there was none."""
    done = await connection.fetchval(
        """
        DELETE FROM pool_entitlements
         WHERE pool_id = $1 AND subject_type = $2 AND subject_id = $3
        RETURNING true
        """,
        pool_id,
        str(subject_type),
        subject_id,
    )
    return bool(done)


async def revoke_subject_entitlements(
    connection: asyncpg.Connection, subject_type: SubjectType, subject_id: uuid.UUID
) -> int:
    """Remove every entitlement of a user or group (it is being deleted); how many there were."""
    done = await connection.execute(
        "DELETE FROM pool_entitlements WHERE subject_type = $1 AND subject_id = $2",
        str(subject_type),
        subject_id,
    )
    return int(done.split()[-1])


#: The sort key of the entitlement list, as a cursor stores it: ``[subject_type, subject_id]``.
EntitlementCursor = tuple[str, str]


def entitlement_cursor(entitlement: Entitlement) -> list[str]:
    """The cursor key of a listed entitlement (see :func:`list_entitlements`)."""
    return [str(entitlement.subject_type), str(entitlement.subject_id)]


async def list_entitlements(
    db: Db, pool_id: uuid.UUID, *, limit: int, after: EntitlementCursor | None = None
) -> list[Entitlement]:
    """Up to ``limit`` entitlements of the pool, groups before users, after ``after``."""
    after_type, after_id = after if after is not None else (None, None)
    rows = await db.fetch(
        """
        SELECT * FROM pool_entitlements
         WHERE pool_id = $1
           AND ($2::text IS NULL OR (subject_type, subject_id) > ($2, $3::uuid))
         ORDER BY subject_type, subject_id
         LIMIT $4
        """,
        pool_id,
        after_type,
        None if after_id is None else uuid.UUID(after_id),
        limit,
    )
    return [_entitlement(row) for row in rows]


def _uuids(values: Iterable[str | uuid.UUID]) -> list[uuid.UUID]:
    result = []
    for value in values:
        try:
            result.append(value if isinstance(value, uuid.UUID) else uuid.UUID(value))
        except ValueError:
            continue
    return result


async def entitled_pools(
    db: Db, user_id: str | uuid.UUID, group_ids: Iterable[str | uuid.UUID]
) -> set[uuid.UUID]:
    """The pools the user is entitled to, directly or through one of ``group_ids``."""
    rows = await db.fetch(
        """
        SELECT DISTINCT pool_id FROM pool_entitlements
         WHERE (subject_type = 'user' AND subject_id = $1)
            OR (subject_type = 'group' AND subject_id = ANY($2::uuid[]))
        """,
        as_uuid(user_id),
        _uuids(group_ids),
    )
    return {row["pool_id"] for row in rows}


async def entitled_anywhere(
    db: Db, user_id: str | uuid.UUID | None, group_ids: Iterable[str | uuid.UUID]
) -> bool:
    """Whether the user (if any) or one of ``group_ids`` is entitled to at least one pool."""
    found = await db.fetchval(
        """
        SELECT true FROM pool_entitlements
         WHERE (subject_type = 'user' AND subject_id = $1)
            OR (subject_type = 'group' AND subject_id = ANY($2::uuid[]))
         LIMIT 1
        """,
        None if user_id is None else as_uuid(user_id),
        _uuids(group_ids),
    )
    return bool(found)


async def is_entitled(
    db: Db, pool_id: uuid.UUID, user_id: str | uuid.UUID, group_ids: Iterable[str | uuid.UUID]
) -> bool:
    """Whether the user is entitled to the pool, directly or through one of ``group_ids``."""
    found = await db.fetchval(
        """
        SELECT true FROM pool_entitlements
         WHERE pool_id = $1
           AND ((subject_type = 'user' AND subject_id = $2)
                OR (subject_type = 'group' AND subject_id = ANY($3::uuid[])))
         LIMIT 1
        """,
        pool_id,
        as_uuid(user_id),
        _uuids(group_ids),
    )
    return bool(found)
