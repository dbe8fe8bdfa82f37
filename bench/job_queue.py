"""Job-queue benchmark: no-op jobs per second, deskpool's worker next to two peer queues.

Each system gets a fresh database on the same PostgreSQL server in the same run. For each
system and each number of worker processes (1 and 2 by default) the benchmark

1. creates the system's schema and enqueues N no-op jobs with the system's own bulk enqueue
   (timed: the enqueue rate);
2. starts the worker processes and waits until every one is connected and ready;
3. says "go" to all of them and times until no job is left queued or running (the drain
   rate: claim, run and completion of every job);
4. stops the workers and drops the database.

The figure is the ratio of deskpool's drain rate to each peer's. deskpool keeps its fencing
tokens and heartbeats: its worker is the real ``worker`` component (``deskpool_worker``) with a
no-op job kind registered. The peers run with their documented defaults: pgqueuer with its
default batch of 10, procrastinate with concurrency 30.

Run it from the repository root with the benchmark environment (see bench/README.md)::

    .bench-venv/bin/python bench/job_queue.py --jobs 20000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

SYSTEMS = ("deskpool", "pgqueuer", "procrastinate")
CHUNK = 5000
#: A run that takes longer than this is reported as a failure.
DRAIN_LIMIT = 300

#: Settings of each system's workers (printed with the results); deskpool's can be changed
#: with --deskpool-concurrency (it claims at most as many jobs at once as it has free slots).
DESKPOOL_CONCURRENCY = 32
PGQUEUER_BATCH = 10
PROCRASTINATE_CONCURRENCY = 30

#: Whether any job is left to run, per system (cheap: the watcher must not load the server).
REMAINING = {
    "deskpool": "SELECT EXISTS (SELECT 1 FROM jobs WHERE state IN ('queued', 'running'))",
    "pgqueuer": "SELECT EXISTS (SELECT 1 FROM pgqueuer)",
    "procrastinate": (
        "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status IN ('todo', 'doing'))"
    ),
}


# ----------------------------------------------------------------------------- worker side


async def read_command() -> str:
    """The next line the orchestrator writes on our stdin."""
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    return line.strip()


def say(text: str) -> None:
    """Tell the orchestrator something (one line on stdout)."""
    print(text, flush=True)


async def deskpool_worker(dsn: str, kv_addr: str, concurrency: int) -> None:
    """The real worker component, with a no-op job kind."""
    from deskpool.host import bootstrap
    from deskpool.jobs import JobContext
    from deskpool.plugins import hookimpl
    from deskpool.registry import Registry
    from deskpool.runtime import Runtime
    from deskpool_worker import WorkerComponent

    async def noop(context: JobContext) -> None:
        return None

    class NoopKind:
        @hookimpl
        def deskpool_register_job_kinds(self, registry: Registry[Any]) -> None:
            registry.add("noop", noop)

    environ = {
        "DATABASE_URL": dsn,
        "KVSTORE_ADDR": kv_addr,
        "KVSTORE_KEY_PREFIX": f"deskpool-bench-{os.getpid()}:",
        "METRICS_ADDR": "",
        "LOG_LEVEL": "warn",
        "DATABASE_MAX_CONNS": "10",
        "WORKER_CONCURRENCY": str(concurrency),
        "WORKER_POLL_INTERVAL": "1m",
        "WORKER_LEASE_DURATION": "5m",
    }
    process = bootstrap(environ, ["worker"], log_setup=False)
    process.plugins.pm.register(NoopKind())
    runtime = Runtime(process.config, process.plugins)
    await runtime.open()
    worker = WorkerComponent(runtime)
    say("ready")
    await read_command()
    await worker.start()
    await read_command()
    await worker.stop()
    await runtime.close()


async def pgqueuer_worker(dsn: str, kv_addr: str, concurrency: int) -> None:
    """A pgqueuer QueueManager with a no-op entrypoint, default batch size."""
    from pgqueuer import AsyncpgDriver, Queries, QueueManager

    connection = await asyncpg.connect(dsn)
    manager = QueueManager(Queries(AsyncpgDriver(connection)))

    @manager.entrypoint("noop")
    async def noop(job: Any) -> None:
        return None

    say("ready")
    await read_command()
    running = asyncio.create_task(manager.run(batch_size=PGQUEUER_BATCH))
    await read_command()
    manager.shutdown.set()
    await running


async def procrastinate_worker(dsn: str, kv_addr: str, concurrency: int) -> None:
    """A procrastinate worker with a no-op task, concurrency 30."""
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="noop")
    async def noop() -> None:
        return None

    async with app.open_async():
        say("ready")
        await read_command()
        running = asyncio.create_task(
            app.run_worker_async(
                concurrency=PROCRASTINATE_CONCURRENCY, install_signal_handlers=False
            )
        )
        await read_command()
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running


WORKERS: dict[str, Callable[[str, str, int], Awaitable[None]]] = {
    "deskpool": deskpool_worker,
    "pgqueuer": pgqueuer_worker,
    "procrastinate": procrastinate_worker,
}


# ----------------------------------------------------------------------------- set-up


async def deskpool_setup(dsn: str, jobs: int) -> float:
    """Migrate, then enqueue; return the seconds enqueueing took."""
    from deskpool.db import migrate
    from deskpool.jobs.queue import enqueue_many

    connection = await asyncpg.connect(dsn)
    try:
        await migrate(connection)
        started = time.perf_counter()
        for first in range(0, jobs, CHUNK):
            count = min(CHUNK, jobs - first)
            await enqueue_many(connection, "noop", [{}] * count)
        return time.perf_counter() - started
    finally:
        await connection.close()


async def pgqueuer_setup(dsn: str, jobs: int) -> float:
    """Install pgqueuer's schema, then enqueue."""
    from pgqueuer import AsyncpgDriver, Queries

    connection = await asyncpg.connect(dsn)
    try:
        queries = Queries(AsyncpgDriver(connection))
        await queries.install()
        started = time.perf_counter()
        for first in range(0, jobs, CHUNK):
            count = min(CHUNK, jobs - first)
            await queries.enqueue(["noop"] * count, [None] * count, [0] * count)
        return time.perf_counter() - started
    finally:
        await connection.close()


