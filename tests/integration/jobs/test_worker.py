"""The worker component in this process: running, retrying, fencing, draining, reclaiming."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from deskpool.jobs import (
    JobContext,
    JobKind,
    LeaseLost,
    PeriodicContext,
    PermanentJobFailure,
    RetryPolicy,
    queue,
)
from deskpool.jobs.model import JobState
from deskpool.jobs.periodic import PeriodicTask
from deskpool.plugins import hookimpl
from deskpool.registry import Registry
from deskpool.testing.processes import until

StartWorker = Callable[..., Awaitable[Any]]
FAST_RETRY = RetryPolicy(base=timedelta(milliseconds=20), cap=timedelta(milliseconds=50))


class JobKinds:
    """A plugin registering the given job kinds."""

    def __init__(self, **kinds: Any) -> None:
        self.kinds = kinds

    @hookimpl
    def deskpool_register_job_kinds(self, registry: Registry[Any]) -> None:
        for name, kind in self.kinds.items():
            registry.add(name, kind)


async def state_of(db: asyncpg.Connection, job_id: int) -> str:
    return str(await db.fetchval("SELECT state FROM jobs WHERE id = $1", job_id))


def metric(worker: Any, name: str, **labels: str) -> float:
    value = worker.runtime.metrics.get_sample_value(name, labels)
    return float(value or 0.0)


async def test_runs_every_job_with_at_most_the_configured_concurrency(
    db: asyncpg.Connection, start_worker: StartWorker
) -> None:
    active = 0
    peak = 0
    three_running = asyncio.Event()
    gate = asyncio.Event()
    done: list[int] = []
    all_done = asyncio.Event()

    async def work(context: JobContext) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        if active == 3:
            three_running.set()
        await gate.wait()
        active -= 1
        done.append(context.payload["n"])
        if len(done) == 8:
            all_done.set()

    for n in range(8):
        await queue.enqueue(db, "work", {"n": n})
    worker = await start_worker(JobKinds(work=work), WORKER_CONCURRENCY="3")
    await asyncio.wait_for(three_running.wait(), 15)
    running = await db.fetchval("SELECT count(*) FROM jobs WHERE state = 'running'")
    assert running == 3
    gate.set()
    await asyncio.wait_for(all_done.wait(), 15)
    assert sorted(done) == list(range(8))
    assert peak == 3
    await until(
        lambda: db.fetchval("SELECT count(*) = 8 FROM jobs WHERE state = 'succeeded'"),
        "the eight jobs succeeded",
    )
    assert metric(worker, "deskpool_job_claim_latency_seconds_count", kind="work") == 8
    assert (
        metric(worker, "deskpool_job_run_duration_seconds_count", kind="work", outcome="succeeded")
        == 8
    )


async def test_a_notification_wakes_an_idle_worker_long_before_its_poll(
    db: asyncpg.Connection, start_worker: StartWorker
) -> None:
    ran = asyncio.Event()

    async def ping(context: JobContext) -> None:
        ran.set()

    worker = await start_worker(JobKinds(ping=ping), WORKER_POLL_INTERVAL="1h")
    await asyncio.wait_for(worker.runner.notifications.connected.wait(), 10)
    await queue.enqueue(db, "ping")
    await asyncio.wait_for(ran.wait(), 15)  # the fallback poll would take an hour


async def test_failed_attempts_are_retried_with_backoff_until_one_succeeds(
    db: asyncpg.Connection, start_worker: StartWorker
) -> None:
    attempts: list[int] = []

    async def flaky(context: JobContext) -> None:
        attempts.append(context.attempt)
        if context.attempt < 3:
            raise RuntimeError(f"attempt {context.attempt} failed")

    job = await queue.enqueue(db, "flaky")
    worker = await start_worker(JobKinds(flaky=JobKind(flaky, retry=FAST_RETRY)))
    await until(
        lambda: db.fetchval("SELECT state = 'succeeded' FROM jobs WHERE id = $1", job.id),
        "the job succeeded",
    )
    assert attempts == [1, 2, 3]
    stored = await queue.get_job(db, job.id)
    assert stored is not None
    assert [entry["error"] for entry in stored.errors] == [
        "RuntimeError: attempt 1 failed",
        "RuntimeError: attempt 2 failed",
    ]
    assert metric(worker, "deskpool_job_retries_total", kind="flaky") == 2


async def test_a_permanent_failure_and_exhausted_attempts_make_a_job_dead(
    db: asyncpg.Connection, start_worker: StartWorker
) -> None:
    async def refuse(context: JobContext) -> None:
        raise PermanentJobFailure("the template does not exist")

    async def hang(context: JobContext) -> None:
        await asyncio.Event().wait()

    refused = await queue.enqueue(db, "refuse", max_attempts=5)
    slow = await queue.enqueue(db, "hang", max_attempts=2)
    kinds = JobKinds(
        refuse=refuse,
        hang=JobKind(hang, retry=FAST_RETRY, timeout=timedelta(milliseconds=200)),
    )
    worker = await start_worker(kinds)
    await until(
        lambda: db.fetchval(
            "SELECT count(*) = 2 FROM jobs WHERE state = 'dead' AND id = ANY($1::bigint[])",
            [refused.id, slow.id],
        ),
        "both jobs are dead",
    )
    refused_job = await queue.get_job(db, refused.id)
    slow_job = await queue.get_job(db, slow.id)
    assert refused_job is not None
    assert slow_job is not None
    assert refused_job.attempts == 1
    assert refused_job.last_error == "PermanentJobFailure: the template does not exist"
    assert slow_job.attempts == 2
    assert slow_job.last_error == "timed out after 0:00:00.200000"
    assert metric(worker, "deskpool_jobs_dead_total", kind="refuse") == 1
    assert metric(worker, "deskpool_jobs_dead_total", kind="hang") == 1


async def test_a_job_whose_lease_is_taken_over_is_cancelled_and_its_effects_fenced(
    db: asyncpg.Connection, start_worker: StartWorker
) -> None:
    started = asyncio.Event()
    contexts: list[JobContext] = []
    fenced: list[str] = []
    refused = asyncio.Event()

    async def long(context: JobContext) -> None:
        contexts.append(context)
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            async with context.runtime.db.acquire() as connection, connection.transaction():
                try:
                    await context.hold_lease(connection)
                except LeaseLost:
                    fenced.append("refused")
                    refused.set()

    job = await queue.enqueue(db, "long")
    await start_worker(JobKinds(long=long), WORKER_LEASE_DURATION="600ms")
    await asyncio.wait_for(started.wait(), 15)
    # Another worker reclaimed the job meanwhile: its lease has a newer fencing token.
    await db.execute(
        "UPDATE jobs SET fence = fence + 1, worker = 'someone-else' WHERE id = $1", job.id
    )
    await asyncio.wait_for(contexts[0].cancelled.wait(), 15)
    await asyncio.wait_for(refused.wait(), 15)
    assert fenced == ["refused"]
    row = await db.fetchrow("SELECT state, worker FROM jobs WHERE id = $1", job.id)
    assert (row["state"], row["worker"]) == ("running", "someone-else")


async def test_a_job_left_by_a_dead_worker_is_reclaimed_and_run(
    db: asyncpg.Connection, start_worker: StartWorker
) -> None:
    ran: list[int] = []
    finished = asyncio.Event()

    async def once(context: JobContext) -> None:
        ran.append(context.attempt)
        finished.set()

    job = await queue.enqueue(db, "once")
    # A worker that claimed it and died: nobody heartbeats this lease.
    await queue.claim(
        db, worker="ghost", kinds=["once"], limit=1, lease=timedelta(milliseconds=300)
    )
    worker = await start_worker(JobKinds(once=once), WORKER_LEASE_DURATION="1s")
    await asyncio.wait_for(finished.wait(), 15)
    await until(
        lambda: db.fetchval("SELECT state = 'succeeded' FROM jobs WHERE id = $1", job.id),
        "the job succeeded",
    )
    stored = await queue.get_job(db, job.id)
    assert stored is not None
    assert ran == [2]
    assert stored.reclaims == 1
    assert stored.fence == 2
    assert metric(worker, "deskpool_job_reclaims_total", kind="once") == 1


async def test_stopping_drains_then_releases_jobs_for_another_worker(
    db: asyncpg.Connection, start_worker: StartWorker
) -> None:
    both_running = asyncio.Event()
    quick_gate = asyncio.Event()
    contexts: dict[str, JobContext] = {}

    async def quick(context: JobContext) -> None:
        contexts["quick"] = context
        if len(contexts) == 2:
            both_running.set()
        await quick_gate.wait()

    async def stuck(context: JobContext) -> None:
        contexts["stuck"] = context
        if len(contexts) == 2:
            both_running.set()
        await asyncio.Event().wait()

    quick_job = await queue.enqueue(db, "quick")
    stuck_job = await queue.enqueue(db, "stuck")
    worker = await start_worker(JobKinds(quick=quick, stuck=stuck), WORKER_SHUTDOWN_TIMEOUT="500ms")
    await asyncio.wait_for(both_running.wait(), 15)
    stopping = asyncio.create_task(worker.stop())
    quick_gate.set()  # finishes within the drain deadline
    await stopping
    assert contexts["stuck"].cancelled.is_set()
    assert await state_of(db, quick_job.id) == JobState.SUCCEEDED
    released = await queue.get_job(db, stuck_job.id)
    assert released is not None
    assert released.state is JobState.QUEUED
    assert released.attempts == 0
    assert released.lease_expires_at is None
    # Another worker takes it at once: no lease to wait for.
    taken = asyncio.Event()

    async def stuck_again(context: JobContext) -> None:
        taken.set()

    await start_worker(JobKinds(quick=quick, stuck=stuck_again))
    await asyncio.wait_for(taken.wait(), 15)


async def test_the_worker_carries_on_after_its_database_connections_are_terminated(
    db: asyncpg.Connection, start_worker: StartWorker
) -> None:
    ran: list[int] = []
    events = [asyncio.Event(), asyncio.Event()]

    async def record(context: JobContext) -> None:
        ran.append(context.payload["n"])
        events[context.payload["n"]].set()

    worker = await start_worker(JobKinds(record=record), WORKER_POLL_INTERVAL="1h")
    await queue.enqueue(db, "record", {"n": 0})
    await asyncio.wait_for(events[0].wait(), 15)
    terminated = await db.fetchval(
        """
        SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()
        """
    )
    assert terminated >= 1
    notifications = worker.runner.notifications

    async def listening_again() -> bool:
        return notifications.connections >= 2 and notifications.connected.is_set()

    await until(listening_again, "the worker listens for notifications again")
    await queue.enqueue(db, "record", {"n": 1})
    await asyncio.wait_for(events[1].wait(), 30)
    assert ran == [0, 1]


@pytest.mark.parametrize("concurrency", ["1", "4"])
async def test_jobs_can_enqueue_jobs(
    db: asyncpg.Connection, start_worker: StartWorker, concurrency: str
) -> None:
    finished = asyncio.Event()

    async def parent(context: JobContext) -> None:
        async with context.runtime.db.acquire() as connection, connection.transaction():
            await context.hold_lease(connection)
            await queue.enqueue(connection, "child", {"parent": context.id})

    async def child(context: JobContext) -> None:
        finished.set()

    await queue.enqueue(db, "parent")
    await start_worker(JobKinds(parent=parent, child=child), WORKER_CONCURRENCY=concurrency)
    await asyncio.wait_for(finished.wait(), 15)


class UnreachableDatabase:
    """The worker's pool, refusing every connection while :attr:`down` (a database outage).

    A stopped PostgreSQL refuses new connections (``ConnectionRefusedError``, an ``OSError``);
    the real pool serves again as soon as :attr:`down` is cleared.
    """

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.down = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)

    def acquire(self) -> Any:
        if self.down:
            raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 5432)")
        return self.pool.acquire()


async def test_a_failure_met_during_a_database_outage_is_recorded_once_it_returns(
    db: asyncpg.Connection, start_worker: StartWorker
) -> None:
    """The failure is written when the database is back, not when the job's lease runs out."""
    outage: list[UnreachableDatabase] = []
    attempts: list[int] = []

    async def fails_in_the_outage(context: JobContext) -> None:
        attempts.append(context.attempt)
        if context.attempt == 1:
            outage[0].down = True
            raise RuntimeError("the hypervisor went away too")

    worker = await start_worker(
        JobKinds(outage=JobKind(fails_in_the_outage, retry=FAST_RETRY)),
        WORKER_LEASE_DURATION="5m",
    )
    runtime = worker.runtime
    outage.append(UnreachableDatabase(runtime._db))
    runtime._db = outage[0]
    job = await queue.enqueue(db, "outage")
    await until(lambda: _true(bool(attempts)), "the first attempt ran")
    await asyncio.sleep(3)  # the outage
    outage[0].down = False
    await until(
        lambda: db.fetchval("SELECT state = 'succeeded' FROM jobs WHERE id = $1", job.id),
        "the job retried and succeeded within seconds of the database's return",
        seconds=20,
    )
    assert attempts == [1, 2]
    stored = await queue.get_job(db, job.id)
    assert stored is not None
    assert [entry["error"] for entry in stored.errors] == [
        "RuntimeError: the hypervisor went away too"
    ]


