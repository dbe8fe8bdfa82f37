"""The SQL of sessions: pool session policies, connection tokens, gateway leases, sessions.

No business rules and no HTTP errors here: :mod:`deskpool.sessions.model` decides,
:mod:`deskpool.sessions.service` and :mod:`deskpool.sessions.broker` call these functions in
their transactions. Tables are created by migration ``0009_sessions``.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.db.rows import Db, fetch_record, lock_clause, record_from_row
from deskpool.recordings.model import RecordingPolicy
from deskpool.sessions.logons import LogonPhase, LogonRecord
from deskpool.sessions.model import (
    DEFAULT_POLICY,
    AfterDisconnect,
    DisplayProtocol,
    IssuedToken,
    SessionPolicy,
    SessionRecord,
)
from deskpool.sessions.tunnel import TunnelCounters

# ------------------------------------------------------------------------------ policies


def policy_from_row(row: Mapping[str, Any] | None) -> SessionPolicy:
    """A policy from a ``pool_session_policies`` row (the default for ``None``)."""
    if row is None:
        return DEFAULT_POLICY
    return SessionPolicy(
        protocol=DisplayProtocol(row["protocol"]),
        after_disconnect=AfterDisconnect(row["after_disconnect"]),
        logoff_delay=row["logoff_delay"],
        idle_timeout=row["idle_timeout"],
        max_session_duration=row["max_session_duration"],
        recording=RecordingPolicy(
            enabled=row["recording_enabled"], include_keys=row["recording_include_keys"]
        ),
    )


async def get_policy(db: Db, pool_id: uuid.UUID) -> SessionPolicy:
    """The session policy of ``pool_id`` (the default when it never set one)."""
    row = await db.fetchrow("SELECT * FROM pool_session_policies WHERE pool_id = $1", pool_id)
    return policy_from_row(row)


async def policies_of(db: Db, pool_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, SessionPolicy]:
    """The session policy of each of ``pool_ids`` (defaults included)."""
    rows = await db.fetch(
        "SELECT * FROM pool_session_policies WHERE pool_id = ANY($1::uuid[])", list(pool_ids)
    )
    found = {row["pool_id"]: policy_from_row(row) for row in rows}
    return {pool_id: found.get(pool_id, DEFAULT_POLICY) for pool_id in pool_ids}


async def put_policy(
    connection: asyncpg.Connection, pool_id: uuid.UUID, policy: SessionPolicy
) -> None:
    """Store the session policy of ``pool_id``."""
    await connection.execute(
        """
        INSERT INTO pool_session_policies AS p
               (pool_id, protocol, after_disconnect, logoff_delay, idle_timeout,
                max_session_duration, recording_enabled, recording_include_keys)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
        ON CONFLICT (pool_id) DO UPDATE
           SET protocol = $2, after_disconnect = $3, logoff_delay = $4, idle_timeout = $5,
               max_session_duration = $6, recording_enabled = $7,
               recording_include_keys = $8, updated_at = now()
        """,
        pool_id,
        str(policy.protocol),
        str(policy.after_disconnect),
        policy.logoff_delay,
        policy.idle_timeout,
        policy.max_session_duration,
        policy.recording.enabled,
        policy.recording.include_keys,
    )


# ------------------------------------------------------------------------------ tokens


def _issued(row: Mapping[str, Any]) -> IssuedToken:
    return record_from_row(IssuedToken, row)


async def insert_token(
    connection: asyncpg.Connection,
    key: bytes,
    *,
    user_id: uuid.UUID,
    desktop_id: uuid.UUID,
    pool_id: uuid.UUID,
    protocol: str,
    sealed_target: bytes,
    ttl: float,
    shadow_of: uuid.UUID | None = None,
    logon_id: uuid.UUID | None = None,
) -> datetime:
    """Store a new token by its key, with its sealed target; return when it expires.

    The expiry is the database's clock plus ``ttl`` seconds, the clock redemption reads.
    """
    expires_at: datetime = await connection.fetchval(
        """
        INSERT INTO connection_tokens (token_key, user_id, desktop_id, pool_id, protocol,
                                       shadow_of, sealed_target, expires_at, logon_id)
        VALUES ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8), $9)
        RETURNING expires_at
        """,
        key,
        user_id,
        desktop_id,
        pool_id,
        protocol,
        shadow_of,
        sealed_target,
        float(ttl),
        logon_id,
    )
    return expires_at


async def redeem_token(
    connection: asyncpg.Connection, key: bytes
) -> tuple[IssuedToken, bytes] | None:
    """Mark the token redeemed, once: its record and sealed target, or ``None``.

    ``None`` when no unexpired, unredeemed token has that key; two concurrent redemptions
    cannot both succeed (the ``UPDATE`` takes the row's lock and re-checks).
    """
    row = await connection.fetchrow(
        """
        UPDATE connection_tokens SET redeemed_at = now()
         WHERE token_key = $1 AND redeemed_at IS NULL AND expires_at > now()
        RETURNING *
        """,
        key,
    )
    if row is None:
        return None
    return _issued(row), bytes(row["sealed_target"])


async def get_token(db: Db, key: bytes) -> IssuedToken | None:
    """The token with that key (redeemed or not), or ``None``."""
    query = "SELECT * FROM connection_tokens WHERE token_key = $1"
    return await fetch_record(db, _issued, query, key)


async def set_token_session(
    connection: asyncpg.Connection, key: bytes, session_id: uuid.UUID
) -> None:
    """Record the session a redeemed token started."""
    await connection.execute(
        "UPDATE connection_tokens SET session_id = $2 WHERE token_key = $1", key, session_id
    )


async def prune_tokens(connection: asyncpg.Connection, before: datetime) -> int:
    """Delete tokens that expired before ``before``; return how many."""
    result = await connection.execute("DELETE FROM connection_tokens WHERE expires_at < $1", before)
    return int(result.split()[-1])


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
        """
        INSERT INTO desktop_sessions (user_id, desktop_id, pool_id, desktop_name, protocol,
                                      gateway_id, read_only, shadow_of)
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


async def get_session(
    db: Db, session_id: uuid.UUID, *, for_update: bool = False
) -> SessionRecord | None:
    """The session ``session_id``, or ``None``."""
    query = f"SELECT * FROM desktop_sessions WHERE id = $1{lock_clause(for_update)}"
    return await fetch_record(db, session_from_row, query, session_id)


async def set_connected(db: Db, session_id: uuid.UUID, connection_id: str) -> None:
    """Record the daemon's connection id of an open session."""
    await db.execute(
        """
        UPDATE desktop_sessions SET connection_id = $2, connected_at = now()
         WHERE id = $1 AND ended_at IS NULL
        """,
        session_id,
        connection_id,
    )


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


# ------------------------------------------------------------------------------ policy checks


@dataclass(frozen=True, slots=True)
class DisconnectedDesktop:
    """A desktop in use with no tunnel open, and how long it has been so."""

    desktop_id: uuid.UUID
    pool_id: uuid.UUID
    policy: SessionPolicy
    disconnected_since: datetime
    last_end_reason: str | None


async def disconnected_desktops(db: Db) -> list[DisconnectedDesktop]:
    """Desktops in use by a user who has no session open to them."""
    rows = await db.fetch(
        """
        SELECT d.id AS desktop_id, d.pool_id AS desktop_pool_id, p.protocol, p.after_disconnect,
               p.logoff_delay, p.idle_timeout, p.max_session_duration, p.recording_enabled,
               p.recording_include_keys,
               greatest(d.state_changed_at, last.ended_at, tok.issued_at) AS since,
               last.end_reason
          FROM desktops AS d
          LEFT JOIN pool_session_policies AS p ON p.pool_id = d.pool_id
          LEFT JOIN LATERAL (SELECT s.ended_at, s.end_reason FROM desktop_sessions AS s
                              WHERE s.desktop_id = d.id AND NOT s.read_only
                              ORDER BY s.started_at DESC LIMIT 1) AS last ON true
          LEFT JOIN LATERAL (SELECT max(t.issued_at) AS issued_at FROM connection_tokens AS t
                              WHERE t.desktop_id = d.id AND t.shadow_of IS NULL) AS tok ON true
         WHERE d.state = 'in_use' AND NOT d.in_session
           AND NOT EXISTS (SELECT 1 FROM desktop_sessions AS o
                            WHERE o.desktop_id = d.id AND o.ended_at IS NULL AND NOT o.read_only)
        """
    )
    return [
        DisconnectedDesktop(
            desktop_id=row["desktop_id"],
            pool_id=row["desktop_pool_id"],
            policy=policy_from_row(row) if row["protocol"] is not None else DEFAULT_POLICY,
            disconnected_since=row["since"],
            last_end_reason=row["end_reason"],
        )
        for row in rows
    ]


@dataclass(frozen=True, slots=True)
class OpenSession:
    """An open session, its pool's policy and whether its desktop is still its user's."""

    session: SessionRecord
    policy: SessionPolicy
    desktop_held: bool


async def open_sessions(db: Db) -> Sequence[OpenSession]:
    """Every open session with its pool's policy and the state of its desktop."""
    rows = await db.fetch(
        """
        SELECT s.*, p.protocol AS policy_protocol, p.after_disconnect, p.logoff_delay,
               p.idle_timeout, p.max_session_duration, p.recording_enabled,
               p.recording_include_keys,
               (d.state = 'in_use' AND d.assigned_user = s.user_id) IS TRUE AS held
          FROM desktop_sessions AS s
          LEFT JOIN pool_session_policies AS p ON p.pool_id = s.pool_id
          LEFT JOIN desktops AS d ON d.id = s.desktop_id
         WHERE s.ended_at IS NULL
        """
    )
    out = []
    for row in rows:
        policy = (
            DEFAULT_POLICY
            if row["after_disconnect"] is None
            else policy_from_row({**dict(row), "protocol": row["policy_protocol"]})
        )
        out.append(OpenSession(session_from_row(row), policy, row["held"] or row["read_only"]))
    return out


async def user_display_name(db: Db, user_id: uuid.UUID) -> str:
    """How a user is shown on their desktop: display name, else email, else subject."""
    name = await db.fetchval(
        "SELECT coalesce(display_name, email, subject) FROM users WHERE id = $1", user_id
    )
    return str(name or user_id)


# ------------------------------------------------------------------------------ logons


def _phase_update(phase: LogonPhase, where: str) -> str:
    """``UPDATE logons`` setting ``phase`` now, once; returns the seconds since the phase before.

    A phase is recorded once, and never on a logon that failed or that already drew.
    """
    column = phase.column
    earlier = ", ".join(p.column for p in phase.earlier) or "asked_at"
    return f"""
        UPDATE logons SET {column} = clock_timestamp(){{extra}}
         WHERE {where} AND {column} IS NULL AND failed_at IS NULL AND first_frame_at IS NULL
        RETURNING EXTRACT(EPOCH FROM {column} - GREATEST({earlier}))::float8 AS seconds
        """


async def start_logon(
    db: Db, *, user_id: uuid.UUID, pool_id: uuid.UUID, desktop_id: uuid.UUID | None = None
) -> uuid.UUID:
    """Record a logon asked now; return its id."""
    logon_id: uuid.UUID = await db.fetchval(
        "INSERT INTO logons (user_id, pool_id, desktop_id) VALUES ($1, $2, $3) RETURNING id",
        user_id,
        pool_id,
        desktop_id,
    )
    return logon_id


async def mark_logon(
    db: Db, logon_id: uuid.UUID, phase: LogonPhase, *, desktop_id: uuid.UUID | None = None
) -> float | None:
    """Record that logon ``logon_id`` reached ``phase`` now (and which desktop it is).

    :returns: seconds since the phase before, or ``None`` when nothing was recorded.
    """
    extra = ", desktop_id = coalesce($2, desktop_id)"
    query = _phase_update(phase, "id = $1").replace("{extra}", extra)
    seconds: float | None = await db.fetchval(query, logon_id, desktop_id)
    return seconds


async def open_logon_tunnel(db: Db, logon_id: uuid.UUID, session_id: uuid.UUID) -> float | None:
    """The gateway opened session ``session_id`` for the logon: ``tunnel_opened`` now."""
    query = _phase_update(LogonPhase.TUNNEL_OPENED, "id = $1").replace(
        "{extra}", ", session_id = $2"
    )
    seconds: float | None = await db.fetchval(query, logon_id, session_id)
    return seconds


async def mark_session_logon(db: Db, session_id: uuid.UUID, phase: LogonPhase) -> float | None:
    """Record that the logon of session ``session_id`` reached ``phase`` now."""
    query = _phase_update(phase, "session_id = $1").replace("{extra}", "")
    seconds: float | None = await db.fetchval(query, session_id)
    return seconds


async def fail_logon(db: Db, logon_id: uuid.UUID, reason: str) -> bool:
    """Record why logon ``logon_id`` stopped (unless it drew or failed already)."""
    status: str = await db.execute(
        """
        UPDATE logons SET failed_at = clock_timestamp(), failure_reason = $2
         WHERE id = $1 AND failed_at IS NULL AND first_frame_at IS NULL
        """,
        logon_id,
        reason,
    )
    return status.endswith(" 1")


async def fail_token_logon(db: Db, key: bytes, reason: str) -> None:
    """Record why the logon of the token ``key`` stopped (a refused token)."""
    await db.execute(
        """
        UPDATE logons SET failed_at = clock_timestamp(), failure_reason = $2
         WHERE id = (SELECT logon_id FROM connection_tokens WHERE token_key = $1)
           AND failed_at IS NULL AND first_frame_at IS NULL AND tunnel_opened_at IS NULL
        """,
        key,
        reason,
    )


async def fail_session_logon(db: Db, session_id: uuid.UUID, reason: str) -> None:
    """Session ``session_id`` ended before its first frame: its logon failed for ``reason``."""
    await db.execute(
        """
        UPDATE logons SET failed_at = clock_timestamp(), failure_reason = $2
         WHERE session_id = $1 AND failed_at IS NULL AND first_frame_at IS NULL
        """,
        session_id,
        reason,
    )


async def fail_unused_tokens(db: Db) -> int:
    """Logons whose token expired unredeemed failed with ``token_expired``; return how many."""
    status: str = await db.execute(
        """
        UPDATE logons l SET failed_at = t.expires_at, failure_reason = 'token_expired'
          FROM connection_tokens t
         WHERE t.logon_id = l.id AND t.redeemed_at IS NULL AND t.expires_at <= now()
           AND l.failed_at IS NULL AND l.tunnel_opened_at IS NULL
        """
    )
    return int(status.rsplit(" ", 1)[-1])


async def logon_of_session(db: Db, session_id: uuid.UUID) -> LogonRecord | None:
    """The logon that opened session ``session_id`` (``None``: a view, or older than logons)."""
    query = "SELECT * FROM logons WHERE session_id = $1 ORDER BY asked_at DESC LIMIT 1"
    return await fetch_record(db, _logon, query, session_id)


async def get_logon(db: Db, logon_id: uuid.UUID) -> LogonRecord | None:
    """The logon ``logon_id``."""
    return await fetch_record(db, _logon, "SELECT * FROM logons WHERE id = $1", logon_id)


def _logon(row: Mapping[str, Any]) -> LogonRecord:
    return record_from_row(LogonRecord, row)
