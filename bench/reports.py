"""Usage report benchmark: a report over 30 days of 10,000 sessions answers within a second.

A fresh database gets 20 pools, 500 users and, over the 30 days before now, 10,000 sessions
(starts spread evenly, lengths from 5 minutes to 8 hours; those running past now are still
open) each with its logon
(2 to 30 s from request to first frame; another 3 % of logons failed). Nine months of older
history (90,000 sessions and their logons) lie before the period, so the report has to find
its rows rather than read the whole table.

Each round times :func:`deskpool.reports.service.usage_report`, the code behind
``GET /api/v1/reports/usage`` (reading the period's sessions and logons in one snapshot and
computing every bucket), for three reports: all pools by hour (720 buckets), one pool by hour,
all pools by day. The figures are the minimum / median / maximum over the rounds (5 by
default), against the target of issue 26: under 1 s. The query plans (``EXPLAIN``) of the two
reads are printed once, to show the index used.

Run it from the repository root with PostgreSQL running (``make services``)::

    .venv/bin/python bench/reports.py
    .venv/bin/python bench/reports.py --runs 3 --sessions 10000
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import asyncpg

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
        logons.append((user, pool, asked, started, None, None))
        if rng.random() < 0.03:
            logons.append((user, pool, asked, None, asked + timedelta(seconds=20), "daemon_error"))
    await connection.copy_records_to_table(
        "logons",
        columns=["user_id", "pool_id", "asked_at", "first_frame_at", "failed_at", "failure_reason"],
        records=logons,
    )
    await connection.execute("ANALYZE desktop_sessions; ANALYZE logons")
    return pools


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5)
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
            reads = {"sessions": reports_store.SESSIONS_SQL, "logons": reports_store.LOGONS_SQL}
            for what, query in reads.items():
                for pool_id in (None, pools[0]):
                    plan = await connection.fetch(f"EXPLAIN {query}", start, now, pool_id)
                    scope = "all pools" if pool_id is None else "one pool"
                    print(f"plan of the {what} ({scope}):", file=sys.stderr)
                    for line in plan:
                        print("   ", line[0], file=sys.stderr)
        finally:
            await connection.close()
        db = await asyncpg.create_pool(url, min_size=1, max_size=2)
        runtime = cast(Runtime, _Runtime(db))
        cases = {
            "all pools, hour buckets (720)": (BucketSize.HOUR, None),
            "one pool, hour buckets (720)": (BucketSize.HOUR, pools[0]),
            "all pools, day buckets (30)": (BucketSize.DAY, None),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        counted: dict[str, int] = {}
        try:
            for _ in range(args.runs):
                for name, (bucket, pool_id) in cases.items():
                    began = time.perf_counter()
                    report = await service.usage_report(
                        runtime, start=start, end=now, bucket=bucket, pool_id=pool_id
                    )
                    times[name].append(time.perf_counter() - began)
                    counted[name] = report["totals"]["sessions_started"]
        finally:
            await db.close()
    finally:
        await drop_test_database(admin_url, url)
    print(f"Usage report over {DAYS} days of {args.sessions:,} sessions ({args.runs} rounds)\n")
    print("| report | sessions started counted | min | median | max | target |")
    print("|---|---|---|---|---|---|")
    for name, values in times.items():
        print(
            f"| {name} | {counted[name]:,} | {min(values):.3f} s | "
            f"{statistics.median(values):.3f} s | {max(values):.3f} s | < {TARGET:.0f} s |"
        )
    return 0 if all(max(values) < TARGET for values in times.values()) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
