"""The SQL of logons: each phase of a logon recorded once, on the database's clock.

A logon is asked by the API (:mod:`deskpool.sessions.service`), reaches its phases through the
gateway (:mod:`deskpool.sessions.broker`) and fails at most once; the phases themselves are the
pure :mod:`deskpool.sessions.logons`. Reports read the ``logons`` table (:mod:`deskpool.reports`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from deskpool.db.rows import Db, fetch_record, record_from_row
from deskpool.sessions.logons import LogonPhase, LogonRecord


def _phase_update(phase: LogonPhase, where: str, *, ago: str = "", joined: str = "") -> str:
    """``UPDATE logons`` setting ``phase`` now, once; returns the seconds since the phase before.

    A phase is recorded once, and never on a logon that failed or that already drew.

    :param ago: SQL of an interval: the phase was reached that long before now (never before
        the phase before it).
    :param joined: a ``FROM`` clause whose rows ``where`` ties to logons; the logon's
        ``session_id`` is returned beside the seconds.
    """
    column = phase.column
    earlier = ", ".join(p.column for p in phase.earlier) or "asked_at"
    at = f"GREATEST(clock_timestamp() - {ago}, {earlier})" if ago else "clock_timestamp()"
    also = "logons.session_id, " if joined else ""
    return f"""
        UPDATE logons SET {column} = {at}{{extra}}
        {joined}
         WHERE {where} AND {column} IS NULL AND failed_at IS NULL AND first_frame_at IS NULL
        RETURNING {also}EXTRACT(EPOCH FROM {column} - GREATEST({earlier}))::float8 AS seconds
        """


async def start_logon(
    db: Db,
    *,
    user_id: uuid.UUID,
    pool_id: uuid.UUID,
    desktop_id: uuid.UUID | None = None,
    logon_id: uuid.UUID | None = None,
    asked_at: datetime | None = None,
) -> uuid.UUID:
    """Record a logon asked now (or ``asked_at``); return its id (``logon_id``, if given)."""
    started: uuid.UUID = await db.fetchval(
        """
        INSERT INTO logons (id, user_id, pool_id, desktop_id, asked_at)
        VALUES (coalesce($4, gen_random_uuid()), $1, $2, $3, coalesce($5, clock_timestamp()))
        RETURNING id
        """,
        user_id,
        pool_id,
        desktop_id,
        logon_id,
        asked_at,
    )
    return started


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


def tunnel_opened_sql(logon: str, session: str) -> str:
    """The ``UPDATE`` of a logon's ``tunnel_opened`` phase, for a statement that does more.

    ``logon`` and ``session`` are the SQL of the logon's id and the session's (``$n``).
    """
    return _phase_update(LogonPhase.TUNNEL_OPENED, f"id = {logon}").replace(
        "{extra}", f", session_id = {session}"
    )


async def mark_sessions_reached(
    db: Db, phase: LogonPhase, marks: Sequence[tuple[uuid.UUID, str | None, float]]
) -> dict[uuid.UUID, float]:
    """Record ``phase`` for the logons of many sessions, in one statement (a gateway's batch).

    Each mark is a session, the daemon's connection id (``DAEMON_CONNECTED``: the open session
    records it) and how many seconds ago the phase was reached (the mark waited for the
    batch): the phase is recorded that long before the database's clock now, never before the
    phase before it. Returns the seconds of each phase recorded, by session.
    """
    update = _phase_update(
        phase, "logons.session_id = m.session_id", ago="m.ago", joined="FROM marks AS m"
    ).replace("{extra}", "")
    connected = (
        """, connected AS (
            UPDATE desktop_sessions AS s
               SET connection_id = m.connection_id, connected_at = now() - m.ago
              FROM marks AS m
             WHERE s.id = m.session_id AND s.ended_at IS NULL
        )"""
        if phase is LogonPhase.DAEMON_CONNECTED
        else ""
    )
    rows = await db.fetch(
        f"""
        WITH marks AS (
            SELECT session_id, connection_id, make_interval(secs => ago) AS ago
              FROM unnest($1::uuid[], $2::text[], $3::float8[]) AS m(session_id, connection_id, ago)
        ){connected}
        {update}
        """,
        [session_id for session_id, _, _ in marks],
        [connection_id for _, connection_id, _ in marks],
        [ago for _, _, ago in marks],
    )
    return {row["session_id"]: row["seconds"] for row in rows}


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
    return await fetch_record(db, logon_from_row, query, session_id)


async def get_logon(db: Db, logon_id: uuid.UUID) -> LogonRecord | None:
    """The logon ``logon_id``."""
    return await fetch_record(db, logon_from_row, "SELECT * FROM logons WHERE id = $1", logon_id)


def logon_from_row(row: Mapping[str, Any]) -> LogonRecord:
    """The logon of a ``logons`` row (further columns are left out)."""
    return record_from_row(LogonRecord, row)
