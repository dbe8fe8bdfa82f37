"""Worker fault tests with real ``deskpool run worker`` processes on a database of their own.

- Workers are SIGKILLed mid-job, repeatedly: every job still completes, none is lost, every
  duplicate execution is one whose lease was reclaimed, and only the current lease completes.
- A worker stalls past its lease: another one reclaims and completes the job, and the stalled
  worker's late completion is rejected.
- The database drops the worker's connections (``pg_terminate_backend`` on this test's own
  database, standing in for a PostgreSQL restart without disturbing the shared server): the
  worker reconnects, LISTENs again and carries on.
- Two workers never run the same periodic task in the same interval, nor two runs at once.

Leases are short (2 s) so the whole module runs in well under a minute.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from tests.e2e.jobrecorder import RECORDING_TABLES, recorder_site

from deskpool.jobs import queue
from deskpool.testing.processes import DeskpoolProcess, deployment_environ, until
from deskpool.testing.pytest_plugin import connected

LEASE_SECONDS = 2.0


@pytest.fixture(scope="module")
def fault_database(module_database_url: str) -> str:
    """The module's own database, with the test plugin's recording tables.

    Only this module's workers use it, so terminating its backends disturbs nobody else.
    """

    async def create_tables() -> None:
        async with connected(module_database_url) as connection:
            await connection.execute(RECORDING_TABLES)

    asyncio.run(create_tables())
    return module_database_url


@pytest.fixture
def db_url(fault_database: str) -> str:
    return fault_database


@pytest.fixture
def db_emptied() -> tuple[str, ...]:
    return ("jobs", "periodic_tasks", "job_executions", "periodic_executions")


@pytest.fixture
async def spawn_worker(
    deskpool_environ: dict[str, str],
    fault_database: str,
    plugin_site: Callable[..., Path],
) -> AsyncIterator[Callable[..., Any]]:
    """``await spawn_worker(**settings)``: a started worker process; all are killed at the end."""
    workers: list[DeskpoolProcess] = []

    async def spawn(**settings: str) -> DeskpoolProcess:
        defaults = {
            "PYTHONPATH": str(recorder_site(plugin_site)),
            "APP_ENV": "development",
            "WORKER_LEASE_DURATION": f"{LEASE_SECONDS}s",
            "WORKER_CONCURRENCY": "4",
            "WORKER_POLL_INTERVAL": "5s",
            "WORKER_SHUTDOWN_TIMEOUT": "2s",
        }
        env = deployment_environ(deskpool_environ, fault_database, **(defaults | settings))
        worker = DeskpoolProcess(["worker"], env)
        workers.append(worker)
        return await worker.start()

    yield spawn
    for worker in workers:
        worker.signal(signal.SIGKILL)
    for worker in workers:
        if worker.process is not None:
            await worker.wait()


def pid_of(worker_id: str) -> int:
    return int(worker_id.split(":")[1])


async def test_sigkilled_workers_lose_no_job_and_every_duplicate_is_a_reclaimed_lease(
    db: asyncpg.Connection, spawn_worker: Callable[..., Any]
) -> None:
    total = 60
    for n in range(total):
        # Long enough that the three kills (each waiting for a replacement to start, slow on a
        # loaded machine) happen while jobs are still running.
        await queue.enqueue(db, "record", {"n": n, "seconds": 1.5})
    workers = {}
    for worker in await asyncio.gather(*(spawn_worker() for _ in range(3))):
        workers[worker.pid] = worker
    killed: set[int] = set()

    async def busy_worker() -> int | None:
        """A live worker running a job that has started executing."""
        rows = await db.fetch(
            """
            SELECT DISTINCT jobs.worker FROM jobs
            JOIN job_executions e ON e.job_id = jobs.id AND e.fence = jobs.fence
            WHERE jobs.state = 'running'
            """
        )
        pids = [pid_of(row["worker"]) for row in rows]
        return next((pid for pid in pids if pid in workers and pid not in killed), None)

    async def replace() -> None:
        replacement = await spawn_worker()
        workers[replacement.pid] = replacement

    # A replacement starts while the next victim is sought: waiting for it first (a start takes
    # 30 s and more on a loaded machine) let the other workers finish every job in between.
    replacements = []
    for _ in range(3):
        victim = await until(busy_worker, "a worker is mid-job")
        workers[victim].signal(signal.SIGKILL)
        killed.add(victim)
        replacements.append(asyncio.create_task(replace()))
    await asyncio.gather(*replacements)

    async def all_succeeded() -> bool:
        return bool(
            await db.fetchval("SELECT count(*) = $1 FROM jobs WHERE state = 'succeeded'", total)
        )

    await until(all_succeeded, "every job succeeded")

    jobs = {row["id"]: row for row in await db.fetch("SELECT * FROM jobs")}
    assert len(jobs) == total
    executions: dict[int, list[Any]] = {}
    for row in await db.fetch("SELECT * FROM job_executions ORDER BY fence"):
        executions.setdefault(row["job_id"], []).append(row)
    assert set(executions) == set(jobs), "a job never ran"
    duplicates = 0
    for job_id, job in jobs.items():
        runs = executions[job_id]
        fences = [run["fence"] for run in runs]
        assert len(fences) == len(set(fences)), f"job {job_id}: two executions of one lease"
        # The completing execution is the job's current lease; its worker completed it.
        assert fences[-1] == job["fence"]
        assert pid_of(job["worker"]) == runs[-1]["pid"]
        # Every earlier execution lost its lease to a reclaim (recorded in the job's history).
        reclaimed_fences = {
            entry["fence"]
            for entry in json.loads(job["errors"])
            if entry["error"] == "lease expired without a heartbeat"
        }
        for run in runs[:-1]:
            assert run["fence"] in reclaimed_fences, f"job {job_id}: duplicate without reclaim"
        assert job["reclaims"] >= len(runs) - 1
        duplicates += len(runs) - 1
    assert duplicates >= 1, "no job was interrupted by the kills"
    for pid, worker in workers.items():
        if pid not in killed:
            assert "Traceback" not in worker.output


async def test_a_stalled_workers_late_completion_is_rejected(
    db: asyncpg.Connection, spawn_worker: Callable[..., Any]
) -> None:
    # The rescuer is started first and held (SIGSTOP) until the stalled worker has the job: a
    # start takes longer than the stall on a loaded machine, and the stalled worker, its stall
    # over, then took its own expired lease back before any rescuer was there.
    rescuer = await spawn_worker()
    rescuer.signal(signal.SIGSTOP)
    stalled = await spawn_worker()
    job = await queue.enqueue(
        # Stalled long enough for the rescuer to start and reclaim first, even when loaded.
        db,
        "record",
        {"stall_attempts": [1], "stall": LEASE_SECONDS * 5, "seconds": 0},
    )
    await until(
        lambda: db.fetchval("SELECT count(*) = 1 FROM job_executions WHERE job_id = $1", job.id),
        "the first attempt started",
    )
    rescuer.signal(signal.SIGCONT)
    rejected = stalled.watch(f"stale completion of job {job.id} rejected")
    await until(
        lambda: db.fetchval("SELECT state = 'succeeded' FROM jobs WHERE id = $1", job.id),
        "another worker completed the job",
    )
    await asyncio.wait_for(rejected.wait(), 30)
    row = await db.fetchrow("SELECT fence, worker, reclaims, state FROM jobs WHERE id = $1", job.id)
    assert row["state"] == "succeeded"
    assert row["fence"] == 2
    assert row["reclaims"] == 1
    assert pid_of(row["worker"]) == rescuer.pid
    attempts = await db.fetch(
        "SELECT attempt, pid FROM job_executions WHERE job_id = $1 ORDER BY fence", job.id
    )
    assert [(r["attempt"], r["pid"]) for r in attempts] == [(1, stalled.pid), (2, rescuer.pid)]


async def test_the_worker_reconnects_when_the_database_drops_its_connections(
    db: asyncpg.Connection, spawn_worker: Callable[..., Any]
) -> None:
    worker = await spawn_worker(WORKER_POLL_INTERVAL="1h")
    first = await queue.enqueue(db, "record", {"seconds": 0})
    await until(
        lambda: db.fetchval("SELECT state = 'succeeded' FROM jobs WHERE id = $1", first.id),
        "the first job ran",
    )
    reconnected = worker.watch("job notifications reconnected")
    terminated = await db.fetchval(
        """
        SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()
        """
    )
    assert terminated >= 2  # the LISTEN connection and the pool's
    await asyncio.wait_for(reconnected.wait(), 30)
    # Woken by NOTIFY on the new connection: the fallback poll would take an hour.
    second = await queue.enqueue(db, "record", {"seconds": 0})
    await until(
        lambda: db.fetchval("SELECT state = 'succeeded' FROM jobs WHERE id = $1", second.id),
        f"a job enqueued after the reconnection ran; the worker wrote:\n{worker.output}",
    )
    assert worker.process is not None
    assert worker.process.returncode is None
    worker.signal(signal.SIGTERM)
    assert await worker.wait() == 0
    assert "component worker stopped" in worker.output


async def test_two_workers_never_run_a_periodic_task_twice_in_one_interval(
    db: asyncpg.Connection, spawn_worker: Callable[..., Any]
) -> None:
    workers = await asyncio.gather(spawn_worker(), spawn_worker())
    await until(
        lambda: db.fetchval(
            "SELECT count(*) >= 4 FROM periodic_executions WHERE finished_at IS NOT NULL"
        ),
        "four periodic runs finished",
    )
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert await worker.wait() == 0
    runs = await db.fetch("SELECT * FROM periodic_executions ORDER BY started_at")
    assert {run["pid"] for run in runs} <= {worker.pid for worker in workers}
    fences = [run["fence"] for run in runs]
    assert fences == sorted(set(fences))
    for previous, run in itertools.pairwise(runs):
        # Once per interval (1 s) across both workers, and never while a run is in progress.
        assert (run["started_at"] - previous["started_at"]).total_seconds() >= 1.0
        assert previous["finished_at"] is not None
        assert run["started_at"] >= previous["finished_at"]
