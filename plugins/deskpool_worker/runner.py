"""The job runner: claims jobs in batches, runs them, and settles them under their leases.

One :class:`JobRunner` per worker process runs at most ``WORKER_CONCURRENCY`` jobs at once. Its
loops share the process's connection pool:

- *claim*: whenever slots are free, claim up to that many due jobs in one statement; when none
  is due, sleep until a NOTIFY on the jobs channel
  (:class:`~deskpool_worker.notifications.JobNotifications`), the next due time, or
  ``WORKER_POLL_INTERVAL``, whichever comes first;
- *heartbeat*: every third of ``WORKER_LEASE_DURATION``, extend every held lease in one
  statement; a job whose lease turns out lost is cancelled (its results would be rejected);
- *complete*: successful attempts are recorded in batches, each accepted only with its current
  fencing token: with the claim that fills their slots (one statement and one commit for both,
  :func:`~deskpool.jobs.queue.complete_and_claim`), or, when no claim is coming (the queue is
  empty), by a statement of their own at once;
- *sweep*: take back jobs whose lease expired without a heartbeat (their worker died).

On :meth:`JobRunner.stop` it stops claiming, gives in-flight jobs the shutdown timeout, cancels
the rest and releases their leases so another worker takes them at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import asyncpg

from deskpool.db.bounded import statement_bound
from deskpool.jobs import queue
from deskpool.jobs.context import JobContext
from deskpool.jobs.metrics import JobMetrics
from deskpool.jobs.model import (
    ClaimedJob,
    JobKind,
    JobLease,
    JobState,
    LeaseLost,
    PermanentJobFailure,
    decide_failure,
)
from deskpool.live.model import LiveEvent
from deskpool.live.publishers import publish, publish_many
from deskpool.task_stop import cancel_all_until_done
from deskpool_worker.notifications import JobNotifications
from deskpool_worker.reconnect import (
    DATABASE_ERRORS,
    ReconnectBackoff,
    until_written,
    wait_for_event,
)
from deskpool_worker.running import RunningJob, describe_error

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: How often the queue-depth gauge is refreshed.
QUEUE_DEPTH_INTERVAL = 15.0

#: How long cancelled jobs get to unwind at shutdown before their leases are released.
CANCEL_GRACE = 2.0

#: How long a claim loop that found due jobs it could not take waits before looking again.
CONTENDED_WAIT = 0.05

#: How long a loop that failed unexpectedly waits before it starts again.
LOOP_RESTART_DELAY = 1.0

#: How long the live events of recorded completions gather before they are published together.
PUBLISH_EVERY = 0.02

#: How long finished jobs wait for a claim to carry their completion before they are recorded
#: alone (only while the claim loop is busy: an idle one lets them be recorded at once).
COMPLETION_GRACE = 0.05


@dataclass
class RunnerSettings:
    """How a runner behaves (from ``WORKER_*``)."""

    worker_id: str
    concurrency: int
    lease: timedelta
    poll_interval: float
    #: ``WORKER_STATEMENT_TIMEOUT``: how long a job's statements may run, in seconds.
    statement_timeout: float = 300.0
    kinds: Mapping[str, JobKind] = field(default_factory=dict)

    @property
    def heartbeat_interval(self) -> float:
        """A third of the lease: two heartbeats may fail before the lease expires."""
        return self.lease.total_seconds() / 3

    @property
    def sweep_interval(self) -> float:
        """How often expired leases are looked for."""
        return min(self.poll_interval, self.lease.total_seconds() / 2)


class JobRunner:
    """Runs the registered job kinds in one process.

    :param runtime: the process runtime (its pool, configuration and dsn).
    :param settings: concurrency, lease and kinds.
    :param metrics: where to record.
    """

    def __init__(self, runtime: Runtime, settings: RunnerSettings, metrics: JobMetrics) -> None:
        self.runtime = runtime
        self.settings = settings
        self.metrics = metrics
        self.kinds = dict(settings.kinds)
        self.running: dict[int, RunningJob] = {}
        self._completions: dict[JobLease, str] = {}
        self._wake = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._completions_ready = asyncio.Event()
        #: Set while the claim loop waits for work (nothing due): no claim will carry completions.
        self._claims_idle = asyncio.Event()
        self._claims_idle.set()
        self._flushing = asyncio.Lock()
        self._claim_connection: asyncpg.Connection | None = None
        #: Live events of recorded completions, published by their own loop.
        self._unpublished: list[LiveEvent] = []
        self._events_ready = asyncio.Event()
        self._publishing = asyncio.Lock()
        #: Set at the end of stop(): the publishing loop ends (even if Redis swallowed the
        #: cancellation of its last call, as redis-py can).
        self._closing = False
        self._stopping = asyncio.Event()
        self._claim_task: asyncio.Task[None] | None = None
        self._background: list[asyncio.Task[None]] = []
        self.notifications = JobNotifications(
            runtime.config["DATABASE_URL"], self._wake.set, settings.poll_interval
        )

    def _spawn(self, loop: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        self._background.append(asyncio.create_task(self._supervise(loop, name), name=name))

    async def _supervise(self, loop: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        """Run one of the runner's loops, restarting it if a bug escapes it.

        A worker whose loop silently died would hold its slots and claim nothing.
        """
        while True:
            try:
                await loop()
                return
            except Exception:
                log.exception("worker loop %s failed; restarting it", name)
                await asyncio.sleep(LOOP_RESTART_DELAY)

    async def start(self) -> None:
        """Start listening, claiming, heartbeating, completing and sweeping."""
        self._stopping.clear()
        self._closing = False
        self._spawn(self.notifications.run, "deskpool-job-notifications")
        self._spawn(self._heartbeat_loop, "deskpool-job-heartbeats")
        self._spawn(self._completion_loop, "deskpool-job-completions")
        self._spawn(self._publish_loop, "deskpool-job-events")
        self._spawn(self._sweep_loop, "deskpool-job-lease-sweep")
        self._spawn(self._depth_loop, "deskpool-job-queue-depth")
        if self.kinds:
            self._claim_task = asyncio.create_task(
                self._supervise(self._claim_loop, "claims"), name="deskpool-job-claims"
            )
        else:
            log.warning("no job kinds are registered: this worker claims no jobs")

    # ----------------------------------------------------------------------- claiming

    async def _pause(self, seconds: float) -> None:
        await wait_for_event(self._stopping, seconds)

    async def _claim_loop(self) -> None:
        settings = self.settings
        kinds = sorted(self.kinds)
        backoff = ReconnectBackoff()
        self._claims_idle.clear()
        try:
            while not self._stopping.is_set():
                free = settings.concurrency - len(self.running)
                if free <= 0:
                    self._slot_freed.clear()
                    await self._slot_freed.wait()
                    continue
                self._wake.clear()
                try:
                    claimed, due_in, launched = await self._claim(kinds, free)
                except DATABASE_ERRORS as error:
                    delay = backoff.next_delay()
                    log.warning("claiming jobs failed (%s); retrying in %.1fs", error, delay)
                    self._claims_idle.set()  # the completions wait for no claim meanwhile
                    self._completions_ready.set()
                    await self._pause(delay)
                    self._claims_idle.clear()
                    continue
                backoff.reset()
                if not launched:  # claimed while stopping: give them straight back
                    await self._release([job.lease for job in claimed])
                    return
                if len(claimed) == free:
                    continue
                if due_in is None:
                    timeout = settings.poll_interval
                elif due_in <= 0:
                    timeout = 0 if claimed else CONTENDED_WAIT
                else:
                    timeout = min(due_in, settings.poll_interval)
                if timeout > 0:
                    self._claims_idle.set()
                    if self._completions:
                        self._completions_ready.set()
                    await self._put_back_claim_connection()
                await wait_for_event(self._wake, timeout)
                self._claims_idle.clear()
        finally:
            self._claims_idle.set()
            await self._put_back_claim_connection()

    async def _put_back_claim_connection(self) -> None:
        connection, self._claim_connection = self._claim_connection, None
        if connection is not None:
            with contextlib.suppress(*DATABASE_ERRORS):
                await self.runtime.db.release(connection)

    async def _claim(
        self, kinds: list[str], free: int
    ) -> tuple[list[ClaimedJob], float | None, bool]:
        """Claim up to ``free`` jobs, recording the completions waiting with the same statement.

        The jobs start at once, unless the runner is stopping. While jobs keep coming, the loop
        keeps its connection (no pool reset between claims); a failed one goes back. Returns
        the claimed jobs, when the next job is due if fewer were claimed than asked (``None``:
        none is queued), and whether the jobs were started.
        """
        settings = self.settings
        due_in: float | None = None
        async with self._flushing:
            done = dict(self._completions)
            if self._claim_connection is None:
                self._claim_connection = await self.runtime.db.acquire()
            connection = self._claim_connection
            try:
                if done:
                    accepted, claimed = await queue.complete_and_claim(
                        connection,
                        list(done),
                        worker=settings.worker_id,
                        kinds=kinds,
                        limit=free,
                        lease=settings.lease,
                    )
                else:
                    accepted = set()
                    claimed = await queue.claim(
                        connection,
                        worker=settings.worker_id,
                        kinds=kinds,
                        limit=free,
                        lease=settings.lease,
                    )
                self._queue_events(self._settle(done, accepted))
                launched = not self._stopping.is_set()
                if launched:
                    for job in claimed:
                        self._launch(job)
                if len(claimed) < free:
                    due_in = await queue.next_due_in(connection, kinds)
            except BaseException:
                await self._put_back_claim_connection()
                raise
        return claimed, due_in, launched

    def _launch(self, job: ClaimedJob) -> None:
        kind = self.kinds[job.kind]
        loop = asyncio.get_running_loop()
        context = JobContext(
            job,
            self.runtime,
            lease_duration=self.settings.lease,
            deadline=loop.time() + kind.timeout.total_seconds(),
            heartbeat=lambda: self._heartbeat_one(job.id),
        )
        running = RunningJob(context, kind, started=loop.time())
        self.running[job.id] = running
        running.task = asyncio.create_task(self._execute(running), name=f"deskpool-job-{job.id}")
        self.metrics.claim_latency.labels(job.kind).observe(job.waited)
        self.metrics.in_flight.set(len(self.running))

    # ----------------------------------------------------------------------- running

    async def _execute(self, running: RunningJob) -> None:
        context = running.context
        outcome = "failed"
        try:
            try:
                with statement_bound(self.settings.statement_timeout):
                    async with asyncio.timeout_at(context.deadline) as deadline:
                        await running.kind.handler(context)
            except asyncio.CancelledError:
                if running.interrupted_by is None:
                    raise
                outcome = running.interrupted_by
            except LeaseLost:
                outcome = "lease_lost"
                log.warning(
                    "job %d (%s) lost its lease; attempt abandoned", context.id, context.kind
                )
            except TimeoutError as error:
                if not deadline.expired():
                    await self._record_failure(running, describe_error(error))
                else:
                    timeout = running.kind.timeout
                    await self._record_failure(running, f"timed out after {timeout}")
            except PermanentJobFailure as error:
                await self._record_failure(running, describe_error(error), permanent=True)
            except Exception as error:
                log.warning(
                    "job %d (%s) attempt %d failed",
                    context.id,
                    context.kind,
                    context.attempt,
                    exc_info=True,
                )
                await self._record_failure(running, describe_error(error))
            else:
                outcome = "succeeded"
                self._completions[context.lease] = context.kind
                self._completions_ready.set()
        finally:
            self.running.pop(context.id, None)
            self._slot_freed.set()
            self.metrics.in_flight.set(len(self.running))
            elapsed = asyncio.get_running_loop().time() - running.started
            self.metrics.run_duration.labels(context.kind, outcome).observe(elapsed)

    async def _record_failure(
        self, running: RunningJob, error: str, *, permanent: bool = False
    ) -> None:
        context = running.context
        decision = decide_failure(
            context.attempt, context.job.max_attempts, running.kind.retry, permanent=permanent
        )

        async def write() -> JobState | None:
            async with self.runtime.db.acquire() as connection:
                return await queue.fail(
                    connection,
                    context.lease,
                    error,
                    retry_after=None if decision.dead else decision.delay,
                )

        what = f"recording the failure of job {context.id}"
        try:
            lease = self.settings.lease.total_seconds()
            state = await until_written(write, within=lease, what=what)
        except DATABASE_ERRORS as db_error:
            log.warning("%s failed (%s); it is reclaimed as its lease expired", what, db_error)
            return
        if state is not None:
            what = "dead" if state is JobState.DEAD else "retrying"
            await publish(
                self.runtime,
                LiveEvent(
                    f"job.{what}",
                    str(context.id),
                    {"kind": context.kind, "state": state.value, "error": error},
                ),
            )
        if state is None:
            self._stale(context.lease, context.kind, "failure")
        elif state is JobState.DEAD:
            self.metrics.dead.labels(context.kind).inc()
            log.error(
                "job %d (%s) is dead after %d attempt(s): %s",
                context.id,
                context.kind,
                context.attempt,
                error,
            )
        else:
            self.metrics.retries.labels(context.kind).inc()
            log.info(
                "job %d (%s) will retry in %.1fs",
                context.id,
                context.kind,
                decision.delay.total_seconds(),
            )
            self._wake.set()  # look at the next due time again

    def _stale(self, lease: JobLease, kind: str, what: str) -> None:
        self.metrics.stale_results.labels(kind).inc()
        log.warning(
            "stale %s of job %d rejected: fence %d is no longer the job's lease (it was "
            "reclaimed by another worker)",
            what,
            lease.job_id,
            lease.fence,
        )

    # ----------------------------------------------------------------------- completions

    async def _completion_loop(self) -> None:
        while True:
            await self._completions_ready.wait()
            self._completions_ready.clear()
            # A busy claim loop records them with its next claim (a freed slot wakes it): give
            # it the chance, then record what it did not take.
            await wait_for_event(self._claims_idle, COMPLETION_GRACE)
            await self._flush_completions()

    async def _flush_completions(self, attempts: int | None = None) -> None:
        async with self._flushing:
            self._queue_events(await self._flush_completions_locked(attempts))

    async def _flush_completions_locked(self, attempts: int | None) -> list[LiveEvent]:
        backoff = ReconnectBackoff()
        events: list[LiveEvent] = []
        while self._completions and attempts != 0:
            batch = dict(self._completions)
            try:
                async with self.runtime.db.acquire() as connection:
                    accepted = await queue.complete(connection, list(batch))
            except DATABASE_ERRORS as error:
                delay = backoff.next_delay()
                log.warning("recording completions failed (%s); retrying in %.1fs", error, delay)
                attempts = None if attempts is None else attempts - 1
                await asyncio.sleep(delay)
                continue
            events += self._settle(batch, accepted)
        return events

    def _queue_events(self, events: list[LiveEvent]) -> None:
        """Hand live events to the publishing loop (so no claim waits for Redis)."""
        if events:
            self._unpublished += events
            self._events_ready.set()

    async def _publish_loop(self) -> None:
        """Publish the live events of recorded completions in order, PUBLISH_EVERY at a time."""
        while not self._closing:
            if await wait_for_event(self._events_ready, 1.0):
                await asyncio.sleep(PUBLISH_EVERY)
            self._events_ready.clear()
            await self._publish_queued()

    async def _publish_queued(self) -> None:
        async with self._publishing:
            events, self._unpublished = self._unpublished, []
            await publish_many(self.runtime, events)

    def _settle(self, batch: Mapping[JobLease, str], accepted: set[JobLease]) -> list[LiveEvent]:
        """Forget recorded completions; return the live events of those that were accepted."""
        events = []
        for lease, kind in batch.items():
            self._completions.pop(lease, None)
            if lease not in accepted:
                self._stale(lease, kind, "completion")
            else:
                events.append(
                    LiveEvent(
                        "job.succeeded", str(lease.job_id), {"kind": kind, "state": "succeeded"}
                    )
                )
        return events

    # ----------------------------------------------------------------------- leases

    async def _heartbeat_one(self, job_id: int) -> None:
        running = self.running.get(job_id)
        if running is None:
            raise LeaseLost(f"job {job_id} is not running in this worker")
        lease = running.context.lease
        async with self.runtime.db.acquire() as connection:
            held = await queue.heartbeat(connection, [lease], self.settings.lease)
        if lease not in held:
            running.interrupted_by = running.interrupted_by or "lease_lost"
            running.context.cancelled.set()
            raise LeaseLost(f"job {job_id} was reclaimed by another worker")

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval)
            sent = [running.context.lease for running in self.running.values()]
            sent += list(self._completions)
            if not sent:
                continue
            try:
                async with self.runtime.db.acquire() as connection:
                    held = await queue.heartbeat(connection, sent, self.settings.lease)
            except DATABASE_ERRORS as error:
                log.warning("heartbeat failed (%s); retrying", error)
                continue
            lost = set(sent) - held
            for running in list(self.running.values()):
                if running.context.lease in lost:
                    log.warning(
                        "job %d (%s) lost its lease (reclaimed by another worker); cancelling",
                        running.context.id,
                        running.context.kind,
                    )
                    running.interrupt("lease_lost")

    async def _sweep_loop(self) -> None:
        interval = self.settings.sweep_interval
        while True:
            try:
                async with self.runtime.db.acquire() as connection:
                    reclaimed = await queue.reclaim_expired(connection)
            except DATABASE_ERRORS as error:
                log.warning("sweeping expired leases failed (%s)", error)
                reclaimed = []
            for job in reclaimed:
                self.metrics.reclaims.labels(job.kind).inc()
                if job.state is JobState.DEAD:
                    self.metrics.dead.labels(job.kind).inc()
                log.warning(
                    "job %d (%s) reclaimed from worker %s: its lease expired without a "
                    "heartbeat; now %s",
                    job.id,
                    job.kind,
                    job.worker,
                    job.state.value,
                )
            await asyncio.sleep(interval * random.uniform(0.8, 1.2))

    async def _depth_loop(self) -> None:
        while True:
            try:
                async with self.runtime.db.acquire() as connection:
                    depth = await queue.queue_depth(connection)
            except DATABASE_ERRORS as error:
                log.debug("counting the queue failed (%s)", error)
            else:
                self.metrics.set_queue_depth(depth)
            await asyncio.sleep(QUEUE_DEPTH_INTERVAL)

    async def _release(self, leases: list[JobLease]) -> None:
        if not leases:
            return
        try:
            async with self.runtime.db.acquire() as connection:
                released = await queue.release(connection, leases)
        except DATABASE_ERRORS as error:
            log.warning(
                "could not release %d job(s) (%s); they are reclaimed when their leases expire",
                len(leases),
                error,
            )
            return
        if released:
            log.info("released %d job(s) for other workers to take at once", len(released))

    # ----------------------------------------------------------------------- stopping

    async def stop(self, drain_seconds: float) -> None:
        """Stop claiming, drain within ``drain_seconds``, release what is left, stop the loops."""
        self._stopping.set()
        self._slot_freed.set()
        self._wake.set()
        if self._claim_task is not None:
            await self._claim_task
            self._claim_task = None
        draining = [running.task for running in self.running.values() if running.task]
        if draining:
            log.info(
                "waiting up to %.1fs for %d job(s) in flight (WORKER_SHUTDOWN_TIMEOUT)",
                drain_seconds,
                len(draining),
            )
            await asyncio.wait(draining, timeout=drain_seconds)
        interrupted = list(self.running.values())
        for running in interrupted:
            log.warning(
                "job %d (%s) did not finish within WORKER_SHUTDOWN_TIMEOUT; interrupting it",
                running.context.id,
                running.context.kind,
            )
            running.interrupt("shutdown")
        tasks = [running.task for running in interrupted if running.task]
        if tasks:
            await asyncio.wait(tasks, timeout=CANCEL_GRACE)
        await self._flush_completions(attempts=3)
        self._closing = True
        await self._publish_queued()
        await self._release([running.context.lease for running in interrupted])
        await cancel_all_until_done(self._background)
        self._background.clear()
