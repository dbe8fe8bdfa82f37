"""The job queue in PostgreSQL: the statements that enqueue, claim and settle jobs.

Each function takes a connection, so callers choose the transaction: :func:`enqueue` called
inside a transaction that also changes a desktop makes the job exist exactly when the change
is committed. The worker's statements work in batches (claim up to N, heartbeat, complete and
release many leases in one statement) and every statement that settles a job names the lease
it holds, so a result from a worker whose lease was reclaimed is rejected: :func:`complete`,
:func:`fail` and :func:`release` return what was accepted. Keyed jobs enqueued many at once
are :mod:`deskpool.jobs.queue_keyed`'s (beside this module, which is at the size modules keep).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from deskpool.jobs.model import (
    DEFAULT_MAX_ATTEMPTS,
    ERROR_HISTORY,
    JOBS_CHANNEL,
    ClaimedJob,
    Job,
    JobLease,
    JobState,
)

#: Jobs one claim takes at most.
MAX_CLAIM = 1000

#: Jobs a lease sweep reclaims at most in one statement.
RECLAIM_BATCH = 500

# A job's resource as a uuid, NULL when its id is none (a cast would fail the statement).
_RESOURCE_UUID = (
    "CASE WHEN jobs.resource_id ~* "
    "'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' "
    "THEN jobs.resource_id::uuid END"
)
# The name of a job's resource (a desktop, a pool, a cluster), read with the job itself: one
# index lookup per job in the same statement, never a query per job.
_RESOURCE_NAME = f"""
    CASE jobs.resource_type
        WHEN 'desktops' THEN (SELECT name FROM desktops WHERE id = {_RESOURCE_UUID})
        WHEN 'pools' THEN (SELECT name FROM pools WHERE id = {_RESOURCE_UUID})
        WHEN 'clusters' THEN (SELECT name FROM clusters WHERE id = {_RESOURCE_UUID})
    END AS resource_name
"""

#: A job's columns as :meth:`Job.from_record` reads them (with its resource's name).
JOB_COLUMNS = (
    "id, kind, state, payload, priority, run_at, attempts, max_attempts, idempotency_key, "
    "resource_type, resource_id, fence, worker, lease_expires_at, heartbeat_at, reclaims, "
    "last_error, errors, created_at, updated_at, started_at, finished_at, "
    f"{_RESOURCE_NAME}"
)

# An entry of a job's error history, appended by fail() and by lease sweeps: the history is
# capped to its last ERROR_HISTORY entries.
_APPEND_ERROR = f"""
    jsonb_path_query_array(
        jobs.errors || jsonb_build_array(jsonb_build_object(
            'attempt', jobs.attempts, 'fence', jobs.fence, 'worker', jobs.worker,
            'error', {{error}}, 'at', now())),
        '$[last - {ERROR_HISTORY - 1} to last]')
"""


# --------------------------------------------------------------------------- enqueueing


async def enqueue(
    connection: asyncpg.Connection,
    kind: str,
    payload: Mapping[str, Any] | None = None,
    *,
    priority: int = 0,
    run_at: datetime | None = None,
    delay: timedelta | None = None,
    idempotency_key: str | None = None,
    resource_type: str | None = None,
    resource_id: str | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> Job:
    """Add a job; idle workers are woken when the surrounding transaction commits.

    :param payload: JSON-serializable arguments of the handler (never secrets: payloads are
        shown by the jobs API).
    :param priority: higher runs first among due jobs.
    :param run_at: when the job becomes due (default: now); ``delay`` is relative to now.
    :param idempotency_key: enqueueing the same key again returns the job already enqueued
        (whatever its state) instead of adding one.
    :param resource_type: the resource the job works on (``desktops``...), with
        ``resource_id``, so the resource's jobs can be listed.
    :param max_attempts: attempts before the job is ``dead``.
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    if run_at is not None and delay is not None:
        raise ValueError("give run_at or delay, not both")
    row = None
    arguments = (
        kind,
        json.dumps(dict(payload or {})),
        priority,
        run_at,
        delay,
        idempotency_key,
        resource_type,
        resource_id,
        max_attempts,
    )
    while row is None:
        row = await connection.fetchrow(
            f"""
            INSERT INTO jobs (kind, payload, priority, run_at, idempotency_key, resource_type,
                              resource_id, max_attempts)
            VALUES ($1, $2::jsonb, $3, coalesce($4, now()) + coalesce($5, interval '0'), $6,
                    $7, $8, $9)
            ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
            RETURNING {JOB_COLUMNS}
            """,
            *arguments,
        )
        if row is None:  # the key exists: return that job (unless it was pruned meanwhile)
            row = await connection.fetchrow(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE idempotency_key = $1", idempotency_key
            )
    return Job.from_record(row)


