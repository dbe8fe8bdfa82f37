"""The SQL of outage brokering: what the snapshot reads, and what the replay writes.

The snapshot reads the pools (with their entitlements), the desktops that can be handed out
or reconnected to, and the desktops counted against the license's sessions. The replay writes
each journaled act with the time it happened (logons, sessions) and records every entry it
applied in ``outage_journal`` (migration 0030), keyed by the entry's stream id, in the same
transaction: an entry is applied once, whoever replays it and however often.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from deskpool.db.rows import Db
from deskpool.desktops.store import desktop_from_row
from deskpool.licensing.store import session_desktops
from deskpool.pools.model import Desktop
from deskpool.sessions.model import SessionRecord
from deskpool.sessions.store import session_from_row


@dataclass(frozen=True)
class PoolRow:
    """A pool the snapshot keeps: its state and who is entitled to it."""

    id: uuid.UUID
    name: str
    state: str
    entitled_users: frozenset[str]
    entitled_groups: frozenset[str]


async def pools(db: Db) -> list[PoolRow]:
    """Every pool with its entitlements."""
    rows = await db.fetch(
        """
        SELECT p.id, p.name, p.state,
               coalesce(array_agg(e.subject_id::text) FILTER (WHERE e.subject_type = 'user'),
                        '{}') AS users,
               coalesce(array_agg(e.subject_id::text) FILTER (WHERE e.subject_type = 'group'),
                        '{}') AS groups
          FROM pools AS p LEFT JOIN pool_entitlements AS e ON e.pool_id = p.id
         GROUP BY p.id
        """
    )
    return [
        PoolRow(
            row["id"], row["name"], row["state"], frozenset(row["users"]), frozenset(row["groups"])
        )
        for row in rows
    ]


async def servable_desktops(db: Db) -> list[Desktop]:
    """Desktops an outage may hand out (free, ready, clean) or reconnect to (held, in use)."""
    rows = await db.fetch(
        """
        SELECT * FROM desktops
         WHERE vm_id IS NOT NULL
           AND ((state = 'ready' AND assigned_user IS NULL AND NOT in_session
                 AND NOT used_since_refresh)
                OR (state = 'in_use' AND assigned_user IS NOT NULL))
        """
    )
    return [desktop_from_row(row) for row in rows]


async def counted_desktops(db: Db) -> list[uuid.UUID]:
    """The desktops that count against the license's sessions now."""
    return await session_desktops(db)


async def known_users(db: Db, user_ids: Collection[str]) -> dict[str, bool]:
    """Of ``user_ids``, those that exist, with whether each is disabled."""
    rows = await db.fetch(
        "SELECT id::text, disabled FROM users WHERE id = ANY($1::uuid[])", list(user_ids)
    )
    return {row["id"]: bool(row["disabled"]) for row in rows}


# ------------------------------------------------------------------------------ replay


async def mark_applied(connection: asyncpg.Connection, entry_id: str, kind: str) -> bool:
    """Record that a journal entry is applied (in the applying transaction): ``False`` if it was."""
    inserted = await connection.fetchval(
        """
        INSERT INTO outage_journal (entry_id, kind) VALUES ($1, $2)
        ON CONFLICT (entry_id) DO NOTHING RETURNING true
        """,
        entry_id,
        kind,
    )
    return bool(inserted)


async def set_outcome(connection: Db, entry_id: str, outcome: str) -> None:
    """Say how an applied entry went when it did not go as journaled."""
    await connection.execute(
        "UPDATE outage_journal SET outcome = $2 WHERE entry_id = $1", entry_id, outcome
    )


async def insert_logon(
    connection: asyncpg.Connection,
    *,
    logon_id: uuid.UUID,
    user_id: uuid.UUID,
    pool_id: uuid.UUID,
    desktop_id: uuid.UUID,
    at: datetime,
) -> None:
    """A logon asked and allocated at ``at`` (nothing when it exists already)."""
    await connection.execute(
        """
        INSERT INTO logons (id, user_id, pool_id, desktop_id, asked_at, allocated_at)
        VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (id) DO NOTHING
        """,
        logon_id,
        user_id,
        pool_id,
        desktop_id,
        at,
    )


async def mark_logon_at(
    connection: Db, logon_id: uuid.UUID, column: str, at: datetime, session_id: uuid.UUID | None
) -> None:
    """Set a phase of a logon to the time it happened (once; the session when given)."""
    assert column in {
        "token_issued_at",
        "tunnel_opened_at",
        "daemon_connected_at",
        "first_frame_at",
    }
    await connection.execute(
        f"""
        UPDATE logons SET {column} = $2, session_id = coalesce($3, session_id)
         WHERE id = $1 AND {column} IS NULL AND failed_at IS NULL
        """,
        logon_id,
        at,
        session_id,
    )


async def logon_of_session(db: Db, session_id: uuid.UUID) -> uuid.UUID | None:
    """The logon a session opened."""
    found: uuid.UUID | None = await db.fetchval(
        "SELECT id FROM logons WHERE session_id = $1", session_id
    )
    return found


async def insert_session_at(
    connection: asyncpg.Connection,
    *,
    session_id: uuid.UUID,
    user_id: uuid.UUID,
    desktop_id: uuid.UUID,
    pool_id: uuid.UUID,
    desktop_name: str,
    protocol: str,
    gateway_id: str,
    at: datetime,
) -> SessionRecord | None:
    """The session a gateway started at ``at`` under its own id (``None``: it exists)."""
    row = await connection.fetchrow(
        """
        INSERT INTO desktop_sessions (id, user_id, desktop_id, pool_id, desktop_name, protocol,
                                      gateway_id, started_at, last_activity_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now())
        ON CONFLICT (id) DO NOTHING
        RETURNING *
        """,
        session_id,
        user_id,
        desktop_id,
        pool_id,
        desktop_name,
        protocol,
        gateway_id,
        at,
    )
    return None if row is None else session_from_row(row)


async def set_connected_at(
    connection: Db, session_id: uuid.UUID, connection_id: str, at: datetime
) -> None:
    """The daemon's connection id of a session, and when it connected."""
    await connection.execute(
        """
        UPDATE desktop_sessions SET connection_id = $2, connected_at = $3
         WHERE id = $1 AND ended_at IS NULL
        """,
        session_id,
        connection_id,
        at,
    )
