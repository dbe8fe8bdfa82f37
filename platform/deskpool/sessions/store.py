"""The SQL of sessions and of the gateways holding them: gateway leases, session records.

No business rules and no HTTP errors here: :mod:`deskpool.sessions.model` decides,
:mod:`deskpool.sessions.service` and :mod:`deskpool.sessions.broker` call these functions in
their transactions. Tables are created by migration ``0009_sessions``. The SQL of the rest of
the area is beside it: pool session policies and the reads the session check applies them to
(:mod:`deskpool.sessions.store_policies`), connection tokens
(:mod:`deskpool.sessions.store_tokens`), logons (:mod:`deskpool.sessions.store_logons`).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.audit import audit_event_ctes
from deskpool.db.rows import Db, fetch_record, lock_clause, record_from_row
from deskpool.desktops.store import write_arguments, write_set_sql
from deskpool.errors import NotFound
from deskpool.events import AuditEvent
from deskpool.pools.model import Desktop
from deskpool.sessions.model import SessionRecord, Watcher
from deskpool.sessions.store_logons import tunnel_opened_sql
from deskpool.sessions.tunnel import TunnelCounters

# ------------------------------------------------------------------------------ gateways


async def renew_lease(connection: Db, gateway_id: str, seconds: float) -> None:
    """Create or renew the lease of ``gateway_id`` for ``seconds`` from now."""
    await connection.execute(
        """
        INSERT INTO gateway_leases (gateway_id, lease_expires_at)
        VALUES ($1, now() + make_interval(secs => $2))
        ON CONFLICT (gateway_id) DO UPDATE
           SET heartbeat_at = now(), lease_expires_at = now() + make_interval(secs => $2)
        """,
        gateway_id,
        float(seconds),
    )


async def ensure_lease(connection: Db, gateway_id: str, seconds: float) -> None:
    """:func:`renew_lease`, unless more than half of ``seconds`` is left on the lease.

    What a redemption needs (its session must not belong to a gateway already lost) without
    locking the gateway's one lease row in every redemption: a burst of redemptions at one
    gateway would wait for each other's commits (issue 39's storm; the heartbeat renews it).
    """
    await connection.execute(
        """
        WITH fresh AS (
            SELECT 1 FROM gateway_leases
             WHERE gateway_id = $1 AND lease_expires_at > now() + make_interval(secs => $2 / 2)
        )
        INSERT INTO gateway_leases (gateway_id, lease_expires_at)
        SELECT $1, now() + make_interval(secs => $2) WHERE NOT EXISTS (SELECT 1 FROM fresh)
        ON CONFLICT (gateway_id) DO UPDATE
           SET heartbeat_at = now(), lease_expires_at = now() + make_interval(secs => $2)
        """,
        gateway_id,
        float(seconds),
    )


async def drop_lease(connection: Db, gateway_id: str) -> None:
    """Forget ``gateway_id`` (it stopped, or its sessions were ended as lost)."""
    await connection.execute("DELETE FROM gateway_leases WHERE gateway_id = $1", gateway_id)


async def claim_lost_gateways(connection: asyncpg.Connection, limit: int = 100) -> list[str]:
    """Lock and return gateways whose lease expired (skipping any another process handles)."""
    rows = await connection.fetch(
        """
        SELECT gateway_id FROM gateway_leases
         WHERE lease_expires_at < now()
         ORDER BY lease_expires_at
         LIMIT $1
         FOR UPDATE SKIP LOCKED
        """,
        limit,
    )
    return [row["gateway_id"] for row in rows]


async def orphaned_gateways(connection: asyncpg.Connection) -> list[str]:
    """Gateways holding open sessions but no lease at all (lost before their first heartbeat)."""
    rows = await connection.fetch(
        """
        SELECT DISTINCT s.gateway_id FROM desktop_sessions AS s
         WHERE s.ended_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM gateway_leases AS g WHERE g.gateway_id = s.gateway_id)
        """
    )
    return [row["gateway_id"] for row in rows]


# ------------------------------------------------------------------------------ sessions


def session_from_row(row: Mapping[str, Any]) -> SessionRecord:
    """A :class:`SessionRecord` from a ``desktop_sessions`` row."""
    return record_from_row(SessionRecord, row)


#: The columns a new session is given (:func:`insert_session`, :func:`start_session`).
_SESSION_COLUMNS = (
    "user_id",
    "desktop_id",
    "pool_id",
    "desktop_name",
    "protocol",
    "gateway_id",
    "read_only",
    "shadow_of",
)


async def insert_session(
    connection: asyncpg.Connection,
    *,
    user_id: uuid.UUID,
    desktop_id: uuid.UUID,
    pool_id: uuid.UUID,
    desktop_name: str,
    protocol: str,
    gateway_id: str,
    read_only: bool = False,
    shadow_of: uuid.UUID | None = None,
) -> SessionRecord:
    """Start a session record and return it."""
    row = await connection.fetchrow(
        f"""
        INSERT INTO desktop_sessions ({", ".join(_SESSION_COLUMNS)})
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
        RETURNING *
        """,
        user_id,
        desktop_id,
        pool_id,
        desktop_name,
        protocol,
        gateway_id,
        read_only,
        shadow_of,
    )
    return session_from_row(row)


@dataclass(frozen=True, slots=True)
class StartedSession:
    """What :func:`start_session` wrote: the session, and its logon's ``tunnel_opened`` phase."""

    session: SessionRecord
    #: Seconds since the logon's phase before (``None``: no logon, or it was recorded).
    tunnel_opened: float | None


