"""Job-queue benchmark: deskpool's worker next to pgqueuer and procrastinate, at equal settings.

Every run gets a fresh database on the same PostgreSQL server. One run of one system:

1. creates the system's schema and enqueues ``--jobs`` jobs with the system's own bulk
   enqueue (timed: the enqueue rate), then ``ANALYZE`` (as autovacuum would);
2. starts the worker processes and waits until each is connected and ready;
3. says "go" and times until no job is left queued or running: the **drain rate** (claim,
   run and completion of every job);
4. then, workers idle, enqueues ``--latency-jobs`` jobs one at a time at ``--rate`` jobs per
   second, each carrying the wall-clock time it was enqueued; each job notes when it started.
   The **enqueue-to-start latency** (p50, p99) is measured on these, at a rate every system
   keeps up with, not on the backlog of step 3 (there it would only be the drain time);
5. counts the jobs the system records as succeeded and the runs of job bodies the workers
   report: the benchmark **fails** when any job did not succeed, and reports duplicates.

**Equal settings.** Each system gets the same claim batch, the same number of database
connections per worker process and the same durability; what a peer cannot be given is
printed side by side with deskpool's (``settings`` table). With ``--batch B --connections K``:

- deskpool: ``WORKER_CONCURRENCY=B`` (it claims up to B jobs in one statement and runs at most
  B), ``DATABASE_MAX_CONNS=K`` plus its one LISTEN connection;
- pgqueuer: ``batch_size=B``, ``max_concurrent_tasks=2B`` (the smallest it accepts with a batch
  of B), an ``AsyncpgPoolDriver`` over a pool of K+1 connections (its LISTEN holds one);
- procrastinate: ``concurrency=B`` (its default is 1), a pool of K connections
  (``min_size=max_size=K``) plus its LISTEN connection; it claims one job per statement and has
  no batch setting.

All tables are logged (pgqueuer installed with ``durability=durable``), ``synchronous_commit``
is the server's (printed), and no system changes it.

**Series.** ``noop``: jobs that do nothing (deskpool, pgqueuer, procrastinate). ``hard``
(deskpool and pgqueuer by default, ``--hard-systems``): each job inserts one row on the
system's own pool, the first job in every 500 enqueued also sleeps 1.5 leases, and the lease
is short (``--lease``, 1 s): deskpool heartbeats its held leases every third of it, pgqueuer
beats each running job every half (``heartbeat_timeout`` = lease), procrastinate beats per
worker every third (``update_heartbeat_interval``, ``stalled_worker_timeout`` = lease). The
long jobs outlive their lease, so only heartbeats keep them from being run twice.

procrastinate drains a few hundred jobs per second: its backlog is ``--procrastinate-jobs``
(1,000) instead of ``--jobs`` (5,000), so its runs take about as long as the others'.

Run it from the repository root with the benchmark environment (see bench/README.md)::

    .bench-venv/bin/python bench/job_queue.py
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import asyncpg
from harness import Figure, LoadMonitor, Run, Series, percentile, print_run, rounds

SYSTEMS = ("deskpool", "pgqueuer", "procrastinate")
CHUNK = 5000
#: A drain that takes longer than this is a failure.
DRAIN_LIMIT = 300
#: In the hard series, every LONG_EVERY-th job sleeps LONG_LEASES leases.
LONG_EVERY = 500
LONG_LEASES = 1.5
#: Target of issue 17: deskpool's drain rate over pgqueuer's at equal settings.
RATIO_TARGET = 1.5
#: Marks the benchmark's databases (the load monitor counts their backends as ours).
DB_PREFIX = "dpbench_queue"

#: Whether any job is left to run, per system (cheap: the watcher must not load the server).
REMAINING = {
    "deskpool": "SELECT EXISTS (SELECT 1 FROM jobs WHERE state IN ('queued', 'running'))",
    "pgqueuer": "SELECT EXISTS (SELECT 1 FROM pgqueuer)",
    "procrastinate": (
        "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status IN ('todo', 'doing'))"
    ),
}
#: Jobs each system records as succeeded.
SUCCEEDED = {
    "deskpool": "SELECT count(*) FROM jobs WHERE state = 'succeeded'",
    "pgqueuer": "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
    "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
}
WRITES_TABLE = "CREATE TABLE bench_writes (job bigserial PRIMARY KEY, at timestamptz NOT NULL)"
WRITE = "INSERT INTO bench_writes (at) VALUES (clock_timestamp())"


@dataclass(frozen=True)
class Settings:
    """What every system of a series is given."""

    batch: int
    connections: int
    lease: float
    write: bool

    def argv(self) -> list[str]:
        """As worker arguments."""
        return [
            f"--batch={self.batch}",
            f"--connections={self.connections}",
            f"--lease={self.lease}",
            f"--write={int(self.write)}",
        ]


# ----------------------------------------------------------------------------- worker side


class Recorder:
    """What one worker process saw: when each timed job started, how many bodies ran."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.bodies = 0

    async def body(
        self, sent: float, sleep: float, write: Callable[[], Awaitable[Any]] | None
    ) -> None:
        """One job: note its start, then write a row and sleep as the payload says."""
        if sent:
            self.latencies.append(time.time() - sent)
        self.bodies += 1
        if write is not None:
            await write()
        if sleep:
            await asyncio.sleep(sleep)

    def report(self) -> None:
        """Tell the orchestrator (one JSON line)."""
        say(json.dumps({"latencies": self.latencies, "bodies": self.bodies}))


