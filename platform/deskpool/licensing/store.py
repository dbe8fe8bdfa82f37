"""The SQL of licensing: the installed license, the watermark row, usage counts, report records.

No rules here: :mod:`deskpool.licensing.service` decides; these functions read and write.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.db.rows import Db
from deskpool.licensing.model import Usage
from deskpool.licensing.watermark import StoredWatermark

#: Advisory lock key held (per transaction) while a growth is checked and made, so two
#: transactions never both take the last unit of a limit ("license" in ASCII).
GROWTH_LOCK_KEY = 0x6C6963656E7365
#: The transactions holding the growth lock now (granted, shared or alone), as ``holders``:
#: a bigint advisory key shows in ``pg_locks`` as its high and low 32 bits, ``objsubid`` 1.
#: ``pg_locks`` is not a snapshot: it shows what is held at the moment it is read.
GROWTH_LOCK_HOLDERS_SQL = f"""
    SELECT count(*)::int AS holders FROM pg_locks
     WHERE locktype = 'advisory' AND granted AND objsubid = 1
       AND classid = {GROWTH_LOCK_KEY >> 32} AND objid = {GROWTH_LOCK_KEY & 0xFFFFFFFF}
       AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


@dataclass(frozen=True)
class Installation:
    """The installed license document."""

    license_id: str
    document: str
    installed_at: datetime
    installed_by: str


@dataclass(frozen=True)
class JudgedState:
    """The license state the worker last judged (each change is audited once)."""

    status: str | None
    edition: str | None
    judged_at: datetime | None


@dataclass(frozen=True)
class ReportRecord:
    """The activation-report bookkeeping of the deployment."""

    next_due_at: datetime | None
    last_attempt_at: datetime | None
    last_success_at: datetime | None
    last_outcome: str | None
    last_error: str | None
    consecutive_failures: int
    sent: int


# --------------------------------------------------------------------------- installation


async def get_installation(connection: asyncpg.Connection) -> Installation | None:
    """The installed license, if any."""
    row = await connection.fetchrow(
        "SELECT license_id, document, installed_at, installed_by FROM license_installation"
    )
    return None if row is None else Installation(**dict(row))


async def put_installation(
    connection: asyncpg.Connection, license_id: str, document: str, installed_by: str
) -> None:
    """Install ``document``, replacing any installed one."""
    await connection.execute(
        """
        INSERT INTO license_installation (slot, license_id, document, installed_by)
        VALUES (1, $1, $2, $3)
        ON CONFLICT (slot) DO UPDATE SET license_id = $1, document = $2, installed_by = $3,
                                         installed_at = now()
        """,
        license_id,
        document,
        installed_by,
    )


async def delete_installation(connection: asyncpg.Connection) -> str | None:
    """Remove the installed license; its id, or ``None`` when none was installed."""
    removed: str | None = await connection.fetchval(
        "DELETE FROM license_installation RETURNING license_id"
    )
    return removed


# --------------------------------------------------------------------------- watermark


async def instance_id(connection: asyncpg.Connection) -> str:
    """The deployment's instance id (made by the migration; survives a deleted row)."""
    value = await connection.fetchval("SELECT instance_id FROM license_watermark")
    if value is None:
        value = await connection.fetchval(
            """INSERT INTO license_watermark (slot) VALUES (1)
               ON CONFLICT (slot) DO UPDATE SET slot = 1 RETURNING instance_id"""
        )
    return str(value)


async def get_watermark(
    connection: asyncpg.Connection, *, for_update: bool = False
) -> StoredWatermark | None:
    """The watermark row (``for_update`` locks it until the transaction ends)."""
    row = await connection.fetchrow(
        "SELECT instant, seq, evidence, evidence_detail, evidence_at, mac FROM license_watermark"
        + (" FOR UPDATE" if for_update else "")
    )
    if row is None:
        return None
    mac = bytes(row["mac"]) if row["mac"] is not None else None
    return StoredWatermark(
        row["instant"], row["seq"], row["evidence"], row["evidence_detail"], row["evidence_at"], mac
    )


