"""Report benchmark: reports over 30 days of 10,000 sessions answer within a second.

A fresh database gets 20 pools, 500 users and, over the 30 days before now, 10,000 sessions
(starts spread evenly, lengths from 5 minutes to 8 hours; those running past now are still
open) each with its logon (every phase recorded, 2 to 30 s from request to first frame;
another 3 % of logons failed after the daemon's handshake). Nine months of older history
(90,000 sessions and their logons) lie before the period, so a report has to find its rows
rather than read the whole table.

Five reports are timed through the code behind their endpoints (reading the period's facts in
one snapshot, then computing every figure): :func:`deskpool.reports.service.usage_report`
(``GET /api/v1/reports/usage``) for all pools by hour (720 buckets), one pool by hour, all
pools by day, and :func:`deskpool.reports.service.logon_phases`
(``GET /api/v1/reports/logon-phases``, the pool page's phase percentiles) for all pools and for
one pool. Each report is a side of the harness (``harness.py``): every round runs each once,
in the same order; a run times ``--calls`` calls of its report and is watched by the load
monitor (runs starved by other work on the machine are refused). The table gives the minimum /
median / maximum over the accepted runs, against the target of issue 26: under 1 s. The query
plans (``EXPLAIN``) of the reads are printed once on stderr, to show the index used.

Run it from the repository root with PostgreSQL running (``make services``)::

    .venv/bin/python bench/reports.py
    .venv/bin/python bench/reports.py --runs 3 --calls 5 --sessions 10000
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import asyncpg
from harness import Figure, LoadMonitor, Run, Series, arguments, print_run, rounds

from deskpool.db import migrate
from deskpool.reports import service
from deskpool.reports import store as reports_store
from deskpool.reports.model import BucketSize
from deskpool.runtime import Runtime
from deskpool.testing.services import (
    ServiceAddresses,
    create_test_database,
    drop_test_database,
)

DB_PREFIX = "dpbench_reports"
POOLS = 20
USERS = 500
DAYS = 30
TARGET = 1.0


class _Runtime:
    """What the report service uses of a runtime: the database pool."""

    def __init__(self, db: asyncpg.Pool) -> None:
        self.db = db


def _sessions(
    rng: random.Random, count: int, start: datetime, end: datetime, pools: list[uuid.UUID]
) -> list[tuple[Any, ...]]:
    users = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(USERS)]
    span = (end - start).total_seconds()
    rows = []
    for _ in range(count):
        started = start + timedelta(seconds=rng.uniform(0, span))
        length = timedelta(seconds=min(rng.lognormvariate(7.6, 1.0), 8 * 3600) + 300)
        ended = started + length
        rows.append(
            (rng.choice(users), rng.choice(pools), started, None if ended >= end else ended)
        )
    return rows


#: The phases between the request and the first frame, recorded for every seeded logon.
PHASE_COLUMNS = [
    "allocated_at",
    "guest_ready_at",
    "token_issued_at",
    "tunnel_opened_at",
    "daemon_connected_at",
]
LAST_COLUMNS = ["first_frame_at", "failed_at", "failure_reason"]


def _phases(rng: random.Random, asked: datetime, end: datetime) -> list[datetime]:
    """``asked``, then the phases of :data:`PHASE_COLUMNS` at random instants before ``end``."""
    span = (end - asked).total_seconds()
    offsets = sorted(rng.uniform(0, span) for _ in PHASE_COLUMNS)
    return [asked, *(asked + timedelta(seconds=offset) for offset in offsets)]


async def seed(connection: asyncpg.Connection, sessions: int, now: datetime) -> list[uuid.UUID]:
    """The pools, and the sessions and logons of the period and of the history before it."""
    rng = random.Random(26)
    cluster_id = uuid.uuid4()
    await connection.execute(
        "INSERT INTO clusters (id, name, driver, endpoint) "
        "VALUES ($1, 'bench', 'simulator', 'simulator://bench')",
        cluster_id,
    )
    pools = [uuid.uuid4() for _ in range(POOLS)]
    await connection.execute(
        """
        INSERT INTO pools (id, name, cluster_id, template, kind, os_type, min_size, max_size,
                           spare, naming_pattern)
        SELECT id, 'pool-' || n, $2, 't', 'non_persistent', 'linux', 0, 10, 0,
               'p' || n || '-{n:02}'
          FROM unnest($1::uuid[]) WITH ORDINALITY AS p (id, n)
        """,
        pools,
        cluster_id,
    )
    period_start = now - timedelta(days=DAYS)
    rows = _sessions(rng, sessions, period_start, now, pools)
    rows += _sessions(rng, sessions * 9, period_start - timedelta(days=270), period_start, pools)
    await connection.copy_records_to_table(
        "desktop_sessions",
        columns=[
            "user_id",
            "pool_id",
            "started_at",
            "ended_at",
            "desktop_id",
            "desktop_name",
            "protocol",
            "gateway_id",
            "last_activity_at",
        ],
        records=[(*row, uuid.uuid4(), "d", "vnc", "gw", row[2]) for row in rows],
    )
    logons: list[tuple[Any, ...]] = []
    for user, pool, started, _ in rows:
        asked = started - timedelta(seconds=rng.uniform(2, 30))
        logons.append((user, pool, *_phases(rng, asked, started), started, None, None))
        if rng.random() < 0.03:
            failed = asked + timedelta(seconds=20)
            reached = _phases(rng, asked, failed)
            logons.append((user, pool, *reached, None, failed, "daemon_error"))
    await connection.copy_records_to_table(
        "logons",
        columns=["user_id", "pool_id", "asked_at", *PHASE_COLUMNS, *LAST_COLUMNS],
        records=logons,
    )
    await connection.execute("ANALYZE desktop_sessions; ANALYZE logons")
    return pools


Report = Callable[[], Awaitable[dict[str, Any]]]


def _cases(runtime: Runtime, start: datetime, now: datetime, pool: uuid.UUID) -> dict[str, Report]:
    """The reports timed, by name: each a call of the service behind its endpoint."""

    def usage(bucket: BucketSize, pool_id: uuid.UUID | None) -> Report:
        return lambda: service.usage_report(
            runtime, start=start, end=now, bucket=bucket, pool_id=pool_id
        )

    def phases(pool_id: uuid.UUID | None) -> Report:
        return lambda: service.logon_phases(runtime, start=start, end=now, pool_id=pool_id)

    return {
        "usage, all pools, by hour": usage(BucketSize.HOUR, None),
        "usage, one pool, by hour": usage(BucketSize.HOUR, pool),
        "usage, all pools, by day": usage(BucketSize.DAY, None),
        "logon phases, all pools": phases(None),
        "logon phases, one pool": phases(pool),
    }


FIGURES = [
    Figure("median", "seconds (median of the run's calls)", 3),
    Figure("max", "seconds (slowest call of the run)", 3),
    Figure("sessions", "sessions started counted"),
    Figure("logons", "logons counted"),
]


async def measure(side: str, number: int, report: Report, calls: int, marker: str) -> Run:
    """One run: ``calls`` calls of ``report``, timed, under the load monitor."""
    monitor = LoadMonitor(markers=[marker])
    monitor.start()
    times = []
    answer: dict[str, Any] = {}
    for _ in range(calls):
        began = time.perf_counter()
        answer = await report()
        times.append(time.perf_counter() - began)
    load = monitor.stop()
    figures = {"median": statistics.median(times), "max": max(times)}
    if "totals" in answer:
        figures["sessions"] = answer["totals"]["sessions_started"]
    else:
        figures["logons"] = answer["logons"]
    return Run(side, number, figures, load)


async def _explain_plans(
    connection: asyncpg.Connection, start: datetime, now: datetime, pool: uuid.UUID
) -> None:
    """Print the plans of the reads (all pools and one pool) on stderr."""
    reads = {
        "sessions": reports_store.SESSIONS_SQL,
        "logons": reports_store.LOGONS_SQL,
        "logon phases": reports_store.LOGON_PHASES_SQL,
    }
    for what, query in reads.items():
        for pool_id in (None, pool):
            plan = await connection.fetch(f"EXPLAIN {query}", start, now, pool_id)
            scope = "all pools" if pool_id is None else "one pool"
            print(f"plan of the {what} ({scope}):", file=sys.stderr)
            for line in plan:
                print("   ", line[0], file=sys.stderr)


async def main() -> int:
    parser = arguments(__doc__, "rounds (every report once each)")
    parser.add_argument("--calls", type=int, default=3, help="calls of its report per run")
    parser.add_argument("--sessions", type=int, default=10_000)
    args = parser.parse_args()
    admin_url = ServiceAddresses.from_environ().admin_url
    url = await create_test_database(admin_url, prefix=DB_PREFIX)
    try:
        connection = await asyncpg.connect(url)
        try:
            await migrate(connection)
            now = datetime.now(UTC).replace(microsecond=0)
            began = time.perf_counter()
            pools = await seed(connection, args.sessions, now)
            print(f"seeded in {time.perf_counter() - began:.1f} s", file=sys.stderr)
            start = now - timedelta(days=DAYS)
            await _explain_plans(connection, start, now, pools[0])
        finally:
            await connection.close()
        db = await asyncpg.create_pool(url, min_size=1, max_size=2)
        runtime = cast(Runtime, _Runtime(db))
        cases = _cases(runtime, start, now, pools[0])
        series = Series(
            f"Reports over {DAYS} days of {args.sessions:,} sessions and their logons, "
            f"{args.calls} calls per run",
            list(cases),
            FIGURES,
            keep_starved=args.keep_starved,
        )
        marker = url.rsplit("/", 1)[-1]
        try:
            for number, side in rounds(args.runs, list(cases)):
                run = await measure(side, number, cases[side], args.calls, marker)
                print_run(series, run, lambda line: print(line, file=sys.stderr, flush=True))
        finally:
            await db.close()
    finally:
        await drop_test_database(admin_url, url)
    print(series.table())
    return verdict(series)


def verdict(series: Series) -> int:
    """Print whether every report's slowest call of the accepted runs met the target; 0 if so.

    Starved runs shown with ``--keep-starved`` are not judged.
    """
    slowest = {
        side: [run.figures["max"] for run in series.runs if run.side == side and run.accepted]
        for side in series.sides
    }
    if not all(slowest.values()):
        print(f"\nTarget < {TARGET:.0f} s: not judged (a report has no accepted run).")
        return 1
    met = all(max(values) < TARGET for values in slowest.values())
    print(
        f"\nTarget < {TARGET:.0f} s per report (slowest call of the accepted runs): "
        f"{'met' if met else 'MISSED'}."
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