async def read_command() -> str:
    """The next line the orchestrator writes on our stdin."""
    line: str = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    return line.strip()


def say(text: str) -> None:
    """Tell the orchestrator something (one line on stdout)."""
    print(text, flush=True)


async def deskpool_worker(dsn: str, kv_addr: str, settings: Settings) -> None:
    """The real worker component, with the benchmark's job kind."""
    from deskpool.host import bootstrap
    from deskpool.jobs import JobContext
    from deskpool.plugins import hookimpl
    from deskpool.registry import Registry
    from deskpool.runtime import Runtime
    from deskpool_worker import WorkerComponent

    recorder = Recorder()

    async def bench(context: JobContext) -> None:
        async def write() -> None:
            async with context.runtime.db.acquire() as connection:
                await connection.execute(WRITE)

        payload = context.payload
        await recorder.body(
            payload.get("t", 0.0), payload.get("sleep", 0.0), write if settings.write else None
        )

    class BenchKind:
        @hookimpl
        def deskpool_register_job_kinds(self, registry: Registry[Any]) -> None:
            registry.add("bench", bench)

    environ = {
        "DATABASE_URL": dsn,
        "KVSTORE_ADDR": kv_addr,
        "KVSTORE_KEY_PREFIX": f"deskpool-bench-{os.getpid()}:",
        "METRICS_ADDR": "",
        "LOG_LEVEL": "warn",
        "DATABASE_MAX_CONNS": str(settings.connections),
        "WORKER_CONCURRENCY": str(settings.batch),
        "WORKER_POLL_INTERVAL": "1m",
        "WORKER_LEASE_DURATION": f"{int(settings.lease * 1000)}ms",
    }
    process = bootstrap(environ, ["worker"], log_setup=False)
    process.plugins.pm.register(BenchKind())
    runtime = Runtime(process.config, process.plugins)
    await runtime.open()
    worker = WorkerComponent(runtime)
    say("ready")
    await read_command()
    await worker.start()
    await read_command()
    await worker.stop()
    await runtime.close()
    recorder.report()