async def write_watermark(connection: asyncpg.Connection, row: StoredWatermark) -> bool:
    """Write ``row`` unless the stored instant is later: the watermark never moves back.

    Returns whether it was written. A missing row is created.
    """
    written = await connection.fetchval(
        """
        INSERT INTO license_watermark AS w (slot, instant, seq, evidence, evidence_detail,
                                            evidence_at, mac, updated_at)
        VALUES (1, $1, $2, $3, $4, $5, $6, now())
        ON CONFLICT (slot) DO UPDATE
            SET instant = GREATEST(w.instant, EXCLUDED.instant), seq = EXCLUDED.seq,
                evidence = EXCLUDED.evidence, evidence_detail = EXCLUDED.evidence_detail,
                evidence_at = EXCLUDED.evidence_at, mac = EXCLUDED.mac, updated_at = now()
            WHERE w.instant IS NULL OR w.instant <= EXCLUDED.instant
        RETURNING true
        """,
        row.instant,
        row.seq,
        row.evidence,
        row.evidence_detail,
        row.evidence_at,
        row.mac,
    )
    return bool(written)


async def clocks(connection: asyncpg.Connection) -> tuple[datetime, datetime | None]:
    """The database server's clock now, and the stored watermark's instant (unverified).

    Before the schema is migrated there is no watermark (``None``).
    """
    now: datetime = await connection.fetchval("SELECT clock_timestamp()")
    try:
        watermark: datetime | None = await connection.fetchval(
            "SELECT instant FROM license_watermark"
        )
    except asyncpg.UndefinedTableError:
        watermark = None
    return now, watermark


async def database_now(connection: asyncpg.Connection) -> datetime:
    """The database server's clock (a second witness of the time)."""
    moment: datetime = await connection.fetchval("SELECT now()")
    return moment


@dataclass(frozen=True)
class Snapshot:
    """The installation and the watermark row, read together."""

    installation: Installation | None
    watermark: StoredWatermark | None
    instance_id: str | None
    #: The database server's clock as it was read (``clock_timestamp()``).
    database_time: datetime


#: The columns of :func:`snapshot`, read ``FROM`` :data:`SNAPSHOT_FROM`.
SNAPSHOT_COLUMNS = """
    w.slot AS watermark_slot, w.instance_id, w.instant, w.seq, w.evidence,
    w.evidence_detail, w.evidence_at, w.mac,
    i.license_id, i.document, i.installed_at, i.installed_by,
    clock_timestamp() AS database_time
"""
#: Where :data:`SNAPSHOT_COLUMNS` are read: always one row (each table holds one at most;
#: ``LIMIT 1`` tells the planner so, which keeps a statement reading more than this cheap in
#: its eyes: no JIT compilation).
SNAPSHOT_FROM = """
    (SELECT 1) AS one
    LEFT JOIN LATERAL (SELECT * FROM license_watermark LIMIT 1) AS w ON true
    LEFT JOIN LATERAL (SELECT * FROM license_installation LIMIT 1) AS i ON true
"""


def snapshot_from_row(row: Mapping[str, Any]) -> Snapshot:
    """The :class:`Snapshot` of a row holding :data:`SNAPSHOT_COLUMNS`."""
    installation = None
    if row["license_id"] is not None:
        installation = Installation(
            row["license_id"], row["document"], row["installed_at"], row["installed_by"]
        )
    watermark = None
    if row["watermark_slot"] is not None:
        watermark = StoredWatermark(
            row["instant"],
            row["seq"],
            row["evidence"],
            row["evidence_detail"],
            row["evidence_at"],
            bytes(row["mac"]) if row["mac"] is not None else None,
        )
    instance = str(row["instance_id"]) if row["instance_id"] is not None else None
    return Snapshot(installation, watermark, instance, row["database_time"])


async def snapshot(connection: asyncpg.Connection) -> Snapshot:
    """The installed license, the watermark row and the instance id, in one round trip."""
    row = await connection.fetchrow(f"SELECT {SNAPSHOT_COLUMNS} FROM {SNAPSHOT_FROM}")
    return snapshot_from_row(row)


async def get_judged(connection: asyncpg.Connection) -> JudgedState:
    """The license state last judged."""
    row = await connection.fetchrow(
        "SELECT judged_status, judged_edition, judged_at FROM license_watermark"
    )
    if row is None:
        return JudgedState(None, None, None)
    return JudgedState(row["judged_status"], row["judged_edition"], row["judged_at"])