async def start_session(
    connection: asyncpg.Connection,
    session_id: uuid.UUID,
    values: Mapping[str, Any],
    *,
    token_key: bytes,
    logon_id: uuid.UUID | None,
    event: AuditEvent,
    desktop: Desktop | None = None,
) -> StartedSession:
    """Start a session record, tie the token and its logon to it, record ``event``: one statement.

    :param values: the session's columns (``user_id``, ``desktop_id``, ``pool_id``,
        ``desktop_name``, ``protocol``, ``gateway_id``, ``read_only``, ``shadow_of``).
    :param desktop: the session's desktop as the session makes it (in session), written over
        its row, which the caller locked; ``None``: nothing to write.
    :raises NotFound: ``desktop`` is gone.

    At 9 a.m. a gateway starts a thousand sessions at once: five statements each became one.
    """
    columns = list(_SESSION_COLUMNS)
    args: list[Any] = [session_id, *(values[column] for column in columns), token_key, logon_id]
    placeholders = ", ".join(f"${n}" for n in range(1, len(columns) + 2))
    token, logon = f"${len(columns) + 2}", f"${len(columns) + 3}"
    written = "SELECT NULL::uuid AS id"
    if desktop is not None:
        first = len(args) + 1
        written = f"UPDATE desktops SET {write_set_sql(first)} WHERE id = ${first} RETURNING id"
        args += write_arguments(desktop)
    audit_sql, audit_args = audit_event_ctes(event, len(args) + 1)
    row = await connection.fetchrow(
        f"""
        WITH started AS (
            INSERT INTO desktop_sessions (id, {", ".join(columns)})
            VALUES ({placeholders})
            RETURNING *
        ), token AS (
            UPDATE connection_tokens SET session_id = $1 WHERE token_key = {token}
        ), phase AS ({tunnel_opened_sql(f"{logon}::uuid", "$1")}),
        desktop AS ({written}), {audit_sql}
        SELECT s.*, (SELECT seconds FROM phase) AS tunnel_seconds,
               (SELECT count(id) FROM desktop) AS desktops_written
          FROM started AS s
        """,
        *args,
        *audit_args,
    )
    if desktop is not None and not row["desktops_written"]:
        raise NotFound(f"No desktop has the id {desktop.id}.")
    return StartedSession(session_from_row(row), row["tunnel_seconds"])


async def get_session(
    db: Db, session_id: uuid.UUID, *, for_update: bool = False
) -> SessionRecord | None:
    """The session ``session_id``, or ``None``."""
    query = f"SELECT * FROM desktop_sessions WHERE id = $1{lock_clause(for_update)}"
    return await fetch_record(db, session_from_row, query, session_id)