async def pgqueuer_worker(dsn: str, kv_addr: str, settings: Settings) -> None:
    """A pgqueuer QueueManager on a pool of K+1 connections, batch B."""
    from datetime import timedelta

    from pgqueuer import AsyncpgPoolDriver, Queries, QueueManager

    recorder = Recorder()
    pool = await asyncpg.create_pool(
        dsn, min_size=settings.connections + 1, max_size=settings.connections + 1
    )
    manager = QueueManager(Queries(AsyncpgPoolDriver(pool)))

    async def write() -> None:
        await pool.execute(WRITE)

    async def bench(job: Any) -> None:
        payload = json.loads(job.payload) if job.payload else {}
        await recorder.body(
            payload.get("t", 0.0), payload.get("sleep", 0.0), write if settings.write else None
        )

    manager.entrypoint("bench")(bench)

    say("ready")
    await read_command()
    running = asyncio.create_task(
        manager.run(
            batch_size=settings.batch,
            max_concurrent_tasks=2 * settings.batch,
            heartbeat_timeout=timedelta(seconds=settings.lease),
        )
    )
    await read_command()
    manager.shutdown.set()
    await running
    await pool.close()
    recorder.report()


async def procrastinate_worker(dsn: str, kv_addr: str, settings: Settings) -> None:
    """A procrastinate worker with concurrency B on a pool of K connections."""
    import procrastinate

    recorder = Recorder()
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=dsn, min_size=settings.connections, max_size=settings.connections
        )
    )

    async def write() -> None:
        await app.connector.execute_query_async(WRITE)

    async def bench(t: float = 0.0, sleep: float = 0.0) -> None:
        await recorder.body(t, sleep, write if settings.write else None)

    app.task(name="bench")(bench)

    async with app.open_async():
        say("ready")
        await read_command()
        running = asyncio.create_task(
            app.run_worker_async(
                concurrency=settings.batch,
                install_signal_handlers=False,
                update_heartbeat_interval=settings.lease / 3,
                stalled_worker_timeout=settings.lease,
            )
        )
        await read_command()
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    recorder.report()


WORKERS: dict[str, Callable[[str, str, Settings], Coroutine[Any, Any, None]]] = {
    "deskpool": deskpool_worker,
    "pgqueuer": pgqueuer_worker,
    "procrastinate": procrastinate_worker,
}


# ----------------------------------------------------------------------------- enqueueing


def payloads(jobs: int, settings: Settings) -> list[dict[str, float]]:
    """The backlog's payloads: empty, and in the hard case one long job per LONG_EVERY.

    The long jobs come first (every system claims in enqueue order), so they sleep while the
    others run instead of deciding when the drain ends.
    """
    long = jobs // LONG_EVERY if settings.write else 0
    return [{"sleep": LONG_LEASES * settings.lease}] * long + [{}] * (jobs - long)


class Producer:
    """A system's schema, bulk enqueue, and single enqueue (for the latency phase)."""

    def __init__(self, system: str, dsn: str) -> None:
        self.system = system
        self.dsn = dsn
        self.connection: asyncpg.Connection | None = None
        self._app: Any = None
        self._task: Any = None
        self._queries: Any = None

    async def open(self) -> None:
        """Connect and install the system's schema (and the benchmark's table)."""
        self.connection = await asyncpg.connect(self.dsn)
        await self.connection.execute(WRITES_TABLE)
        if self.system == "deskpool":
            from deskpool.db import migrate

            await migrate(self.connection)
        elif self.system == "pgqueuer":
            from pgqueuer import AsyncpgDriver, Queries

            self._queries = Queries(AsyncpgDriver(self.connection))
            durability = self._queries.qbe.settings.durability.value
            if durability != "durable":
                raise SystemExit(f"pgqueuer would install with durability {durability}")
            await self._queries.install()
        else:
            import procrastinate

            self._app = procrastinate.App(
                connector=procrastinate.PsycopgConnector(conninfo=self.dsn, min_size=1, max_size=1)
            )

            async def bench(t: float = 0.0, sleep: float = 0.0) -> None:
                return None

            self._task = self._app.task(name="bench")(bench)
            await self._app.open_async()
            await self._app.schema_manager.apply_schema_async()

    async def close(self) -> None:
        """Disconnect."""
        if self._app is not None:
            await self._app.close_async()
        if self.connection is not None:
            await self.connection.close()

    async def enqueue_many(self, items: list[dict[str, float]]) -> None:
        """Enqueue with the system's bulk enqueue, CHUNK jobs per call."""
        assert self.connection is not None
        for first in range(0, len(items), CHUNK):
            chunk = items[first : first + CHUNK]
            if self.system == "deskpool":
                from deskpool.jobs.queue import enqueue_many

                await enqueue_many(self.connection, "bench", chunk)
            elif self.system == "pgqueuer":
                await self._queries.enqueue(
                    ["bench"] * len(chunk),
                    [json.dumps(item).encode() if item else None for item in chunk],
                    [0] * len(chunk),
                )
            else:
                await self._task.batch_defer_async(*chunk)

    async def enqueue_one(self, payload: dict[str, float]) -> None:
        """Enqueue one job with the system's single enqueue."""
        assert self.connection is not None
        if self.system == "deskpool":
            from deskpool.jobs.queue import enqueue

            await enqueue(self.connection, "bench", payload)
        elif self.system == "pgqueuer":
            await self._queries.enqueue("bench", json.dumps(payload).encode(), 0)
        else:
            await self._task.defer_async(**payload)