async def set_judged(
    connection: asyncpg.Connection, status: str, edition: str, previous: JudgedState
) -> bool:
    """Record a newly judged state, only if it still is ``previous`` (compare and set)."""
    changed = await connection.fetchval(
        """
        UPDATE license_watermark SET judged_status = $1, judged_edition = $2, judged_at = now()
        WHERE judged_status IS NOT DISTINCT FROM $3 AND judged_edition IS NOT DISTINCT FROM $4
        RETURNING true
        """,
        status,
        edition,
        previous.status,
        previous.edition,
    )
    return bool(changed)


# --------------------------------------------------------------------------- usage


async def lock_growth(connection: asyncpg.Connection) -> None:
    """Serialize growth checks until the caller's transaction ends."""
    await connection.execute("SELECT pg_advisory_xact_lock($1)", GROWTH_LOCK_KEY)


def growth_lock_sql(*, shared: bool) -> str:
    """SQL taking the growth lock until the transaction ends, as a value (``NULL``).

    Shared (:func:`lock_growth_shared`'s lock, without its savepoint) or alone
    (:func:`lock_growth`'s), for a statement that does more in the same round trip.
    """
    if shared:
        return f"pg_advisory_xact_lock_shared({GROWTH_LOCK_KEY})"
    return f"pg_advisory_xact_lock({GROWTH_LOCK_KEY})"


#: How long a logon allocated without a token counts as a session.
PENDING_LOGON = "10 minutes"
#: Desktops with a session: an open tunnel, a connection token handed out and not yet used
#: (read-only views of another session aside), or a desktop just allocated to a logon whose
#: token is being issued (a logon allocated, its token not issued, not failed: it gets its
#: token within seconds; one a crash left behind stops counting after :data:`PENDING_LOGON`).
#: Which rows of each table give a desktop a session (``FROM`` the table, as a ``WHERE``).
_SESSION_SOURCES = (
    ("desktop_sessions", "ended_at IS NULL AND NOT read_only"),
    ("connection_tokens", "redeemed_at IS NULL AND expires_at > now() AND shadow_of IS NULL"),
    (
        "logons",
        "allocated_at IS NOT NULL AND token_issued_at IS NULL AND failed_at IS NULL "
        f"AND allocated_at > now() - interval '{PENDING_LOGON}' AND desktop_id IS NOT NULL",
    ),
)
SESSION_DESKTOPS = _SESSION_DESKTOPS = "\nUNION\n".join(
    f"SELECT desktop_id FROM {table} WHERE {rows}" for table, rows in _SESSION_SOURCES
)


#: The desktops with a session (:data:`SESSION_DESKTOPS`), as an item of a ``WITH`` list named
#: ``session_desktops``: a statement that counts them (:data:`SESSIONS_COLUMN`) and asks
#: whether one desktop is among them (:func:`has_session_sql`) reads them once, and never
#: looks for one desktop's rows. Such a look had to trust PostgreSQL's statistics: those of
#: 9 a.m. are of the night before, when every session had ended, and the plan kept for the
#: day walked every open session to find one desktop's (750 pages per opening at 700 open
#: sessions in issue 39's storm). The union is materialized: asked twice, it is built once.
SESSION_DESKTOPS_CTE = f"session_desktops AS MATERIALIZED ({_SESSION_DESKTOPS})"


def has_session_sql(desktop: str) -> str:
    """SQL: whether the desktop ``desktop`` (an SQL expression) is among the session desktops.

    For a statement whose ``WITH`` list has :data:`SESSION_DESKTOPS_CTE`.
    """
    return f"EXISTS (SELECT 1 FROM session_desktops AS sd WHERE sd.desktop_id = {desktop})"


#: The desktops with a session counted, as a column ``sessions``: what a session check counts
#: (:meth:`Usage.of_sessions`). For a statement whose ``WITH`` list has
#: :data:`SESSION_DESKTOPS_CTE`.
SESSIONS_COLUMN = "(SELECT count(*) FROM session_desktops) AS sessions"


#: What :class:`Usage` counts, as a ``SELECT``.
_USAGE = f"""
    WITH {SESSION_DESKTOPS_CTE}
    SELECT (SELECT count(*) FROM desktops WHERE state <> 'deleting') AS desktops,
           (SELECT count(*) FROM pools) AS pools,
           {SESSIONS_COLUMN}
"""


