"""The SQL of the syslog export: its cursor (one row) and the audit events after it.

The cursor is a position in the audit trail's ``(tx_id, id)`` order, and only events whose
transaction is below the oldest one still running are read: every transaction that could
still add an earlier event has ended, so moving the cursor past an event never skips one
committed later. The row also holds the lease of the worker that streams (one at a time).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from deskpool.audit import AUDIT_TABLE, event_of_row
from deskpool.db.rows import Db
from deskpool.events import AuditEvent


@dataclass(frozen=True, slots=True)
class Position:
    """Where the export is: after the event ``event_id`` of the transaction ``tx_id``."""

    tx_id: int
    event_id: int


@dataclass(frozen=True, slots=True)
class Exported:
    """An event read for export, with its position."""

    position: Position
    event_id: int
    event: AuditEvent


async def claim(db: Db, holder: str, lease: timedelta) -> Position | None:
    """Lease the export to ``holder``; its cursor, or ``None`` while another holds it."""
    row = await db.fetchrow(
        """UPDATE syslog_cursor SET lease_holder = $1, lease_until = now() + $2::interval
            WHERE lease_holder IS NULL OR lease_until < now() OR lease_holder = $1
        RETURNING tx_id::text::bigint AS tx_id, event_id""",
        holder,
        lease,
    )
    return None if row is None else Position(row["tx_id"], row["event_id"])


async def release(db: Db, holder: str) -> None:
    """End ``holder``'s lease."""
    await db.execute(
        "UPDATE syslog_cursor SET lease_holder = NULL, lease_until = NULL WHERE lease_holder = $1",
        holder,
    )


async def advance(db: Db, holder: str, lease: timedelta, position: Position) -> bool:
    """Move the cursor to ``position`` and renew the lease. :returns: ``False`` if not held."""
    moved = await db.fetchval(
        """UPDATE syslog_cursor
              SET tx_id = $3::text::xid8, event_id = $4, sent_at = now(),
                  lease_until = now() + $2::interval
            WHERE lease_holder = $1 RETURNING true""",
        holder,
        lease,
        str(position.tx_id),
        position.event_id,
    )
    return bool(moved)


async def events_after(db: Db, position: Position, limit: int) -> list[Exported]:
    """Up to ``limit`` final events after ``position``, in ``(tx_id, id)`` order."""
    rows = await db.fetch(
        f"""SELECT *, tx_id::text::bigint AS tx_number FROM {AUDIT_TABLE}
             WHERE (tx_id, id) > ($1::text::xid8, $2)
               AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
             ORDER BY tx_id, id LIMIT $3""",
        str(position.tx_id),
        position.event_id,
        limit,
    )
    return [
        Exported(Position(row["tx_number"], row["id"]), row["id"], event_of_row(row))
        for row in rows
    ]