# ----------------------------------------------------------------------------- orchestrator


async def start_workers(
    system: str, dsn: str, kv_addr: str, count: int, settings: Settings
) -> list[asyncio.subprocess.Process]:
    """Start ``count`` worker processes and wait until each says it is ready."""
    processes = []
    for _ in range(count):
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "worker",
            f"--system={system}",
            f"--dsn={dsn}",
            f"--kv={kv_addr}",
            *settings.argv(),
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


async def drain(
    watcher: asyncpg.Connection, system: str, workers: list[asyncio.subprocess.Process]
) -> float:
    """Wait until no job is left to run; return the seconds it took."""
    started = time.perf_counter()
    while await watcher.fetchval(REMAINING[system]):
        if any(worker.returncode is not None for worker in workers):
            raise RuntimeError(f"a {system} worker exited before the queue drained")
        if time.perf_counter() - started > DRAIN_LIMIT:
            raise RuntimeError(f"{system} did not drain within {DRAIN_LIMIT}s")
        await asyncio.sleep(0.01)
    return time.perf_counter() - started


async def stop_workers(workers: list[asyncio.subprocess.Process]) -> tuple[list[float], int]:
    """Stop the workers; return the latencies they noted and the job bodies they ran."""
    await tell(workers, "stop")
    latencies: list[float] = []
    bodies = 0
    for worker in workers:
        assert worker.stdout is not None
        try:
            line = await asyncio.wait_for(worker.stdout.readline(), 60)
            report = json.loads(line)
            latencies += report["latencies"]
            bodies += report["bodies"]
            await asyncio.wait_for(worker.wait(), 30)
        except (TimeoutError, ValueError):
            worker.kill()
            await worker.wait()
            raise RuntimeError("a worker did not report when stopped") from None
    return latencies, bodies


@dataclass(frozen=True)
class Plan:
    """What one run does."""

    jobs: dict[str, int]
    latency_jobs: int
    rate: float
    processes: int
    settings: Settings
    admin_url: str
    kv_addr: str


async def measure(system: str, number: int, plan: Plan) -> Run:
    """One run of one system on a database of its own."""
    from deskpool.testing.services import create_test_database, drop_test_database

    dsn = await create_test_database(plan.admin_url, prefix=f"{DB_PREFIX}_{system}")
    producer = Producer(system, dsn)
    try:
        await producer.open()
        started = time.perf_counter()
        jobs = plan.jobs[system]
        await producer.enqueue_many(payloads(jobs, plan.settings))
        enqueue_seconds = time.perf_counter() - started
        assert producer.connection is not None
        watcher = producer.connection
        await watcher.execute("ANALYZE")
        workers = await start_workers(system, dsn, plan.kv_addr, plan.processes, plan.settings)
        monitor = LoadMonitor(markers=[dsn.rsplit("/", 1)[-1]])
        try:
            monitor.start()
            await tell(workers, "go")
            drain_seconds = await drain(watcher, system, workers)
            first = time.perf_counter()
            for index in range(plan.latency_jobs):
                await asyncio.sleep(max(0.0, first + index / plan.rate - time.perf_counter()))
                await producer.enqueue_one({"t": time.time()})
            await drain(watcher, system, workers)
            load = monitor.stop()
        finally:
            latencies, bodies = await stop_workers(workers)
        expected = jobs + plan.latency_jobs
        succeeded = int(await watcher.fetchval(SUCCEEDED[system]))
        written = int(await watcher.fetchval("SELECT count(*) FROM bench_writes"))
        if succeeded != expected:
            raise SystemExit(
                f"FAILED: {system} recorded {succeeded} of {expected} jobs as succeeded"
            )
        if plan.settings.write and written < expected:
            raise SystemExit(f"FAILED: {system} jobs wrote {written} of {expected} rows")
        if len(latencies) < plan.latency_jobs:
            raise SystemExit(f"FAILED: {system} started {len(latencies)} of {plan.latency_jobs}")
        return Run(
            system,
            number,
            {
                "enqueue": jobs / enqueue_seconds,
                "drain": jobs / drain_seconds,
                "p50": 1000 * percentile(latencies, 0.50),
                "p99": 1000 * percentile(latencies, 0.99),
                "succeeded": succeeded,
                "duplicates": bodies - expected,
            },
            load,
        )
    finally:
        await producer.close()
        await drop_test_database(plan.admin_url, dsn)