async def usage(connection: asyncpg.Connection) -> Usage:
    """Desktops (those not being deleted), pools, and desktops with a session."""
    row = await connection.fetchrow(_USAGE)
    return Usage(desktops=row["desktops"], pools=row["pools"], sessions=row["sessions"])


#: The savepoint the optimistic growth check takes its shared lock in.
_SHARED_GROWTH = "deskpool_growth_shared"


async def lock_growth_shared(connection: asyncpg.Connection) -> None:
    """Share the growth lock until the caller's transaction ends (a savepoint may give it back).

    Shared holders never wait for each other; :func:`lock_growth` waits until none is left.
    The lock is taken in a savepoint of its own, which :func:`unlock_growth_shared` rolls back
    to give the lock back early; otherwise the savepoint commits with the transaction. One
    round trip.
    """
    await connection.execute(
        f"SAVEPOINT {_SHARED_GROWTH}; SELECT pg_advisory_xact_lock_shared({GROWTH_LOCK_KEY})"
    )


async def unlock_growth_shared(connection: asyncpg.Connection) -> None:
    """Give back the lock :func:`lock_growth_shared` took (nothing else was done since)."""
    await connection.execute(
        f"ROLLBACK TO SAVEPOINT {_SHARED_GROWTH}; RELEASE SAVEPOINT {_SHARED_GROWTH}"
    )


async def session_usage(
    connection: asyncpg.Connection, desktop_id: uuid.UUID | None
) -> tuple[Usage, bool, int]:
    """The sessions counted, whether ``desktop_id`` already has one, and the server's connections.

    The last is ``max_connections``: no more transactions than that can be open at once on
    the server, so no more than that can be adding a session while this one counts.
    """
    row = await connection.fetchrow(
        f"""
        WITH {SESSION_DESKTOPS_CTE}
        SELECT {SESSIONS_COLUMN},
               {has_session_sql("$1::uuid")} AS held,
               current_setting('max_connections')::int AS connections
        """,
        desktop_id,
    )
    assert row is not None
    return Usage.of_sessions(row["sessions"]), bool(row["held"]), int(row["connections"])


async def session_desktops(db: Db) -> list[uuid.UUID]:
    """The desktops that count against the license's sessions now (see :func:`session_usage`)."""
    rows = await db.fetch(_SESSION_DESKTOPS)
    return [row["desktop_id"] for row in rows]


# --------------------------------------------------------------------------- reports


async def get_reports(connection: asyncpg.Connection, *, for_update: bool = False) -> ReportRecord:
    """The activation-report bookkeeping."""
    row = await connection.fetchrow(
        """SELECT next_due_at, last_attempt_at, last_success_at, last_outcome, last_error,
                  consecutive_failures, sent FROM license_reports"""
        + (" FOR UPDATE" if for_update else "")
    )
    if row is None:
        await connection.execute(
            "INSERT INTO license_reports (slot) VALUES (1) ON CONFLICT DO NOTHING"
        )
        return ReportRecord(None, None, None, None, None, 0, 0)
    return ReportRecord(**dict(row))


async def schedule_report(connection: asyncpg.Connection, due: datetime | None) -> None:
    """Set when the next report is due (``None``: at once when next looked at)."""
    await connection.execute("UPDATE license_reports SET next_due_at = $1", due)


async def record_report(
    connection: asyncpg.Connection,
    *,
    attempted_at: datetime,
    outcome: str,
    error: str | None,
    next_due_at: datetime,
) -> None:
    """Record one attempt's outcome and when the next is due."""
    await connection.execute(
        """
        UPDATE license_reports SET
            last_attempt_at = $1, last_outcome = $2, last_error = $3, next_due_at = $4,
            last_success_at = CASE WHEN $2 = 'sent' THEN $1 ELSE last_success_at END,
            consecutive_failures = CASE WHEN $2 = 'sent' THEN 0 ELSE consecutive_failures + 1 END,
            sent = sent + CASE WHEN $2 = 'sent' THEN 1 ELSE 0 END
        """,
        attempted_at,
        outcome,
        error,
        next_due_at,
    )