async def procrastinate_setup(dsn: str, jobs: int) -> float:
    """Apply procrastinate's schema, then defer."""
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="noop")
    async def noop() -> None:
        return None

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        started = time.perf_counter()
        for first in range(0, jobs, CHUNK):
            count = min(CHUNK, jobs - first)
            await noop.batch_defer_async(*([{}] * count))
        return time.perf_counter() - started


SETUPS: dict[str, Callable[[str, int], Awaitable[float]]] = {
    "deskpool": deskpool_setup,
    "pgqueuer": pgqueuer_setup,
    "procrastinate": procrastinate_setup,
}


# ----------------------------------------------------------------------------- orchestrator


@dataclass(frozen=True)
class Measurement:
    """One system with one number of worker processes."""

    system: str
    processes: int
    jobs: int
    enqueue_seconds: float
    drain_seconds: float

    @property
    def drain_rate(self) -> float:
        """Jobs claimed, run and completed per second."""
        return self.jobs / self.drain_seconds

    @property
    def end_to_end_rate(self) -> float:
        """Jobs per second from the first enqueue to the last completion (start-up excluded)."""
        return self.jobs / (self.enqueue_seconds + self.drain_seconds)


async def start_workers(
    system: str, dsn: str, kv_addr: str, count: int, concurrency: int
) -> list[asyncio.subprocess.Process]:
    """Start ``count`` worker processes and wait until each says it is ready."""
    processes = []
    for _ in range(count):
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "worker",
            "--system",
            system,
            "--dsn",
            dsn,
            "--kv",
            kv_addr,
            "--deskpool-concurrency",
            str(concurrency),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        processes.append(process)
    for process in processes:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        if line.strip() != b"ready":
            raise RuntimeError(f"a {system} worker did not start: {line!r}")
    return processes


async def tell(processes: list[asyncio.subprocess.Process], command: str) -> None:
    """Write one command line to every worker."""
    for process in processes:
        assert process.stdin is not None
        process.stdin.write(f"{command}\n".encode())
        await process.stdin.drain()