async def enqueue_many(
    connection: asyncpg.Connection,
    kind: str,
    payloads: Sequence[Mapping[str, Any]],
    *,
    priority: int = 0,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> list[int]:
    """Add one job of ``kind`` per payload, due now, in one statement; return their ids."""
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    rows = await connection.fetch(
        """
        INSERT INTO jobs (kind, payload, priority, max_attempts)
        SELECT $1, payload::jsonb, $3, $4 FROM unnest($2::text[]) AS payload
        RETURNING id
        """,
        kind,
        [json.dumps(dict(payload)) for payload in payloads],
        priority,
        max_attempts,
    )
    return [row["id"] for row in rows]


# --------------------------------------------------------------------------- the worker's side


# Claiming: the due jobs of kinds $1, highest priority and longest due first, become running
# under worker $2's lease of $3. The limit is written into the statement (one prepared
# statement per batch size), so the cached plan knows the batch is small and walks jobs_due in
# order instead of sorting the whole backlog.
_CLAIM_CTES = """
    due AS (
        SELECT id FROM jobs
        WHERE state = 'queued' AND run_at <= now() AND kind = ANY($1::text[])
        ORDER BY priority DESC, run_at, id
        LIMIT {limit}
        FOR UPDATE SKIP LOCKED
    ),
    claimed AS (
        UPDATE jobs SET
            state = 'running',
            attempts = jobs.attempts + 1,
            fence = jobs.fence + 1,
            worker = $2,
            lease_expires_at = now() + $3::interval,
            heartbeat_at = now(),
            started_at = now(),
            updated_at = now()
        FROM due
        WHERE jobs.id = due.id
        RETURNING jobs.id, jobs.kind, jobs.payload, jobs.attempts, jobs.max_attempts, jobs.fence,
                  jobs.resource_type, jobs.resource_id,
                  extract(epoch FROM now() - jobs.run_at)::float8 AS waited
    )
"""

# Completing: the jobs of the leases (ids {ids}, fences {fences}) still held succeed.
_COMPLETE = """
    UPDATE jobs SET state = 'succeeded', finished_at = now(), updated_at = now(),
                    lease_expires_at = NULL
    FROM unnest({ids}::bigint[], {fences}::bigint[]) AS done(id, fence)
    WHERE jobs.id = done.id AND jobs.fence = done.fence AND jobs.state = 'running'
    RETURNING jobs.id, jobs.fence
"""


def _claim_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_CLAIM:
        raise ValueError(f"a claim takes 1 to {MAX_CLAIM} jobs")
    return int(limit)


async def claim(
    connection: asyncpg.Connection,
    *,
    worker: str,
    kinds: Sequence[str],
    limit: int,
    lease: timedelta,
) -> list[ClaimedJob]:
    """Claim up to ``limit`` due jobs of ``kinds``, highest priority and longest due first.

    Each claimed job is ``running`` under a lease of ``lease`` held by ``worker``, with its
    attempt count and fencing token incremented. Jobs other workers are claiming are skipped,
    never waited for.
    """
    rows = await connection.fetch(
        f"WITH {_CLAIM_CTES.format(limit=_claim_limit(limit))} SELECT * FROM claimed",
        list(kinds),
        worker,
        lease,
    )
    return [ClaimedJob.from_record(row) for row in rows]


async def complete_and_claim(
    connection: asyncpg.Connection,
    leases: Sequence[JobLease],
    *,
    worker: str,
    kinds: Sequence[str],
    limit: int,
    lease: timedelta,
) -> tuple[set[JobLease], list[ClaimedJob]]:
    """:func:`complete` ``leases`` and :func:`claim` up to ``limit`` jobs, in one statement.

    One round trip and one commit instead of two: the worker records the jobs that finished
    with the claim that fills their slots. Completions are accepted exactly as by
    :func:`complete` (current leases only) and jobs are claimed exactly as by :func:`claim`;
    the two touch different rows (running ones, queued ones). Returns the accepted leases and
    the claimed jobs.
    """
    ids, fences = _lease_arrays(leases)
    rows = await connection.fetch(
        f"""
        WITH done AS ({_COMPLETE.format(ids="$4", fences="$5")}),
        {_CLAIM_CTES.format(limit=_claim_limit(limit))}
        SELECT true AS claimed, * FROM claimed
        UNION ALL
        SELECT false, id, NULL, NULL, NULL, NULL, fence, NULL, NULL, NULL FROM done
        """,
        list(kinds),
        worker,
        lease,
        ids,
        fences,
    )
    accepted = {JobLease(row["id"], row["fence"]) for row in rows if not row["claimed"]}
    return accepted, [ClaimedJob.from_record(row) for row in rows if row["claimed"]]


def _lease_arrays(leases: Sequence[JobLease]) -> tuple[list[int], list[int]]:
    return [lease.job_id for lease in leases], [lease.fence for lease in leases]


async def heartbeat(
    connection: asyncpg.Connection, leases: Sequence[JobLease], lease: timedelta
) -> set[JobLease]:
    """Extend the leases still held; return those that were (the others are lost)."""
    if not leases:
        return set()
    ids, fences = _lease_arrays(leases)
    rows = await connection.fetch(
        """
        UPDATE jobs SET lease_expires_at = now() + $3::interval, heartbeat_at = now()
        FROM unnest($1::bigint[], $2::bigint[]) AS held(id, fence)
        WHERE jobs.id = held.id AND jobs.fence = held.fence AND jobs.state = 'running'
        RETURNING jobs.id, jobs.fence
        """,
        ids,
        fences,
        lease,
    )
    return {JobLease(row["id"], row["fence"]) for row in rows}


async def complete(connection: asyncpg.Connection, leases: Sequence[JobLease]) -> set[JobLease]:
    """Mark jobs succeeded; only current leases are accepted (the accepted ones are returned)."""
    if not leases:
        return set()
    ids, fences = _lease_arrays(leases)
    rows = await connection.fetch(_COMPLETE.format(ids="$1", fences="$2"), ids, fences)
    return {JobLease(row["id"], row["fence"]) for row in rows}


async def fail(
    connection: asyncpg.Connection,
    lease: JobLease,
    error: str,
    *,
    retry_after: timedelta | None,
) -> JobState | None:
    """Record a failed attempt: re-queue after ``retry_after``, or ``dead`` when ``None``.

    :returns: the job's new state, or ``None`` when the lease is stale (nothing recorded).
    """
    state = JobState.DEAD if retry_after is None else JobState.QUEUED
    new_state: str | None = await connection.fetchval(
        f"""
        UPDATE jobs SET
            state = $3,
            run_at = CASE WHEN $3 = 'queued' THEN now() + $4::interval ELSE jobs.run_at END,
            finished_at = CASE WHEN $3 = 'dead' THEN now() END,
            lease_expires_at = NULL,
            last_error = $5,
            errors = {_APPEND_ERROR.format(error="$5::text")},
            updated_at = now()
        WHERE id = $1 AND fence = $2 AND state = 'running'
        RETURNING state
        """,
        lease.job_id,
        lease.fence,
        state.value,
        retry_after or timedelta(0),
        error,
    )
    return JobState(new_state) if new_state is not None else None


async def release(connection: asyncpg.Connection, leases: Sequence[JobLease]) -> set[JobLease]:
    """Give jobs back at once (worker shutdown): queued, due now, the attempt not counted.

    Idle workers are woken, so another one takes the jobs without waiting for the lease to
    expire. Returns the leases that were still held.
    """
    if not leases:
        return set()
    ids, fences = _lease_arrays(leases)
    async with connection.transaction():
        rows = await connection.fetch(
            """
            UPDATE jobs SET state = 'queued', run_at = now(), attempts = jobs.attempts - 1,
                            lease_expires_at = NULL, updated_at = now()
            FROM unnest($1::bigint[], $2::bigint[]) AS held(id, fence)
            WHERE jobs.id = held.id AND jobs.fence = held.fence AND jobs.state = 'running'
            RETURNING jobs.id, jobs.fence
            """,
            ids,
            fences,
        )
        if rows:
            await connection.execute("SELECT pg_notify($1, '')", JOBS_CHANNEL)
    return {JobLease(row["id"], row["fence"]) for row in rows}


async def hold_lease(connection: asyncpg.Connection, lease: JobLease, duration: timedelta) -> bool:
    """Check, inside the caller's transaction, that ``lease`` is current, and extend it.

    The job's row stays locked until the transaction ends, so no other worker can reclaim the
    job while the transaction's effects are being committed.
    """
    if not connection.is_in_transaction():
        raise RuntimeError("hold_lease must run inside the transaction it protects")
    held = await connection.fetchval(
        """
        UPDATE jobs SET lease_expires_at = now() + $3::interval, heartbeat_at = now()
        WHERE id = $1 AND fence = $2 AND state = 'running'
        RETURNING true
        """,
        lease.job_id,
        lease.fence,
        duration,
    )
    return bool(held)


@dataclass(frozen=True)
class ReclaimedJob:
    """A job whose lease expired without a heartbeat, taken back from its worker."""

    id: int
    kind: str
    state: JobState
    worker: str | None
    fence: int


async def reclaim_expired(
    connection: asyncpg.Connection, limit: int = RECLAIM_BATCH
) -> list[ReclaimedJob]:
    """Take back jobs whose lease expired: re-queued at once, or ``dead`` if out of attempts.

    The expired attempt counts as a failed one. Idle workers are woken.
    """
    async with connection.transaction():
        rows = await connection.fetch(
            f"""
            WITH expired AS (
                SELECT id FROM jobs
                WHERE state = 'running' AND lease_expires_at < now()
                ORDER BY lease_expires_at
                LIMIT $1
                FOR UPDATE SKIP LOCKED
            ),
            reclaimed AS (
                UPDATE jobs SET
                    state = CASE WHEN jobs.attempts >= jobs.max_attempts
                                 THEN 'dead' ELSE 'queued' END,
                    run_at = now(),
                    finished_at = CASE WHEN jobs.attempts >= jobs.max_attempts THEN now() END,
                    reclaims = jobs.reclaims + 1,
                    lease_expires_at = NULL,
                    last_error = 'lease expired without a heartbeat',
                    errors = {_APPEND_ERROR.format(error="'lease expired without a heartbeat'")},
                    updated_at = now()
                FROM expired
                WHERE jobs.id = expired.id
                RETURNING jobs.id, jobs.kind, jobs.state, jobs.worker, jobs.fence
            )
            SELECT * FROM reclaimed
            """,
            limit,
        )
        if any(row["state"] == JobState.QUEUED for row in rows):
            await connection.execute("SELECT pg_notify($1, '')", JOBS_CHANNEL)
    return [
        ReclaimedJob(row["id"], row["kind"], JobState(row["state"]), row["worker"], row["fence"])
        for row in rows
    ]


async def next_due_in(connection: asyncpg.Connection, kinds: Sequence[str]) -> float | None:
    """Seconds until the next queued job of ``kinds`` is due (0 if one is); ``None`` if none."""
    seconds: float | None = await connection.fetchval(
        """
        SELECT greatest(0, extract(epoch FROM min(run_at) - now()))::float8
        FROM jobs WHERE state = 'queued' AND kind = ANY($1::text[])
        """,
        list(kinds),
    )
    return seconds


async def queue_depth(connection: asyncpg.Connection) -> dict[tuple[str, str], int]:
    """Jobs by (state, kind) among the unfinished states and ``dead``."""
    rows = await connection.fetch(
        """
        SELECT state, kind, count(*) AS jobs FROM jobs
        WHERE state IN ('queued', 'running', 'dead')
        GROUP BY state, kind
        """
    )
    return {(row["state"], row["kind"]): row["jobs"] for row in rows}


async def prune_finished(
    connection: asyncpg.Connection, older_than: timedelta, batch: int = 5000
) -> int:
    """Delete succeeded and cancelled jobs finished more than ``older_than`` ago.

    Dead jobs are kept for inspection until an operator retries them. Deletes in batches.
    """
    total = 0
    while True:
        deleted = await connection.fetchval(
            """
            WITH old AS (
                SELECT id FROM jobs
                WHERE state IN ('succeeded', 'cancelled') AND finished_at < now() - $1::interval
                LIMIT $2
                FOR UPDATE SKIP LOCKED
            ), gone AS (
                DELETE FROM jobs USING old WHERE jobs.id = old.id RETURNING 1
            )
            SELECT count(*) FROM gone
            """,
            older_than,
            batch,
        )
        total += int(deleted)
        if deleted < batch:
            return total


# --------------------------------------------------------------------------- inspection


@dataclass(frozen=True)
class JobFilter:
    """Filters of a job list (each ``None`` matches everything)."""

    state: JobState | None = None
    kind: str | None = None
    resource_type: str | None = None
    resource_id: str | None = None


async def get_job(connection: asyncpg.Connection, job_id: int) -> Job | None:
    """One job by id."""
    row = await connection.fetchrow(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1", job_id)
    return Job.from_record(row) if row is not None else None


async def list_jobs(
    connection: asyncpg.Connection, where: JobFilter, *, limit: int, before_id: int | None = None
) -> list[Job]:
    """Jobs matching ``where``, newest first, at most ``limit``, with ids below ``before_id``."""
    rows = await connection.fetch(
        f"""
        SELECT {JOB_COLUMNS} FROM jobs
        WHERE ($1::text IS NULL OR state = $1)
          AND ($2::text IS NULL OR kind = $2)
          AND ($3::text IS NULL OR resource_type = $3)
          AND ($4::text IS NULL OR resource_id = $4)
          AND ($5::bigint IS NULL OR id < $5)
        ORDER BY id DESC
        LIMIT $6
        """,
        where.state.value if where.state else None,
        where.kind,
        where.resource_type,
        where.resource_id,
        before_id,
        limit,
    )
    return [Job.from_record(row) for row in rows]


async def retry_dead(connection: asyncpg.Connection, job_id: int) -> Job | None:
    """Give a dead job a fresh set of attempts, due now; ``None`` if it is not dead."""
    async with connection.transaction():
        row = await connection.fetchrow(
            f"""
            UPDATE jobs SET state = 'queued', attempts = 0, run_at = now(), finished_at = NULL,
                            updated_at = now()
            WHERE id = $1 AND state = 'dead'
            RETURNING {JOB_COLUMNS}
            """,
            job_id,
        )
        if row is not None:
            await connection.execute("SELECT pg_notify($1, '')", JOBS_CHANNEL)
    return Job.from_record(row) if row is not None else None


async def cancel_queued(connection: asyncpg.Connection, job_id: int) -> Job | None:
    """Cancel a job that has not started; ``None`` if it is not queued."""
    row = await connection.fetchrow(
        f"""
        UPDATE jobs SET state = 'cancelled', finished_at = now(), updated_at = now()
        WHERE id = $1 AND state = 'queued'
        RETURNING {JOB_COLUMNS}
        """,
        job_id,
    )
    return Job.from_record(row) if row is not None else None


async def unfinished_job(
    connection: asyncpg.Connection,
    kind: str,
    resource_type: str,
    resource_id: str,
    *,
    states: Collection[JobState] = (JobState.QUEUED, JobState.RUNNING),
) -> Job | None:
    """The newest job of ``kind`` for the resource in one of ``states``, if there is one."""
    job_id = await connection.fetchval(
        """
        SELECT id FROM jobs
         WHERE resource_type = $1 AND resource_id = $2 AND kind = $3
           AND state = ANY($4::text[])
         ORDER BY id DESC
         LIMIT 1
        """,
        resource_type,
        resource_id,
        kind,
        [str(state) for state in states],
    )
    return None if job_id is None else await get_job(connection, job_id)
