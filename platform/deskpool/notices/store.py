"""The SQL of desktop notices (``desktop_notices``)."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.db.rows import Db
from deskpool.notices.model import Notice


def notice_of(row: Any) -> Notice:
    """A :class:`Notice` from a ``desktop_notices`` row."""
    return Notice(
        id=row["id"],
        desktop_id=row["desktop_id"],
        pool_id=row["pool_id"],
        user_id=row["user_id"],
        ends_at=row["ends_at"],
        reason=row["reason"],
        message=row["message"],
        source=row["source"],
        created_at=row["created_at"],
        cleared_at=row["cleared_at"],
    )


_OPEN = """
        INSERT INTO desktop_notices (desktop_id, pool_id, user_id, ends_at, reason, message,
                                     source)
        VALUES ($1, $2, $3, $4, $5, $6, $7)
        ON CONFLICT (desktop_id, user_id, source) WHERE cleared_at IS NULL
        """


async def open_notice(
    connection: asyncpg.Connection,
    *,
    desktop_id: uuid.UUID,
    pool_id: uuid.UUID,
    user_id: uuid.UUID,
    ends_at: datetime,
    reason: str,
    message: str,
    source: str,
    move: bool = True,
) -> Notice | None:
    """Record a notice, or move the open one of the same source to the new time and text.

    With ``move=False`` an open notice of the same source is left as it is (its deadline
    kept) and ``None`` is returned.
    """
    conflict = (
        """DO UPDATE SET ends_at = EXCLUDED.ends_at, reason = EXCLUDED.reason,
                      message = EXCLUDED.message"""
        if move
        else "DO NOTHING"
    )
    row = await connection.fetchrow(
        f"{_OPEN} {conflict} RETURNING *",
        desktop_id,
        pool_id,
        user_id,
        ends_at,
        reason,
        message,
        source,
    )
    return None if row is None else notice_of(row)


async def clear_notices(
    connection: asyncpg.Connection,
    *,
    source: str,
    desktop_id: uuid.UUID | None = None,
) -> list[Notice]:
    """Clear the open notices of ``source`` (of one desktop, or all); return them."""
    rows = await connection.fetch(
        """
        UPDATE desktop_notices SET cleared_at = now()
         WHERE cleared_at IS NULL AND source = $1 AND ($2::uuid IS NULL OR desktop_id = $2)
        RETURNING *
        """,
        source,
        desktop_id,
    )
    return [notice_of(row) for row in rows]


async def notices_for(
    db: Db, user_id: uuid.UUID, desktop_ids: Collection[uuid.UUID]
) -> dict[uuid.UUID, Notice]:
    """The earliest open notice of the user on each of ``desktop_ids`` that has one."""
    rows = await db.fetch(
        """
        SELECT DISTINCT ON (desktop_id) *
          FROM desktop_notices
         WHERE cleared_at IS NULL AND user_id = $1 AND desktop_id = ANY($2::uuid[])
         ORDER BY desktop_id, ends_at
        """,
        user_id,
        list(desktop_ids),
    )
    return {row["desktop_id"]: notice_of(row) for row in rows}


async def open_notices_of_pools(
    db: Db, pool_ids: Collection[uuid.UUID], reason: str
) -> dict[uuid.UUID, list[Notice]]:
    """The open notices of ``reason`` on the desktops of ``pool_ids``, by pool."""
    rows = await db.fetch(
        """
        SELECT * FROM desktop_notices
         WHERE cleared_at IS NULL AND reason = $2 AND pool_id = ANY($1::uuid[])
         ORDER BY created_at
        """,
        list(pool_ids),
        reason,
    )
    found: dict[uuid.UUID, list[Notice]] = {}
    for row in rows:
        found.setdefault(row["pool_id"], []).append(notice_of(row))
    return found


async def get_open_notice(connection: asyncpg.Connection, notice_id: uuid.UUID) -> Notice | None:
    """The notice ``notice_id`` if it is still open (its row locked), else ``None``."""
    row = await connection.fetchrow(
        "SELECT * FROM desktop_notices WHERE id = $1 AND cleared_at IS NULL FOR UPDATE",
        notice_id,
    )
    return None if row is None else notice_of(row)