async def _true(value: bool) -> bool:
    return value


class PeriodicTasks:
    """A plugin registering the given periodic tasks."""

    def __init__(self, **tasks: PeriodicTask) -> None:
        self.tasks = tasks

    @hookimpl
    def deskpool_register_periodic_tasks(self, registry: Registry[Any]) -> None:
        for name, task in self.tasks.items():
            registry.add(name, task)


async def long_statement(runtime: Any) -> str:
    """The statement timeout of a statement longer than a request's bound (1 s), which it ran."""
    async with runtime.db.acquire() as connection:
        bound = str(await connection.fetchval("SHOW statement_timeout"))
        await connection.execute("SELECT pg_sleep(1.8)")
    return bound


async def test_jobs_and_periodic_tasks_have_the_worker_s_statement_bound(
    db: asyncpg.Connection, start_worker: StartWorker
) -> None:
    """A job's statement may run ``WORKER_STATEMENT_TIMEOUT``, not the requests' 1 s.

    Before, the job's 1.8 s statement was cancelled at 1 s (``QueryCanceledError``) at every
    attempt. The connection is given back to the pool with the requests' bound.
    """
    bounds: dict[str, str] = {}

    async def job(context: JobContext) -> None:
        bounds["job"] = await long_statement(context.runtime)

    async def task(context: PeriodicContext) -> None:
        bounds["periodic"] = await long_statement(context.runtime)

    job_record = await queue.enqueue(db, "long")
    worker = await start_worker(
        JobKinds(long=JobKind(job, retry=FAST_RETRY)),
        PeriodicTasks(long_periodic=PeriodicTask(task, every=3600)),
        DATABASE_STATEMENT_TIMEOUT="1s",
        WORKER_STATEMENT_TIMEOUT="20s",
    )
    await until(
        lambda: db.fetchval("SELECT state = 'succeeded' FROM jobs WHERE id = $1", job_record.id),
        "the job's long statement succeeded",
    )
    stored = await queue.get_job(db, job_record.id)
    assert stored is not None
    assert stored.errors == []
    await until(
        lambda: db.fetchval(
            "SELECT last_outcome = 'succeeded' FROM periodic_tasks WHERE name = 'long_periodic'"
        ),
        "the periodic task's long statement succeeded",
    )
    assert bounds == {"job": "20s", "periodic": "20s"}
    async with worker.runtime.db.acquire() as connection:
        assert await connection.fetchval("SHOW statement_timeout") == "1s"