async def record_counters(
    connection: Db, gateway_id: str, counters: Mapping[uuid.UUID, TunnelCounters]
) -> None:
    """Record the bytes and last activity of open sessions of ``gateway_id``.

    ``last_activity`` is a Unix time; 0 leaves the stored activity as it is.
    """
    if not counters:
        return
    ids = list(counters)
    await connection.execute(
        """
        UPDATE desktop_sessions AS s
           SET bytes_to_desktop = greatest(s.bytes_to_desktop, c.to_desktop),
               bytes_to_browser = greatest(s.bytes_to_browser, c.to_browser),
               last_activity_at = CASE WHEN c.activity > 0
                                       THEN greatest(s.last_activity_at, to_timestamp(c.activity))
                                       ELSE s.last_activity_at END
          FROM unnest($2::uuid[], $3::bigint[], $4::bigint[], $5::float8[])
               AS c (id, to_desktop, to_browser, activity)
         WHERE s.id = c.id AND s.gateway_id = $1 AND s.ended_at IS NULL
        """,
        gateway_id,
        ids,
        [counters[i].bytes_to_desktop for i in ids],
        [counters[i].bytes_to_browser for i in ids],
        [float(counters[i].last_activity) for i in ids],
    )


async def end_session(
    connection: asyncpg.Connection,
    session_id: uuid.UUID,
    reason: str,
    counters: TunnelCounters | None = None,
) -> SessionRecord | None:
    """End an open session; ``None`` when it is unknown or already ended."""
    row = await connection.fetchrow(
        """
        UPDATE desktop_sessions
           SET ended_at = now(), end_reason = $2,
               bytes_to_desktop = greatest(bytes_to_desktop, $3),
               bytes_to_browser = greatest(bytes_to_browser, $4),
               last_activity_at = CASE WHEN $5 > 0
                                       THEN greatest(last_activity_at, to_timestamp($5))
                                       ELSE last_activity_at END
         WHERE id = $1 AND ended_at IS NULL
        RETURNING *
        """,
        session_id,
        reason,
        counters.bytes_to_desktop if counters else 0,
        counters.bytes_to_browser if counters else 0,
        float(counters.last_activity) if counters else 0.0,
    )
    return None if row is None else session_from_row(row)


async def open_session_ids_of_gateway(connection: Db, gateway_id: str) -> list[uuid.UUID]:
    """The open sessions held by ``gateway_id``."""
    rows = await connection.fetch(
        "SELECT id FROM desktop_sessions WHERE gateway_id = $1 AND ended_at IS NULL", gateway_id
    )
    return [row["id"] for row in rows]


async def open_shadows_of(connection: Db, session_id: uuid.UUID) -> list[uuid.UUID]:
    """The open read-only sessions joined to ``session_id``."""
    rows = await connection.fetch(
        "SELECT id FROM desktop_sessions WHERE shadow_of = $1 AND ended_at IS NULL", session_id
    )
    return [row["id"] for row in rows]


async def has_open_session(connection: Db, desktop_id: uuid.UUID) -> bool:
    """Whether a user (not a read-only viewer) has a tunnel open to ``desktop_id``."""
    return bool(
        await connection.fetchval(
            """
            SELECT EXISTS (SELECT 1 FROM desktop_sessions
                            WHERE desktop_id = $1 AND ended_at IS NULL AND NOT read_only)
            """,
            desktop_id,
        )
    )


async def last_input_of_pools(db: Db, pool_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, datetime]:
    """The latest input of the open user sessions of each desktop of ``pool_ids``.

    Sessions already asked to close (a disconnect or log-off requested) are left out: a desktop
    whose only tunnels are closing has no entry.
    """
    if not pool_ids:
        return {}
    rows = await db.fetch(
        """
        SELECT desktop_id, max(last_activity_at) AS last_input
          FROM desktop_sessions
         WHERE pool_id = ANY($1::uuid[]) AND ended_at IS NULL AND NOT read_only
           AND disconnect_requested_at IS NULL
         GROUP BY desktop_id
        """,
        list(pool_ids),
    )
    return {row["desktop_id"]: row["last_input"] for row in rows}


async def request_disconnect(
    connection: Db, session_id: uuid.UUID, reason: str
) -> SessionRecord | None:
    """Mark an open session as asked to close (the first reason wins); ``None`` if ended."""
    row = await connection.fetchrow(
        """
        UPDATE desktop_sessions
           SET disconnect_requested_at = coalesce(disconnect_requested_at, now()),
               disconnect_reason = coalesce(disconnect_reason, $2)
         WHERE id = $1 AND ended_at IS NULL
        RETURNING *
        """,
        session_id,
        reason,
    )
    return None if row is None else session_from_row(row)