async def measure(
    system: str, processes: int, jobs: int, admin_url: str, kv_addr: str, concurrency: int
) -> Measurement:
    """Run one measurement on a database of its own."""
    from deskpool.testing.services import create_test_database, drop_test_database

    dsn = await create_test_database(admin_url, prefix=f"bench_{system}")
    try:
        enqueue_seconds = await SETUPS[system](dsn, jobs)
        watcher = await asyncpg.connect(dsn)
        # Every system starts from fresh planner statistics, as autovacuum would give it.
        await watcher.execute("ANALYZE")
        workers = await start_workers(system, dsn, kv_addr, processes, concurrency)
        try:
            await tell(workers, "go")
            started = time.perf_counter()
            while await watcher.fetchval(REMAINING[system]):
                if any(worker.returncode is not None for worker in workers):
                    raise RuntimeError(f"a {system} worker exited before the queue drained")
                if time.perf_counter() - started > DRAIN_LIMIT:
                    raise RuntimeError(f"{system} did not drain within {DRAIN_LIMIT}s")
                await asyncio.sleep(0.01)
            drain_seconds = time.perf_counter() - started
        finally:
            await watcher.close()
            await tell(workers, "stop")
            for worker in workers:
                try:
                    await asyncio.wait_for(worker.wait(), 60)
                except TimeoutError:
                    worker.kill()
                    await worker.wait()
        return Measurement(system, processes, jobs, enqueue_seconds, drain_seconds)
    finally:
        await drop_test_database(admin_url, dsn)


def report(measurements: list[Measurement], deskpool_concurrency: int) -> str:
    """The results table, with each deskpool drain rate's ratio to the peers'."""
    lines = [
        f"{'system':<14} {'procs':>5} {'jobs':>7} {'enqueue/s':>10} {'drain/s':>9} "
        f"{'end-to-end/s':>12}",
    ]
    for m in measurements:
        lines.append(
            f"{m.system:<14} {m.processes:>5} {m.jobs:>7} {m.jobs / m.enqueue_seconds:>10.0f} "
            f"{m.drain_rate:>9.0f} {m.end_to_end_rate:>12.0f}"
        )
    lines.append("")
    by_key = {(m.system, m.processes): m for m in measurements}
    for (system, processes), m in sorted(by_key.items()):
        if system != "deskpool":
            continue
        for peer in SYSTEMS[1:]:
            other = by_key.get((peer, processes))
            if other is not None:
                lines.append(
                    f"deskpool / {peer} with {processes} worker process(es): "
                    f"{m.drain_rate / other.drain_rate:.2f}x drain rate"
                )
    lines.append("")
    lines.append(
        f"settings: deskpool WORKER_CONCURRENCY={deskpool_concurrency} (fencing tokens and "
        f"heartbeats on), pgqueuer batch_size={PGQUEUER_BATCH}, procrastinate "
        f"concurrency={PROCRASTINATE_CONCURRENCY}"
    )
    return "\n".join(lines)


async def orchestrate(args: argparse.Namespace) -> None:
    """Measure every system with every process count, then print the table."""
    measurements = []
    for processes in args.processes:
        for system in args.systems:
            m = await measure(
                system, processes, args.jobs, args.database_url, args.kv, args.deskpool_concurrency
            )
            print(
                f"{system} with {processes} process(es): {m.drain_rate:.0f} jobs/s drained",
                file=sys.stderr,
                flush=True,
            )
            measurements.append(m)
    print(report(measurements, args.deskpool_concurrency))


def main() -> None:
    """Run the benchmark, or one worker process of it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="role")
    worker = sub.add_parser("worker", help="(internal) one worker process")
    worker.add_argument("--system", choices=SYSTEMS, required=True)
    worker.add_argument("--dsn", required=True)
    worker.add_argument("--kv", required=True)
    worker.add_argument("--deskpool-concurrency", type=int, required=True)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--deskpool-concurrency", type=int, default=DESKPOOL_CONCURRENCY)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument(
        "--database-url",
        default=os.environ.get(
            "DESKPOOL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
        help="a server where the benchmark may create and drop databases",
    )
    parser.add_argument(
        "--kv", default=os.environ.get("DESKPOOL_TEST_KVSTORE_ADDR", "127.0.0.1:6379")
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # procrastinate warns that its App lives in a __main__ module: true, and harmless here.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    os.environ.setdefault("XDG_CACHE_HOME", tempfile.mkdtemp(prefix="deskpool-bench-xdg-"))
    if args.role == "worker":
        asyncio.run(WORKERS[args.system](args.dsn, args.kv, args.deskpool_concurrency))
    else:
        os.chdir(Path(__file__).resolve().parent.parent)
        asyncio.run(orchestrate(args))


if __name__ == "__main__":
    main()
