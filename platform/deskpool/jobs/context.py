"""What a job handler receives: :class:`JobContext`.

A handler is ``async def handler(context: JobContext) -> None``. It returns to succeed, raises
to fail the attempt (retried with backoff), or raises
:class:`~deskpool.jobs.model.PermanentJobFailure` to fail for good. The worker heartbeats the
lease in the background while the handler runs; a handler may also call :meth:`heartbeat`
itself around long steps. When the lease is lost (it expired and another worker reclaimed the
job) or the worker shuts down, :attr:`cancelled` is set and the handler is cancelled.

Effects in PostgreSQL are fenced with :meth:`JobContext.hold_lease`, called inside the
transaction that applies them: the transaction commits only while this attempt still holds
the lease, so two workers never apply a job's effects at once. Effects elsewhere carry
:attr:`JobContext.fence`, a token that grows with every claim of the job, so the system that
receives them can refuse an older one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import asyncpg

from deskpool.jobs import queue
from deskpool.jobs.model import ClaimedJob, JobLease, LeaseLost

if TYPE_CHECKING:
    from deskpool.runtime import Runtime


class JobContext:
    """One attempt of one job, as its handler sees it.

    :param job: the claimed job.
    :param runtime: the worker process's runtime (database, key-value store, plugins).
    :param lease_duration: ``WORKER_LEASE_DURATION``.
    :param deadline: the event-loop time (``loop.time()``) by which the attempt must finish.
    :param heartbeat: extends this attempt's lease now; raises :class:`LeaseLost` if it is gone.
    """

    def __init__(
        self,
        job: ClaimedJob,
        runtime: Runtime,
        *,
        lease_duration: timedelta,
        deadline: float,
        heartbeat: Callable[[], Awaitable[None]],
    ) -> None:
        self.job = job
        self.runtime = runtime
        self.lease_duration = lease_duration
        self.deadline = deadline
        self.cancelled = asyncio.Event()
        self._heartbeat = heartbeat

    @property
    def id(self) -> int:
        """The job's id."""
        return self.job.id

    @property
    def kind(self) -> str:
        """The job's kind."""
        return self.job.kind

    @property
    def payload(self) -> dict[str, Any]:
        """The job's arguments, as enqueued."""
        return self.job.payload

    @property
    def attempt(self) -> int:
        """This attempt's number, from 1."""
        return self.job.attempt

    @property
    def fence(self) -> int:
        """The fencing token of this attempt's lease (grows with every claim of the job)."""
        return self.job.fence

    @property
    def lease(self) -> JobLease:
        """This attempt's lease."""
        return self.job.lease

    def time_left(self) -> float:
        """Seconds until the attempt's deadline."""
        return self.deadline - asyncio.get_running_loop().time()

    async def heartbeat(self) -> None:
        """Extend the lease now (the worker also does it in the background).

        :raises LeaseLost: the lease expired and the job was reclaimed; stop working on it.
        """
        await self._heartbeat()

    async def hold_lease(self, connection: asyncpg.Connection) -> None:
        """Fence the effects of the caller's open transaction on ``connection``.

        Checks that this attempt still holds the lease and extends it; the job's row stays
        locked until the transaction ends, so the job cannot be reclaimed before the
        transaction's effects are committed. Keep such transactions short.

        :raises LeaseLost: the lease is gone; the caller's transaction must not commit.
        """
        if not await queue.hold_lease(connection, self.lease, self.lease_duration):
            self.cancelled.set()
            raise LeaseLost(f"job {self.id} is no longer held by this attempt (fence {self.fence})")
