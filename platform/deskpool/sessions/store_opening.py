"""SQL of an opening in a handful of round trips (issue 39): three statements and a commit.

:func:`deskpool.sessions.opening.open_pool_desktop` runs, in one transaction:

1. :func:`lock_pool`: the allocation's lock (per pool and user) and the license's growth lock
   (shared far from the limit), the pool, whether the caller is entitled to it, its session
   policy;
2. :func:`read_candidates`, after the locks (a statement of its own, so its snapshot sees every
   opening committed before them): the desktops the user holds (locked), else the oldest free
   ready one (``FOR UPDATE SKIP LOCKED``), each with its recorded address and whether it has a
   session, and what the license's check counts (the usage, the installation, the watermark);
3. :func:`write_opening`: the desktop's new state, the logon with its phases, the single-use
   token, the start it ends, the audit event and its webhook outbox rows;

then ``COMMIT``: one flushed commit. The rules stay in Python (the allocation's, the state
machine's, the license's); only their reads and writes are gathered here.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.audit import audit_event_ctes
from deskpool.db.rows import as_uuid
from deskpool.desktops.store import WRITE_SET, desktop_from_row, write_arguments
from deskpool.events import AuditEvent
from deskpool.licensing import store as licensing
from deskpool.licensing.model import Usage
from deskpool.pools.model import Desktop, Pool
from deskpool.pools.store import pool_from_row
from deskpool.sessions.model import SessionPolicy
from deskpool.sessions.store_policies import policy_from_row


def allocation_lock_key(pool_id: uuid.UUID, user: str) -> str:
    """The allocation's advisory lock of one user in one pool (hashed by the database)."""
    return f"deskpool.allocate:{pool_id}:{user}"


@dataclass(frozen=True, slots=True)
class LockedPool:
    """What :func:`lock_pool` read."""

    pool: Pool
    entitled: bool
    policy: SessionPolicy
    #: Transactions holding the growth lock once this one took it (itself included).
    holders: int = 1
    #: Whether the growth lock was taken: shared, it is only tried (see :func:`lock_pool`).
    growth_locked: bool = True


async def lock_pool(
    connection: asyncpg.Connection,
    pool_id: uuid.UUID,
    user: str,
    group_ids: Collection[str | uuid.UUID],
    *,
    manager: bool,
    growth_alone: bool,
) -> LockedPool | None:
    """Take the opening's locks; the pool, the caller's entitlement, its policy (or ``None``).

    :param manager: the caller may manage pools: entitled to every one.
    :param growth_alone: take the growth lock alone (near the license's limit), not shared.

    Shared, the growth lock is only tried (``growth_locked`` false when it was not free): a
    shared request queues behind any opening waiting for it alone, and twenty users opening a
    pool with nothing ready at once each wait for the others' whole transactions; under load
    the last waited past the 1 s statement bound and was answered 503 "database unavailable".
    Such an opening goes on with the lock alone, whose wait is bounded as long as it may take.
    """
    # The openings holding the growth lock are counted after it is taken (``l`` first, then
    # ``h`` for its row): every other opening either took it before, and is counted here or
    # committed before the next statement's snapshot (seen in its count of sessions), or takes
    # it after, and counts this one. See :func:`check_opening_session`.
    growth = (
        f"{licensing.growth_lock_sql(shared=False)} IS NOT NULL"  # waits; true once taken
        if growth_alone
        else f"pg_try_advisory_xact_lock_shared({licensing.GROWTH_LOCK_KEY})"
    )
    row = await connection.fetchrow(
        f"""
        SELECT l.allocation_locked, l.growth_locked, h.holders, p.*,
               $3 OR EXISTS (
                   SELECT 1 FROM pool_entitlements AS e
                    WHERE e.pool_id = p.id
                      AND ((e.subject_type = 'user' AND e.subject_id = $4)
                           OR (e.subject_type = 'group' AND e.subject_id = ANY($5::uuid[])))
               ) AS entitled,
               (SELECT s FROM pool_session_policies AS s WHERE s.pool_id = p.id) AS policy
          FROM (SELECT pg_advisory_xact_lock(hashtextextended($2, 0)) IS NULL
                       AS allocation_locked,
                       {growth} AS growth_locked
                OFFSET 0) AS l
         CROSS JOIN LATERAL ({licensing.GROWTH_LOCK_HOLDERS_SQL}
                             AND l.growth_locked) AS h
          JOIN pools AS p ON p.id = $1
        """,
        pool_id,
        allocation_lock_key(pool_id, user),
        manager,
        as_uuid(user),
        [as_uuid(group) for group in group_ids],
    )
    if row is None:
        return None
    policy: Mapping[str, Any] | None = row["policy"]
    return LockedPool(
        pool_from_row(row),
        bool(row["entitled"]),
        policy_from_row(policy),
        int(row["holders"]),
        bool(row["growth_locked"]),
    )


