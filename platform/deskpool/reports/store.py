"""The SQL of reports: the sessions and logons of a period, nothing else.

Every read uses an index on the period (``desktop_sessions_ended`` or
``desktop_sessions_pool_ended`` for the sessions, ``logons_period`` for the logons), so a report
reads only the rows it counts, however long the history before it. Read-only views of other
sessions are not usage.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from deskpool.db.rows import Db
from deskpool.reports.model import LogonFact, SessionSpan
from deskpool.reports.phases import LogonTimes
from deskpool.sessions.logons import PHASES

#: The sessions overlapping ``$1`` to ``$2`` (of the pool ``$3``, or all): found through the
#: index on ``ended_at`` (those that ended after the start, or are still open).
SESSIONS_SQL = """
    SELECT user_id, started_at, ended_at FROM desktop_sessions
     WHERE (ended_at > $1 OR ended_at IS NULL) AND started_at < $2
       AND NOT read_only AND ($3::uuid IS NULL OR pool_id = $3)
    """

#: The logons asked from ``$1`` to ``$2`` (of the pool ``$3``, or all), through ``logons_period``.
_LOGONS_OF_PERIOD = "asked_at >= $1 AND asked_at < $2 AND ($3::uuid IS NULL OR pool_id = $3)"

#: The period's logons: when asked, seconds to the first frame, why they stopped.
LOGONS_SQL = f"""
    SELECT asked_at, EXTRACT(EPOCH FROM first_frame_at - asked_at)::float8 AS duration,
           failure_reason
      FROM logons
     WHERE {_LOGONS_OF_PERIOD}
    """

#: The period's logons: when each phase was reached, in order, and when it failed.
LOGON_PHASES_SQL = f"""
    SELECT {", ".join(phase.column for phase in PHASES)}, failed_at
      FROM logons
     WHERE {_LOGONS_OF_PERIOD}
    """


async def sessions_in(
    db: Db, start: datetime, end: datetime, pool_id: uuid.UUID | None
) -> list[SessionSpan]:
    """The users' sessions that overlap ``start`` to ``end`` (of one pool, or all).

    A session that started before the period and is still open, or ended inside it, counts; it
    is found through the sessions started in the period plus those open at its start.
    """
    rows = await db.fetch(SESSIONS_SQL, start, end, pool_id)
    return [SessionSpan(row["user_id"], row["started_at"], row["ended_at"]) for row in rows]


async def logons_in(
    db: Db, start: datetime, end: datetime, pool_id: uuid.UUID | None
) -> list[LogonFact]:
    """The logons asked from ``start`` to ``end`` (of one pool, or all)."""
    rows = await db.fetch(LOGONS_SQL, start, end, pool_id)
    return [LogonFact(row["asked_at"], row["duration"], row["failure_reason"]) for row in rows]


async def logon_times_in(
    db: Db, start: datetime, end: datetime, pool_id: uuid.UUID | None
) -> list[LogonTimes]:
    """The logons asked from ``start`` to ``end`` (of one pool, or all), with their phases."""
    rows = await db.fetch(LOGON_PHASES_SQL, start, end, pool_id)
    last = len(PHASES)
    return [LogonTimes(tuple(row[:last]), row[last]) for row in rows]


async def database_now(db: Db) -> datetime:
    """The database's clock (open sessions are counted up to it)."""
    now: datetime = await db.fetchval("SELECT now()")
    return now
