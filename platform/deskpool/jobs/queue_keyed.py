"""Keyed jobs enqueued many at once: one statement for all of them, whatever their number.

:func:`enqueue_keyed_many` does what :func:`deskpool.jobs.queue.enqueue` does for each of its
jobs, in one ``INSERT ... SELECT FROM unnest(...)`` and, only when some keys were already
taken, one ``SELECT`` of the jobs that hold them. A reconciliation creating a pool's desktops
enqueues their provisioning jobs with it while it holds the license's growth lock, which
``POST /api/v1/pools`` waits for under the api's statement timeout: a statement per job (250
of them for a pool of 250) held the lock long enough to fail the administrator's request.

Like every insert into ``jobs``, the statement wakes idle workers when its transaction commits
(the table's statement-level trigger ``jobs_enqueued``): once for the batch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from deskpool.jobs.model import DEFAULT_MAX_ATTEMPTS, Job
from deskpool.jobs.queue import JOB_COLUMNS

# Each job of the arrays, due now, unless its key is taken (then nothing: see below).
_INSERT = f"""
    INSERT INTO jobs (kind, payload, idempotency_key, resource_type, resource_id, max_attempts)
    SELECT $1, job.payload::jsonb, job.key, job.resource_type, job.resource_id, $6
      FROM unnest($2::text[], $3::text[], $4::text[], $5::text[])
           AS job(payload, key, resource_type, resource_id)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING {JOB_COLUMNS}
"""

_TAKEN = f"SELECT {JOB_COLUMNS} FROM jobs WHERE idempotency_key = ANY($1::text[])"


@dataclass(frozen=True)
class KeyedJob:
    """One job of a batch: its idempotency key, its handler's arguments and its resource."""

    key: str
    payload: Mapping[str, Any]
    resource_type: str | None = None
    resource_id: str | None = None


async def enqueue_keyed_many(
    connection: asyncpg.Connection, kind: str, jobs: Sequence[KeyedJob]
) -> list[Job]:
    """Enqueue each of ``jobs`` (of ``kind``, due now) unless its key is taken; the jobs, in order.

    As :func:`~deskpool.jobs.queue.enqueue` with an idempotency key, for each: a key already
    enqueued gives the job that has it (whatever its state) instead of adding one, and so does a
    key given twice. Call it in the transaction of the change that needs the jobs.
    """
    found: dict[str, Job] = {}
    while True:
        missing: dict[str, KeyedJob] = {}
        for job in jobs:  # a key given twice: its first job, as one enqueue after the other
            if job.key not in found:
                missing.setdefault(job.key, job)
        if not missing:
            return [found[job.key] for job in jobs]
        rows = await connection.fetch(
            _INSERT,
            kind,
            [json.dumps(dict(job.payload)) for job in missing.values()],
            list(missing),
            [job.resource_type for job in missing.values()],
            [job.resource_id for job in missing.values()],
            DEFAULT_MAX_ATTEMPTS,
        )
        found.update((row["idempotency_key"], Job.from_record(row)) for row in rows)
        taken = [key for key in missing if key not in found]
        if taken:
            # Keys enqueued before: their jobs. One pruned meanwhile is enqueued again above.
            rows = await connection.fetch(_TAKEN, taken)
            found.update((row["idempotency_key"], Job.from_record(row)) for row in rows)
