"""Periodic-task runs for tests: a lease held in the database, and the context of its run.

A test that runs a periodic task's body directly (without a worker) needs what the worker's
scheduler would have made: the task's row in ``periodic_tasks`` holding a lease, and a
:class:`~deskpool.jobs.periodic.PeriodicContext` with that lease's fence.
:func:`claim_periodic_task` writes the row; :func:`leased_periodic_context` writes it and
returns the context of the run holding it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from deskpool.jobs.periodic import PeriodicContext
from deskpool.runtime import Runtime


async def claim_periodic_task(
    connection: asyncpg.Connection,
    name: str,
    *,
    fence: int,
    lease: timedelta = timedelta(minutes=1),
    started: bool = True,
) -> int:
    """Write the claim of periodic task ``name`` as the scheduler of a worker would.

    :param fence: the lease's fencing token.
    :param lease: how long from now the lease lasts (``timedelta(0)``: it has just expired).
    :param started: whether the claimed run's start is recorded (``last_started_at``: now).
    :returns: the fence.
    """
    await connection.execute(
        """
        INSERT INTO periodic_tasks (name, fence, lease_expires_at, last_started_at)
        VALUES ($1, $2, now() + $3::interval, CASE WHEN $4 THEN now() END)
        """,
        name,
        fence,
        lease,
        started,
    )
    return fence


async def leased_periodic_context(
    connection: asyncpg.Connection,
    runtime: Runtime,
    name: str,
    *,
    fence: int = 7,
    interval: timedelta = timedelta(seconds=30),
    lease: timedelta = timedelta(minutes=1),
) -> PeriodicContext:
    """Claim periodic task ``name`` and return the context of the run holding its lease."""
    await claim_periodic_task(connection, name, fence=fence, lease=lease)
    return PeriodicContext(
        name,
        runtime,
        fence=fence,
        started_at=datetime.now(UTC),
        interval=interval,
        lease_duration=lease,
    )