async def request_revocation(connection: Db, session_id: uuid.UUID) -> SessionRecord | None:
    """Ask an open session to close for ``access_revoked``; ``None`` if it has ended.

    This reason wins over one asked before (but not over the user's own log-off): the
    session's end then logs the user off, and its record says access was taken away.
    """
    row = await connection.fetchrow(
        """
        UPDATE desktop_sessions
           SET disconnect_requested_at = coalesce(disconnect_requested_at, now()),
               disconnect_reason = CASE WHEN disconnect_reason = 'user_logoff'
                                        THEN disconnect_reason ELSE 'access_revoked' END
         WHERE id = $1 AND ended_at IS NULL
        RETURNING *
        """,
        session_id,
    )
    return None if row is None else session_from_row(row)


async def request_logoff(connection: Db, desktop_id: uuid.UUID) -> list[SessionRecord]:
    """Ask every open user session of a desktop to close for ``user_logoff``; those marked.

    This reason wins over one asked before: the session's end then logs the user off.
    """
    rows = await connection.fetch(
        """
        UPDATE desktop_sessions
           SET disconnect_requested_at = coalesce(disconnect_requested_at, now()),
               disconnect_reason = 'user_logoff'
         WHERE desktop_id = $1 AND ended_at IS NULL AND NOT read_only
        RETURNING *
        """,
        desktop_id,
    )
    return [session_from_row(row) for row in rows]


async def pending_disconnects(db: Db, gateway_id: str) -> list[tuple[uuid.UUID, str | None]]:
    """Open sessions of ``gateway_id`` that were asked to close, with the reason asked."""
    rows = await db.fetch(
        """
        SELECT id, disconnect_reason FROM desktop_sessions
         WHERE gateway_id = $1 AND ended_at IS NULL AND disconnect_requested_at IS NOT NULL
        """,
        gateway_id,
    )
    return [(row["id"], row["disconnect_reason"]) for row in rows]


@dataclass(frozen=True, slots=True)
class SessionFilter:
    """Filters of the session list (``None``: any)."""

    user_id: uuid.UUID | None = None
    desktop_id: uuid.UUID | None = None
    pool_id: uuid.UUID | None = None
    open: bool | None = None


def session_cursor(record: SessionRecord) -> list[str]:
    """The cursor key of a listed session: ``[started_at, id]``."""
    return [record.started_at.isoformat(), str(record.id)]


async def list_sessions(
    db: Db,
    *,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None = None,
    where: SessionFilter = SessionFilter(),
) -> list[SessionRecord]:
    """Up to ``limit`` sessions, newest first, after the ``after`` key."""
    after_at, after_id = after if after is not None else (None, None)
    rows = await db.fetch(
        """
        SELECT * FROM desktop_sessions
         WHERE ($1::timestamptz IS NULL OR (started_at, id) < ($1, $2::uuid))
           AND ($3::uuid IS NULL OR user_id = $3)
           AND ($4::uuid IS NULL OR desktop_id = $4)
           AND ($5::uuid IS NULL OR pool_id = $5)
           AND ($6::boolean IS NULL OR (ended_at IS NULL) = $6)
         ORDER BY started_at DESC, id DESC
         LIMIT $7
        """,
        after_at,
        after_id,
        where.user_id,
        where.desktop_id,
        where.pool_id,
        where.open,
        limit,
    )
    return [session_from_row(row) for row in rows]


async def watchers_of(db: Db, user_id: uuid.UUID) -> list[Watcher]:
    """The open read-only views of ``user_id``'s open sessions, oldest first."""
    rows = await db.fetch(
        """
        SELECT v.id, v.shadow_of, v.desktop_name, v.started_at,
               coalesce(u.display_name, u.email, u.subject, v.user_id::text) AS watcher_name
          FROM desktop_sessions v
          JOIN desktop_sessions s ON s.id = v.shadow_of
          LEFT JOIN users u ON u.id = v.user_id
         WHERE s.user_id = $1 AND s.ended_at IS NULL AND v.ended_at IS NULL
         ORDER BY v.started_at, v.id
        """,
        user_id,
    )
    return [
        Watcher(
            session_id=row["id"],
            watched_session_id=row["shadow_of"],
            desktop_name=row["desktop_name"],
            watcher_name=row["watcher_name"],
            since=row["started_at"],
        )
        for row in rows
    ]
