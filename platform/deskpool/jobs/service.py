"""An operator's use cases of the job queue: what the API, the CLI and plugins call.

List and read jobs, retry a dead one, cancel a queued one. Retrying and cancelling change the
job and record the audit event through the :class:`Actor` in one transaction.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NoReturn

import asyncpg

from deskpool.actor import Actor
from deskpool.errors import Conflict, found
from deskpool.jobs import queue
from deskpool.jobs.model import Job

if TYPE_CHECKING:
    from deskpool.runtime import Runtime


async def list_jobs(
    runtime: Runtime, where: queue.JobFilter, *, limit: int, before_id: int | None = None
) -> list[Job]:
    """Up to ``limit`` jobs matching ``where``, newest first, below ``before_id``."""
    async with runtime.db.acquire() as connection:
        return await queue.list_jobs(connection, where, limit=limit, before_id=before_id)


async def get_job(runtime: Runtime, job_id: int) -> Job:
    """The job ``job_id``.

    :raises NotFound: there is none.
    """
    async with runtime.db.acquire() as connection:
        return found(await queue.get_job(connection, job_id), "job", job_id)


async def _refuse(connection: asyncpg.Connection, job_id: int, verb: str, rule: str) -> NoReturn:
    """Raise 404 when the job does not exist, else 409 naming its state."""
    existing = found(await queue.get_job(connection, job_id), "job", job_id)
    raise Conflict(f"Job {job_id} is {existing.state.value} and cannot be {verb}: {rule}.")


async def _change(
    runtime: Runtime,
    actor: Actor,
    job_id: int,
    change: Callable[[asyncpg.Connection, int], Awaitable[Job | None]],
    action: str,
    refusal: tuple[str, str],
) -> Job:
    async with runtime.db.acquire() as connection, connection.transaction():
        job = await change(connection, job_id)
        if job is None:
            await _refuse(connection, job_id, *refusal)
        await actor.record(connection, action, "jobs", str(job.id), {"kind": job.kind})
    return job


async def retry_job(runtime: Runtime, actor: Actor, job_id: int) -> Job:
    """Give a dead job a fresh set of attempts, due now.

    :raises NotFound: there is no such job.
    :raises Conflict: it is not dead.
    """
    refusal = ("retried", "only a dead job can be retried")
    return await _change(runtime, actor, job_id, queue.retry_dead, "job.retry", refusal)


async def cancel_job(runtime: Runtime, actor: Actor, job_id: int) -> Job:
    """Cancel a job that has not started.

    :raises NotFound: there is no such job.
    :raises Conflict: it runs or has finished.
    """
    refusal = ("cancelled", "only a queued job can be cancelled")
    return await _change(runtime, actor, job_id, queue.cancel_queued, "job.cancel", refusal)