@dataclass(frozen=True, slots=True)
class Candidate:
    """A desktop :func:`read_candidates` locked."""

    desktop: Desktop
    held: bool
    address: bytes | None
    has_session: bool


@dataclass(frozen=True, slots=True)
class Candidates:
    """What :func:`read_candidates` read."""

    held: list[Candidate]
    free: Candidate | None
    license: licensing.Snapshot
    usage: Usage
    connections: int

    def counted(self, candidate: Candidate | None) -> tuple[Usage, bool, int]:
        """What the license's session check counts for ``candidate`` (see ``session_usage``).

        ``None``: a desktop not read here, counted as one without a session.
        """
        has_session = candidate is not None and candidate.has_session
        return self.usage, has_session, self.connections


def candidates_sql(*, skip_locked: bool) -> str:
    """:func:`read_candidates`'s statement ($1 the pool, $2 the user, $3 the preference)."""
    skip = " SKIP LOCKED" if skip_locked else ""
    return f"""
        WITH held AS (
            SELECT * FROM desktops
             WHERE pool_id = $1 AND assigned_user = $2 AND state <> 'deleting'
             FOR UPDATE
        ), free AS (
            SELECT * FROM desktops
             WHERE pool_id = $1 AND state = 'ready' AND assigned_user IS NULL
               AND NOT in_session AND NOT used_since_refresh
               AND NOT EXISTS (SELECT 1 FROM held)
             ORDER BY created_at, name, id
             LIMIT 1
             FOR UPDATE{skip}
        ), chosen AS (
            SELECT true AS is_held, * FROM held
            UNION ALL
            SELECT false AS is_held, * FROM free
        ), {licensing.SESSION_DESKTOPS_CTE}
        SELECT {licensing.SNAPSHOT_COLUMNS}, {licensing.SESSIONS_COLUMN},
               current_setting('max_connections')::int AS connections,
               c.*, a.sealed AS address,
               c.id IS NOT NULL AND {licensing.has_session_sql("c.id")} AS has_session
          FROM {licensing.SNAPSHOT_FROM}
          LEFT JOIN chosen AS c ON true
          LEFT JOIN desktop_addresses AS a
            ON a.desktop_id = c.id AND a.vm_id = c.vm_id AND a.preference = $3
         ORDER BY c.created_at, c.name, c.id
        """


async def read_candidates(
    connection: asyncpg.Connection,
    pool_id: uuid.UUID,
    user: str,
    preference: str,
    *,
    skip_locked: bool = True,
) -> Candidates:
    """The user's desktops of the pool (locked); when he holds none, the oldest free one.

    Each with its address recorded for ``preference`` (from the VM it has now) and whether
    it has a session; and what the license's session check counts. Call it after
    :func:`lock_pool`, in the same transaction.

    :param skip_locked: a free desktop another transaction has locked is passed over (so
        that openings sharing the growth lock take different desktops); ``False`` waits for
        it instead (an opening with the growth lock alone: only the worker holds one a
        moment, and passing it over would refuse a pool whose only free desktop it is).
    """
    rows = await connection.fetch(
        candidates_sql(skip_locked=skip_locked),
        pool_id,
        as_uuid(user),
        preference,
    )
    first = rows[0]
    found = [
        Candidate(
            desktop_from_row(row),
            bool(row["is_held"]),
            None if row["address"] is None else bytes(row["address"]),
            bool(row["has_session"]),
        )
        for row in rows
        if row["id"] is not None
    ]
    usage = Usage.of_sessions(first["sessions"])
    return Candidates(
        held=[c for c in found if c.held],
        free=next((c for c in found if not c.held), None),
        license=licensing.snapshot_from_row(first),
        usage=usage,
        connections=int(first["connections"]),
    )


async def desktop_to_open(
    connection: asyncpg.Connection, desktop_id: uuid.UUID, pool_id: uuid.UUID
) -> tuple[Desktop | None, Pool | None, SessionPolicy]:
    """A token's desktop (locked ``FOR UPDATE``), its pool and the pool's session policy.

    One read where a redemption made three (at 9 a.m. a gateway redeems a thousand at once).
    """
    row = await connection.fetchrow(
        """
        SELECT d AS desktop, p AS pool, s AS policy
          FROM desktops AS d
          LEFT JOIN pools AS p ON p.id = $2
          LEFT JOIN pool_session_policies AS s ON s.pool_id = $2
         WHERE d.id = $1
           FOR UPDATE OF d
        """,
        desktop_id,
        pool_id,
    )
    if row is None:
        return None, None, policy_from_row(None)
    pool = None if row["pool"] is None else pool_from_row(row["pool"])
    return desktop_from_row(row["desktop"]), pool, policy_from_row(row["policy"])


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """The token :func:`write_opening` stores (its key and sealed target; never the token)."""

    key: bytes
    protocol: str
    sealed_target: bytes
    ttl: float