FIGURES = (
    Figure("drain", "drained jobs/s", ratio=True),
    Figure("enqueue", "bulk enqueue jobs/s"),
    Figure("p50", "enqueue-to-start p50, ms", 1),
    Figure("p99", "enqueue-to-start p99, ms", 1),
    Figure("succeeded", "jobs succeeded (checked)"),
    Figure("duplicates", "job bodies run twice"),
)


def settings_table(settings: Settings, processes: int, sync_commit: str) -> str:
    """What each system was given, side by side."""
    b, k, lease = settings.batch, settings.connections, settings.lease
    rows = [
        (
            "claim batch",
            f"{b} (`WORKER_CONCURRENCY`)",
            f"{b} (`batch_size`)",
            "1 per statement (no batch setting)",
        ),
        (
            "jobs in flight per process",
            f"at most {b}",
            f"at most {2 * b} (`max_concurrent_tasks`, its minimum for this batch)",
            f"{b} (`concurrency`)",
        ),
        (
            "DB connections per process",
            f"{k} pool + 1 LISTEN",
            f"{k + 1} pool (`AsyncpgPoolDriver`, LISTEN holds 1)",
            f"{k} pool + 1 LISTEN",
        ),
        (
            "lease / heartbeat",
            f"lease {lease:g} s, heartbeat every {lease / 3:.2f} s",
            f"`heartbeat_timeout` {lease:g} s, beat per job every {lease / 2:.2f} s",
            f"worker heartbeat every {lease / 3:.2f} s, stalled after {lease:g} s",
        ),
        (
            "durability",
            f"logged tables, synchronous_commit={sync_commit}",
            f"`durable` (logged), synchronous_commit={sync_commit}",
            f"logged tables, synchronous_commit={sync_commit}",
        ),
        ("worker processes", str(processes), str(processes), str(processes)),
    ]
    lines = ["| setting | deskpool | pgqueuer | procrastinate |", "|---|---|---|---|"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    return "\n".join(lines)


async def orchestrate(args: argparse.Namespace) -> None:
    """Run every series, its systems alternated round after round, and print the tables."""
    versions = versions_of()
    admin = await asyncpg.connect(args.database_url)
    try:
        sync_commit = str(await admin.fetchval("SHOW synchronous_commit"))
    finally:
        await admin.close()
    base = Settings(batch=args.batch, connections=args.connections, lease=300.0, write=False)
    series_settings = {
        "noop": base,
        "hard": replace(base, lease=args.lease, write=True),
    }
    titles = {
        "noop": "no-op jobs",
        "hard": f"hard case: one row written per job, lease {args.lease:g} s, "
        f"1 in {LONG_EVERY} jobs sleeps {LONG_LEASES:g} leases",
    }
    print(f"versions: {versions}; synchronous_commit={sync_commit}", flush=True)
    jobs = {system: args.jobs for system in SYSTEMS}
    jobs["procrastinate"] = args.procrastinate_jobs
    outputs = []
    for processes in args.processes:
        for name in args.series:
            settings = series_settings[name]
            systems = args.systems if name == "noop" else args.hard_systems
            counts = ", ".join(f"{system} {jobs[system]:,}" for system in systems)
            plan = Plan(
                jobs=jobs,
                latency_jobs=args.latency_jobs,
                rate=args.rate,
                processes=processes,
                settings=settings,
                admin_url=args.database_url,
                kv_addr=args.kv,
            )
            series = Series(
                f"Job queue, {titles[name]}, {processes} worker process(es), backlog of "
                f"{counts} jobs, latency at {args.rate:g} jobs/s",
                systems,
                FIGURES,
                keep_starved=args.keep_starved,
            )
            for number, system in rounds(args.runs, systems):
                run = await measure(system, number, plan)
                print_run(series, run, lambda line: print(line, file=sys.stderr, flush=True))
            ratios = series.ratios("pgqueuer", "drain") if "pgqueuer" in systems else []
            target = (
                f"\n\nTarget of issue 17 (deskpool at least {RATIO_TARGET:g}x pgqueuer at equal "
                f"settings): median ratio {statistics.median(ratios):.2f}x over {len(ratios)} "
                f"pairs: {'meets' if statistics.median(ratios) >= RATIO_TARGET else 'MISSES'} it."
                if ratios
                else ""
            )
            outputs.append(
                series.table()
                + target
                + "\n\nSettings:\n\n"
                + settings_table(settings, processes, sync_commit)
            )
    print()
    print("\n\n".join(outputs))


def versions_of() -> str:
    """The peers' versions, as installed."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in SYSTEMS[1:]:
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            found.append(f"{name} not installed")
    return ", ".join(found)


def main() -> None:
    """Run the benchmark, or one worker process of it."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="role")
    worker = sub.add_parser("worker", help="(internal) one worker process")
    worker.add_argument("--system", choices=SYSTEMS, required=True)
    worker.add_argument("--dsn", required=True)
    worker.add_argument("--kv", required=True)
    worker.add_argument("--batch", type=int, required=True)
    worker.add_argument("--connections", type=int, required=True)
    worker.add_argument("--lease", type=float, required=True)
    worker.add_argument("--write", type=int, required=True)
    parser.add_argument("--runs", type=int, default=5, help="rounds (each system once per round)")
    parser.add_argument("--jobs", type=int, default=5000, help="backlog drained per run")
    parser.add_argument("--latency-jobs", type=int, default=300, help="jobs timed one by one")
    parser.add_argument("--rate", type=float, default=100.0, help="jobs/s of the latency phase")
    parser.add_argument("--batch", type=int, default=32, help="claim batch of every system")
    parser.add_argument("--connections", type=int, default=10, help="pool size per process")
    parser.add_argument("--lease", type=float, default=1.0, help="seconds, hard series")
    parser.add_argument("--processes", type=int, nargs="+", default=[1])
    parser.add_argument("--series", nargs="+", choices=("noop", "hard"), default=["noop", "hard"])
    parser.add_argument(
        "--procrastinate-jobs",
        type=int,
        default=1000,
        help="procrastinate's backlog (it drains at a few hundred jobs/s)",
    )
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument(
        "--hard-systems",
        nargs="+",
        choices=SYSTEMS,
        default=["deskpool", "pgqueuer"],
        help="systems of the hard series",
    )
    parser.add_argument(
        "--keep-starved",
        action="store_true",
        help="print starved runs' figures too, flagged (for developing the script only)",
    )
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
        settings = Settings(args.batch, args.connections, args.lease, bool(args.write))
        asyncio.run(WORKERS[args.system](args.dsn, args.kv, settings))
    else:
        if args.systems[0] != "deskpool" or args.hard_systems[0] != "deskpool":
            parser.error("deskpool comes first in --systems (it is every ratio's numerator)")
        os.chdir(Path(__file__).resolve().parent.parent)
        asyncio.run(orchestrate(args))


if __name__ == "__main__":
    main()
