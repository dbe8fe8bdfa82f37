"""How a pool's reconciliation is asked for: the ``pool.reconcile`` job, enqueued.

A change that alters what reconciliation does to a pool (a pool created, resized, drained, a
rollout's or a schedule's change) enqueues ``pool.reconcile`` for it in the change's
transaction (:func:`enqueue_pool_reconcile`). Here, below every service that asks, rather than
in :mod:`deskpool.reconciliation.jobs`, which runs the job (a layer above them: see
``tests/unit/test_layers.py``).
"""

from __future__ import annotations

import uuid

import asyncpg

from deskpool.jobs.model import Job, JobState
from deskpool.jobs.queue import enqueue, unfinished_job

#: The job kind reconciling one pool now.
POOL_RECONCILE_JOB = "pool.reconcile"
#: The resource type of pool jobs.
POOLS = "pools"


async def enqueue_pool_reconcile(connection: asyncpg.Connection, pool_id: uuid.UUID) -> Job:
    """Enqueue ``pool.reconcile`` for the pool, unless one is queued and not started yet.

    Call it in the transaction that created or changed the pool.
    """
    existing = await unfinished_job(
        connection, POOL_RECONCILE_JOB, POOLS, str(pool_id), states=(JobState.QUEUED,)
    )
    if existing is not None:
        return existing
    return await enqueue(
        connection,
        POOL_RECONCILE_JOB,
        {"pool_id": str(pool_id)},
        priority=5,
        resource_type=POOLS,
        resource_id=str(pool_id),
    )