@dataclass(frozen=True, slots=True)
class Written:
    """What :func:`write_opening` wrote."""

    desktop: Desktop
    token_expires_at: datetime | None
    #: Seconds of each phase recorded: allocated (from the request), guest ready, token issued.
    phases: tuple[float | None, float | None, float | None]


async def write_opening(
    connection: asyncpg.Connection,
    desktop: Desktop,
    *,
    logon_id: uuid.UUID,
    asked_at: datetime,
    event: AuditEvent,
    token: IssuedToken | None,
) -> Written:
    """Write an opening in one statement; the desktop as :func:`transition` made it.

    The logon is recorded asked at ``asked_at`` and allocated now; with a ``token`` (the
    desktop's address was known), its guest is ready and its token issued now too, and the
    desktop's start, if it had one, is ended (another logon it had is superseded).
    """
    args: list[Any] = write_arguments(desktop)
    logon = len(args) + 1  # $13: the logon; $14: asked at; $15: the pool
    args += [logon_id, asked_at, desktop.pool_id]
    phases = "clock_timestamp(), clock_timestamp()" if token is not None else "NULL, NULL"
    token_sql = ""
    if token is not None:
        first = len(args) + 1
        args += [token.key, token.protocol, token.sealed_target, float(token.ttl)]
        token_sql = f"""
        token AS (
            INSERT INTO connection_tokens (token_key, user_id, desktop_id, pool_id, protocol,
                                           sealed_target, expires_at, logon_id)
            SELECT ${first}, assigned_user, id, pool_id, ${first + 1}, ${first + 2},
                   now() + make_interval(secs => ${first + 3}), ${logon}
              FROM written
            RETURNING expires_at
        ), ended AS (
            DELETE FROM desktop_starts WHERE desktop_id = $1 RETURNING logon_id
        ), superseded AS (
            UPDATE logons SET failed_at = clock_timestamp(), failure_reason = 'superseded'
             WHERE id IN (SELECT logon_id FROM ended WHERE logon_id <> ${logon})
               AND failed_at IS NULL AND first_frame_at IS NULL
        ),"""
    audit_sql, audit_args = audit_event_ctes(event, len(args) + 1)
    args += audit_args
    expires = "(SELECT expires_at FROM token)" if token is not None else "NULL::timestamptz"
    row = await connection.fetchrow(
        f"""
        WITH written AS (
            UPDATE desktops SET {WRITE_SET} WHERE id = $1 RETURNING *
        ), logon AS (
            INSERT INTO logons (id, user_id, pool_id, desktop_id, asked_at, allocated_at,
                                guest_ready_at, token_issued_at)
            SELECT ${logon}, assigned_user, $15, id, ${logon + 1}, clock_timestamp(), {phases}
              FROM written
            RETURNING *
        ),{token_sql}
        {audit_sql}
        SELECT w.*, {expires} AS token_expires_at,
               EXTRACT(EPOCH FROM l.allocated_at - l.asked_at)::float8 AS allocated_seconds,
               EXTRACT(EPOCH FROM l.guest_ready_at - l.allocated_at)::float8 AS ready_seconds,
               EXTRACT(EPOCH FROM l.token_issued_at - l.guest_ready_at)::float8 AS token_seconds
          FROM written AS w, logon AS l
        """,
        *args,
    )
    if row is None:
        raise LookupError(f"desktop {desktop.id} is gone")
    return Written(
        desktop_from_row(row),
        row["token_expires_at"],
        (row["allocated_seconds"], row["ready_seconds"], row["token_seconds"]),
    )


async def record_failed_logon(
    db: asyncpg.Connection | asyncpg.Pool,
    logon_id: uuid.UUID,
    *,
    user_id: uuid.UUID,
    pool_id: uuid.UUID,
    asked_at: datetime,
    reason: str,
) -> None:
    """Record a logon that stopped for ``reason``: its opening's transaction rolled back.

    A logon a branch of the opening recorded and committed (a start on connect) is marked
    failed instead, unless it drew or failed already.
    """
    await db.execute(
        """
        INSERT INTO logons AS l (id, user_id, pool_id, asked_at, failed_at, failure_reason)
        VALUES ($1, $2, $3, $4, clock_timestamp(), $5)
        ON CONFLICT (id) DO UPDATE SET failed_at = excluded.failed_at,
                                      failure_reason = excluded.failure_reason
         WHERE l.failed_at IS NULL AND l.first_frame_at IS NULL
        """,
        logon_id,
        user_id,
        pool_id,
        asked_at,
        reason,
    )
