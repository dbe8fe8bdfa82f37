"""SQL of the help desk: users found by name, email or subject; the pools' entitlement paths."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from deskpool.db.rows import Db
from deskpool.sessions.logons import LogonRecord
from deskpool.sessions.store_logons import logon_from_row


async def search_users(db: Db, text: str, limit: int) -> list[dict[str, Any]]:
    """Users whose display name, email or subject contains ``text`` (any case), best first.

    An exact email or subject comes first, then names that start with the text, then the rest
    by name.
    """
    needle = text.strip().lower()
    rows = await db.fetch(
        """
        SELECT id, issuer, subject, email, display_name, disabled, kind, last_seen_at
          FROM users
         WHERE lower(coalesce(display_name, '')) LIKE $2
            OR lower(coalesce(email, '')) LIKE $2
            OR lower(subject) LIKE $2
         ORDER BY (lower(coalesce(email, '')) = $1 OR lower(subject) = $1) DESC,
                  lower(coalesce(display_name, '')) LIKE $3 DESC,
                  coalesce(display_name, email, subject), id
         LIMIT $4
        """,
        needle,
        "%" + needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",
        needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",
        limit,
    )
    return [dict(row) for row in rows]


@dataclass(frozen=True, slots=True)
class PoolEntitlementRow:
    """A pool, and one entitlement of it that reaches the user (none: ``subject_type`` None)."""

    pool_id: uuid.UUID
    pool_name: str
    pool_state: str
    subject_type: str | None
    subject_id: uuid.UUID | None


async def pools_with_entitlements(
    db: Db, user_id: uuid.UUID, group_ids: Collection[uuid.UUID]
) -> list[PoolEntitlementRow]:
    """Every pool by name, once per entitlement reaching the user (or once with none)."""
    rows = await db.fetch(
        """
        SELECT p.id AS pool_id, p.name AS pool_name, p.state AS pool_state,
               e.subject_type, e.subject_id
          FROM pools p
          LEFT JOIN pool_entitlements e
            ON e.pool_id = p.id
           AND ((e.subject_type = 'user' AND e.subject_id = $1)
             OR (e.subject_type = 'group' AND e.subject_id = ANY($2::uuid[])))
         ORDER BY p.name, p.id, e.subject_type DESC
        """,
        user_id,
        list(group_ids),
    )
    return [
        PoolEntitlementRow(
            row["pool_id"],
            row["pool_name"],
            row["pool_state"],
            row["subject_type"],
            row["subject_id"],
        )
        for row in rows
    ]


async def recent_logons(
    db: Db, user_id: uuid.UUID, *, failed: bool, limit: int
) -> list[tuple[LogonRecord, str | None]]:
    """The user's latest logons (only the failed ones, if ``failed``) with their pool's name."""
    rows = await db.fetch(
        """
        SELECT l.*, p.name AS pool_name
          FROM logons l LEFT JOIN pools p ON p.id = l.pool_id
         WHERE l.user_id = $1 AND ($2::boolean IS FALSE OR l.failed_at IS NOT NULL)
         ORDER BY l.asked_at DESC
         LIMIT $3
        """,
        user_id,
        failed,
        limit,
    )
    return [(logon_from_row(row), row["pool_name"]) for row in rows]


async def pool_names(db: Db, pool_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The names of ``pool_ids`` (a pool gone is left out)."""
    rows = await db.fetch("SELECT id, name FROM pools WHERE id = ANY($1::uuid[])", list(pool_ids))
    return {row["id"]: row["name"] for row in rows}
