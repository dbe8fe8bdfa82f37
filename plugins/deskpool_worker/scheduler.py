"""The periodic scheduler: each registered task runs once per interval across all workers.

Every worker process runs one loop per registered :class:`~deskpool.jobs.periodic.PeriodicTask`.
A loop tries to claim a run (one conditional update in PostgreSQL, which at most one worker
wins per interval); the winner runs the task while heartbeating the run's lease; the others
sleep until the next run may be due. At shutdown a run in progress gets the same drain
deadline as jobs, then is cancelled and its lease freed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from deskpool.db.bounded import statement_bound
from deskpool.jobs import periodic
from deskpool.jobs.metrics import JobMetrics
from deskpool.jobs.model import LeaseLost
from deskpool.jobs.periodic import PeriodicContext, PeriodicTask
from deskpool.task_stop import cancel_all_until_done
from deskpool_worker.reconnect import DATABASE_ERRORS, ReconnectBackoff, wait_for_event
from deskpool_worker.runner import CANCEL_GRACE
from deskpool_worker.running import describe_error

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: The shortest wait between two claim attempts of one task.
MIN_WAIT = 0.05


class PeriodicScheduler:
    """Runs the registered periodic tasks.

    :param runtime: the process runtime.
    :param tasks: the registered tasks by name.
    :param metrics: where to record.
    :param worker_id: this worker's id (recorded with each run).
    :param lease: ``WORKER_LEASE_DURATION``.
    :param statement_timeout: ``WORKER_STATEMENT_TIMEOUT``, in seconds (each run's statements).
    """

    def __init__(
        self,
        runtime: Runtime,
        tasks: Mapping[str, PeriodicTask],
        metrics: JobMetrics,
        *,
        worker_id: str,
        lease: timedelta,
        statement_timeout: float = 300.0,
    ) -> None:
        self.runtime = runtime
        self.tasks = dict(tasks)
        self.metrics = metrics
        self.worker_id = worker_id
        self.lease = lease
        self.statement_timeout = statement_timeout
        self.current: dict[str, tuple[PeriodicContext, asyncio.Task[None]]] = {}
        self._stopping = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start one loop per task (the tasks' intervals are checked here, once)."""
        self._stopping.clear()
        intervals = {name: task.interval(self.runtime.config) for name, task in self.tasks.items()}
        for name, task in self.tasks.items():
            self._loops.append(
                asyncio.create_task(
                    self._task_loop(name, task, intervals[name]), name=f"deskpool-periodic-{name}"
                )
            )

    async def _task_loop(self, name: str, task: PeriodicTask, interval: timedelta) -> None:
        backoff = ReconnectBackoff()
        registered = False
        while not self._stopping.is_set():
            try:
                async with self.runtime.db.acquire() as connection:
                    if not registered:
                        await periodic.register_tasks(connection, [name])
                        registered = True
                    claimed = await periodic.claim_run(
                        connection, name, worker=self.worker_id, interval=interval, lease=self.lease
                    )
                    wait = 0.0
                    if claimed is None:
                        wait = await periodic.seconds_until_due(connection, name, interval)
            except DATABASE_ERRORS as error:
                delay = backoff.next_delay()
                log.warning(
                    "periodic task %s: claiming failed (%s); retry in %.1fs", name, error, delay
                )
                await wait_for_event(self._stopping, delay)
                continue
            backoff.reset()
            if claimed is None:
                # A run in progress elsewhere may end before its lease would: look again within
                # one interval at most.
                wait = min(max(wait, MIN_WAIT), interval.total_seconds())
                await wait_for_event(self._stopping, wait)
                continue
            context = PeriodicContext(
                name,
                self.runtime,
                fence=claimed.fence,
                started_at=claimed.started_at,
                interval=interval,
                lease_duration=self.lease,
            )
            await self._run(task, context)

    async def _run(self, task: PeriodicTask, context: PeriodicContext) -> None:
        name = context.name
        loop = asyncio.get_running_loop()
        started = loop.time()

        async def invoke() -> None:
            with statement_bound(self.statement_timeout):
                await task.run(context)

        run = asyncio.create_task(invoke(), name=f"deskpool-periodic-run-{name}")
        self.current[name] = (context, run)
        heartbeats = asyncio.create_task(self._heartbeat(context, run))
        outcome, error = "succeeded", None
        try:
            await run
        except asyncio.CancelledError:
            if not context.cancelled.is_set():
                raise
            outcome, error = "interrupted", "cancelled (worker shutdown or lease lost)"
        except LeaseLost as lost:
            outcome, error = "interrupted", str(lost)
        except Exception as failure:
            log.exception("periodic task %s failed", name)
            outcome, error = "failed", describe_error(failure)
        finally:
            heartbeats.cancel()
            self.current.pop(name, None)
        self.metrics.periodic_runs.labels(name, outcome).inc()
        self.metrics.periodic_duration.labels(name).observe(loop.time() - started)
        try:
            async with self.runtime.db.acquire() as connection:
                recorded = await periodic.finish_run(
                    connection, name, context.fence, outcome=outcome, error=error
                )
        except DATABASE_ERRORS as db_error:
            log.warning(
                "periodic task %s: could not record the end of the run (%s); its lease expires",
                name,
                db_error,
            )
            return
        if not recorded:
            log.warning(
                "periodic task %s: the run had lost its lease; its end is not recorded", name
            )

    async def _heartbeat(self, context: PeriodicContext, run: asyncio.Task[None]) -> None:
        while True:
            await asyncio.sleep(self.lease.total_seconds() / 3)
            try:
                await context.heartbeat()
            except DATABASE_ERRORS as error:
                log.warning("periodic task %s: heartbeat failed (%s)", context.name, error)
            except LeaseLost:
                log.warning("periodic task %s lost its lease; cancelling the run", context.name)
                run.cancel()
                return

    async def stop(self, drain_seconds: float) -> None:
        """Stop claiming; give runs in progress ``drain_seconds``, then cancel them."""
        self._stopping.set()
        if not self._loops:
            return
        _, pending = await asyncio.wait(self._loops, timeout=drain_seconds)
        for context, run in list(self.current.values()):
            log.warning("periodic task %s did not finish in time; interrupting it", context.name)
            context.cancelled.set()
            run.cancel()
        if pending:
            _, pending = await asyncio.wait(pending, timeout=CANCEL_GRACE)
        await cancel_all_until_done(list(pending))
        await asyncio.gather(*self._loops, return_exceptions=True)
        self._loops.clear()
