"""The 9 a.m. login storm (issue 27): U users reach their desktops at once, next to two floors.

**The storm.** Every run gets a fresh database and a fresh deployment on this machine: api,
worker and gateway processes (``deskpool run``, through ``bench/licensed_deskpool.py`` so a
license for U desktops can be installed), PostgreSQL, Redis and the desktop daemon simulator
(``python -m deskpool.desktopd``, its own process). Through the REST API an administrator
makes a simulated cluster per pool and pools holding U ready desktops (``--per-pool`` each),
entitled to a group bound to an OIDC group claim, and waits until the worker has provisioned
them all. Then U users, each with a token the API has never seen, go in one burst
(:mod:`deskpool.testing.storm`): list their pools, open a desktop, redeem the connection token
at a gateway, and wait for the first image. Printed: the wall time until the last user has a
frame, each user's time to a first frame and each step's p50/p95/p99, the desktops opened per
second (U over the span from the first open to the last), refusals retried and 5xx answers
by reason, and the database's word on the allocations (double allocations, users without a
desktop). Two sides: one api and one gateway process, and two of each (users spread over them
as a load balancer would).

**The floors**, in the same rounds:

- (a) ``bench/floor_me.py``: a bare aiohttp handler verifying the same RS256 tokens with the
  same library (joserfc) and reading one row by subject with asyncpg, next to deskpool's cold
  ``GET /api/v1/me`` (an api process of its own on a database with ``--me-users`` users, more
  than its token and principal caches hold, tokens rotated by wrk so every request verifies a
  signature and loads a principal, as in ``bench/auth_me.py``);
- (b) U allocations straight through asyncpg, one
  ``UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING`` each, all at once
  on 10 connections (``DATABASE_MAX_CONNS``), on deskpool's own ``desktops`` table in a fresh
  database on the same server, next to the storm's desktops opened per second.

Run from the repository root with PostgreSQL and Redis up, wrk on the PATH::

    .venv/bin/python bench/login_storm.py [--users 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import redis.asyncio as redis
from auth_me import FIGURES as ME_FIGURES
from auth_me import ROTATE, Bench, IssuerThread, deskpool_api, listening_port, wait_for
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from harness import (
    Figure,
    Load,
    LoadMonitor,
    ProcessTimes,
    Run,
    Series,
    percentile,
    print_run,
)

from deskpool.db import migrate
from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.licensing import TestVendor
from deskpool.testing.processes import (
    QUICK_INTERVALS,
    DeskpoolProcess,
    deployment_environ,
    listening,
    running,
)
from deskpool.testing.services import (
    ServiceAddresses,
    create_test_database,
    drop_test_database,
)
from deskpool.testing.storm import (
    CLAIM,
    STEPS,
    Prepared,
    StormResult,
    check_allocations,
    daemon_processes,
    new_subjects,
    prepare,
    storm,
    wait_ready,
)

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
#: Marks the benchmark's databases (the load monitor counts their backends as ours).
DB_PREFIX = "dpbench_storm"
ADMIN = "storm-admin"
#: Targets of issue 27 (one api, one worker, one gateway process).
TARGET_ME_RATE = 0.6
TARGET_ME_P99 = 2.0
TARGET_OPEN_RATE = 0.5
TARGET_WALL = 15.0
TARGET_USER_P99 = 5.0

#: What the two cores did in a storm, by part: deskpool's processes and PostgreSQL's backends
#: of the run's database, then what stands in for the rest of the world (the desktop daemon
#: simulators: guacd and the desktops) and the benchmark's own client (its users).
CPU_PARTS = (
    ("postgres", "PostgreSQL"),
    ("api", "api"),
    ("gateway", "gateway"),
    ("worker", "worker"),
    ("simulators", "desktop daemon simulators"),
    ("client", "the benchmark's client"),
)

STORM_FIGURES = (
    Figure("wall", "wall time to the last user's first frame, s", 2),
    Figure("served", "users with a first frame"),
    Figure("user_p50", "user's time to first frame p50, s", 2),
    Figure("user_p95", "user's time to first frame p95, s", 2),
    Figure("user_p99", "user's time to first frame p99, s", 2),
    *(
        Figure(f"{step}_{q}", f"{step.replace('_', ' ')} p{q}, ms", 0)
        for step in STEPS
        for q in (50, 95, 99)
    ),
    Figure("open_rate", "desktops opened per second (first open to last)", 0),
    Figure("retries", "refusals retried"),
    Figure("server_errors", "5xx answers"),
    Figure("double", "double allocations (database)"),
    Figure("without", "users without a desktop (database)"),
    *(Figure(f"cpu_{part}", f"CPU seconds in the storm: {label}", 1) for part, label in CPU_PARTS),
)
ALLOCATION_FIGURES = (Figure("rate", "allocations/s", ratio=True),)

FLOOR_B = """
UPDATE desktops SET assigned_user = $1, state = 'in_use', state_changed_at = now()
 WHERE id = (SELECT id FROM desktops
              WHERE pool_id = $2 AND state = 'ready' AND assigned_user IS NULL
              ORDER BY created_at, name, id
              LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id
"""


def log(line: str) -> None:
    """The run log, on stderr."""
    print(line, file=sys.stderr, flush=True)


class Part:
    """A part of the benchmark: the arguments, the issuer, the servers, a scratch folder."""

    def __init__(
        self, args: argparse.Namespace, idp: TestIdentityProvider, servers: ServiceAddresses
    ) -> None:
        self.args = args
        self.idp = idp
        self.servers = servers
        self.scratch = Path(tempfile.mkdtemp(prefix="deskpool-bench-storm-"))


class Deployment(Part):
    """What every storm run shares: the issuer, the license, the daemons, the provisioned pools.

    The pools are provisioned once (:meth:`provision`: through the REST API, by a worker, into
    a template database); every run then gets a fresh database cloned from it
    (``CREATE DATABASE … TEMPLATE``) and a copy of the simulated clusters' state in Redis, so
    the minutes the simulator takes to clone a thousand VMs are spent once, not per run.
    """

    def __init__(
        self, args: argparse.Namespace, idp: TestIdentityProvider, servers: ServiceAddresses
    ) -> None:
        super().__init__(args, idp, servers)
        self.vendor = TestVendor()
        self.license = self.scratch / "license.json"
        limit = max(1000, args.users)
        self.license.write_text(
            self.vendor.issue(
                edition="enterprise",
                limits={"desktops": limit, "pools": 100, "sessions": limit},
            )
        )
        self.command = [sys.executable, str(BENCH / "licensed_deskpool.py")]
        self.vendor_key = (
            self.vendor.private_key.public_key()
            .public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )
        self.daemons = contextlib.ExitStack()
        self.daemon_address = ""
        #: Sealed secrets and the license watermark of the template hold in every clone.
        self.master_key = secrets.token_urlsafe(32)
        self.template = ""
        self.template_prefix = ""
        self.prepared: Prepared | None = None
        self.provisioned = 0.0
        #: Refusals retried, 5xx and users not served of each run, by (side, round).
        self.reasons: dict[tuple[str, int], tuple[collections.Counter[str], ...]] = {}

    def start_daemons(self) -> None:
        """The desktop daemon simulator processes, sharing one address."""
        self.daemon_address = self.daemons.enter_context(daemon_processes(self.args.daemons))

    def stop(self) -> None:
        """Stop the daemons and forget the scratch folder."""
        self.daemons.close()
        self.vendor.forget()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def environ(self, database: str, prefix: str) -> dict[str, str]:
        """The environment of one run's processes."""
        base = {
            **os.environ,
            "KVSTORE_ADDR": self.servers.kv_addr,
            "KVSTORE_KEY_PREFIX": prefix,
            "METRICS_ADDR": "",
            "SECRETS_MASTER_KEY": self.master_key,
            "DESKTOPD_ADDRESS": self.daemon_address,
            "GATEWAY_PUBLIC_WS_URL": "wss://desktops.bench.test/websocket-tunnel",
            "API_RATE_LIMIT_PER_MINUTE": "100000000",
            # The 1,000 users share one loopback address here; in a deployment they come from
            # their own addresses or through a trusted proxy, which the per-address cap exempts.
            "API_MAX_CONNECTIONS_PER_ADDRESS": "0",
            "DESKPOOL_BENCH_VENDOR_KEY": self.vendor_key,
        }
        return deployment_environ(base, database, self.idp, admin=ADMIN, **QUICK_INTERVALS)

    def new_users(self) -> list[tuple[str, str]]:
        """``--users`` subjects no API has seen, each with a token carrying the storm's claim."""
        return [
            (subject, self.idp.issue_token(subject, expires_in=3600, claims={"groups": [CLAIM]}))
            for subject in new_subjects(self.args.users)
        ]

    def deskpool(self, env: dict[str, str], *arguments: str) -> None:
        """Run a ``deskpool`` command of the licensed launcher to its end."""
        subprocess.run([*self.command, *arguments], env=env, check=True, capture_output=True)

    async def provision(self) -> None:
        """The template: a database whose pools hold U ready desktops, made by a worker."""
        args = self.args
        self.template = await create_test_database(self.servers.admin_url, f"{DB_PREFIX}_tpl")
        self.template_prefix = f"deskpool-bench-storm-{secrets.token_hex(4)}:"
        env = self.environ(self.template, self.template_prefix)
        self.deskpool(env, "migrate")
        self.deskpool(env, "license", "install", str(self.license))
        started = {
            "api": listening(["api"], env, "API_ADDR", self.command),
            "worker": DeskpoolProcess(["worker"], env, command=self.command),
        }
        began = time.perf_counter()
        async with running(started) as processes:
            db = await asyncpg.connect(self.template)
            try:
                async with aiohttp.ClientSession() as http:
                    self.prepared = await prepare(
                        http,
                        processes["api"].url("api"),
                        self.idp.issue_token(ADMIN, expires_in=3600),
                        db,
                        desktops=args.users,
                        per_pool=args.per_pool,
                        within=1800,
                    )
            finally:
                await db.close()
                keep_logs(args.logs, "provision", processes)
        self.provisioned = time.perf_counter() - began
        log(f"provisioned {args.users:,} desktops in {self.provisioned:.0f} s (once, not timed)")

    async def clone(self) -> tuple[str, str]:
        """A fresh database cloned from the template and a Redis prefix holding its clusters."""
        name = f"{DB_PREFIX}_{secrets.token_hex(6)}"
        template = urlsplit(self.template).path.lstrip("/")
        admin = await asyncpg.connect(self.servers.admin_url)
        try:
            await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        finally:
            await admin.close()
        prefix = f"deskpool-bench-storm-{secrets.token_hex(4)}:"
        kv = redis.Redis.from_url(f"redis://{self.servers.kv_addr}")
        try:
            async for key in kv.scan_iter(match=f"{self.template_prefix}driver:*"):
                dumped = await kv.dump(key)
                if dumped is not None:
                    renamed = prefix.encode() + key[len(self.template_prefix) :]
                    await kv.restore(renamed, 0, dumped, replace=True)
        finally:
            await kv.aclose()
        return urlunsplit(urlsplit(self.template)._replace(path=f"/{name}")), prefix

    async def forget_template(self) -> None:
        """Drop the template database and its Redis keys."""
        if self.template:
            await drop_test_database(self.servers.admin_url, self.template)
            await forget_prefix(self.servers.kv_addr, self.template_prefix)

    async def run(self, side: str, number: int, processes: int, code: str = "") -> Run:
        """One storm with ``processes`` api and gateway processes.

        :param code: a source tree whose deskpool the processes run instead of this one's
            (``--baseline``), for a before/after comparison in the same rounds.
        """
        args = self.args
        assert self.prepared is not None
        database, prefix = await self.clone()
        try:
            # The shared server allows 100 connections: n processes of a role share the 10
            # connections (DATABASE_MAX_CONNS) one process of it has.
            env = {
                **self.environ(database, prefix),
                "DATABASE_MAX_CONNS": str(10 // processes),
            }
            if code:
                env["PYTHONPATH"] = os.pathsep.join(
                    str(Path(code) / folder)
                    for folder in (
                        "platform",
                        "plugins",
                        "hypervisor_drivers/contract",
                        "hypervisor_drivers/simulator",
                    )
                )
            started = {
                **{
                    f"api-{n}": listening(["api"], env, "API_ADDR", self.command)
                    for n in range(processes)
                },
                "worker": DeskpoolProcess(["worker"], env, command=self.command),
                **{
                    f"gateway-{n}": listening(["gateway"], env, "GATEWAY_ADDR", self.command)
                    for n in range(processes)
                },
            }
            async with running(started) as running_processes:
                apis = [running_processes[f"api-{n}"].url("api") for n in range(processes)]
                gateways = [
                    f"{running_processes[f'gateway-{n}'].url('gateway', 'ws')}/websocket-tunnel"
                    for n in range(processes)
                ]
                db = await asyncpg.connect(database)
                try:
                    await wait_ready(db, self.prepared, within=300)
                    tokens = self.new_users()
                    monitor = LoadMonitor(markers=[database.rsplit("/", 1)[-1]])
                    monitor.start()
                    began_at = time.time()
                    # Said before, too: a profiler attached to the processes starts on it.
                    log(f"  {side} round {number}: storm begins at {began_at:.1f}")
                    result = await storm(apis, gateways, tokens, within=args.within)
                    load = monitor.stop()
                    cpu = monitor.cpu_by_part(storm_part(database.rsplit("/", 1)[-1]))
                    log(f"  {side} round {number}: storm from {began_at:.1f} to {time.time():.1f}")
                    check = await check_allocations(db, self.idp.issuer_url, result)
                    keep_logs(args.logs, f"{side}-{number}", running_processes)
                    if result.failures() or result.server_errors():
                        for name, process in running_processes.items():
                            warned = [
                                line
                                for line in process.lines
                                if '"level": "info"' not in line and " INFO " not in line
                            ]
                            for line in warned[-3:]:
                                log(f"  {side} round {number}: {name} said: {line[:300]}")
                finally:
                    await db.close()
        finally:
            await drop_test_database(self.servers.admin_url, database)
            await forget_prefix(self.servers.kv_addr, prefix)
        figures = storm_figures(result)
        figures["double"] = check.desktops_with_several_users + check.users_with_several
        figures["without"] = check.users_without_desktop
        for part, _ in CPU_PARTS:
            figures[f"cpu_{part}"] = cpu.get(part, 0.0)
        log_reasons(f"{side} round {number}", result, "NOT SERVED")
        if not check.sound:
            log(f"  {side} round {number}: ALLOCATION CHECK FAILED: {check}")
        self.reasons[side, number] = (result.retries(), result.server_errors(), result.failures())
        return Run(side, number, figures, load)


def log_reasons(run: str, result: StormResult, not_done: str) -> None:
    """Log the refusals retried, the 5xx answers and the users ``not_done``, by reason."""
    for title, found in (
        ("retried", result.retries()),
        ("5xx", result.server_errors()),
        (not_done, result.failures()),
    ):
        for reason, count in sorted(found.items()):
            log(f"  {run}: {title} {count} x {reason}")


def storm_part(database: str) -> Callable[[int, ProcessTimes], str | None]:
    """Which of :data:`CPU_PARTS` a process of a storm on ``database`` is (``None``: none)."""

    def part_of(pid: int, process: ProcessTimes) -> str | None:
        title = process.title
        if pid == os.getpid():
            return "client"
        if title.startswith("postgres") and database in title:
            return "postgres"
        if "deskpool.desktopd" in title:
            return "simulators"
        if "licensed_deskpool.py" in title:
            for role in ("api", "gateway", "worker"):
                if f" run {role}" in title:
                    return role
        return None

    return part_of


def keep_logs(folder: str, prefix: str, processes: dict[str, DeskpoolProcess]) -> None:
    """Write each process's whole log to ``folder`` (``--logs``; nothing without one)."""
    if folder:
        for name, process in processes.items():
            Path(folder, f"{prefix}-{name}.log").write_text("\n".join(process.lines))


async def forget_prefix(kv_addr: str, prefix: str) -> None:
    """Delete every Redis key under ``prefix`` (a run's or the template's)."""
    kv = redis.Redis.from_url(f"redis://{kv_addr}")
    try:
        keys = [key async for key in kv.scan_iter(match=f"{prefix}*")]
        for start in range(0, len(keys), 500):
            await kv.delete(*keys[start : start + 500])
    finally:
        await kv.aclose()


def storm_figures(result: StormResult) -> dict[str, float]:
    """The figures of one storm."""
    served = [user for user in result.users if user.total is not None]
    figures: dict[str, float] = {
        "wall": result.wall,
        "served": float(len(served)),
        "retries": float(sum(result.retries().values())),
        "server_errors": float(sum(result.server_errors().values())),
    }
    totals = [user.total for user in served if user.total is not None]
    if totals:
        for q in (50, 95, 99):
            figures[f"user_p{q}"] = percentile(totals, q / 100)
    for step in STEPS:
        times = [user.steps[step] * 1000 for user in result.users if step in user.steps]
        if times:
            for q in (50, 95, 99):
                figures[f"{step}_{q}"] = percentile(times, q / 100)
    opened = [user for user in result.users if "open_desktop" in user.steps]
    if opened:
        first = min(user.started + user.steps["list_pools"] for user in opened)
        last = max(
            user.started + user.steps["list_pools"] + user.steps["open_desktop"] for user in opened
        )
        figures["open_rate"] = len(opened) / max(last - first, 1e-6)
    return figures


async def floor_allocations(servers: ServiceAddresses, users: int) -> tuple[float, Load]:
    """Floor (b): ``users`` allocations at once through asyncpg; allocations/s and the load."""
    database = await create_test_database(servers.admin_url, DB_PREFIX)
    try:
        connection = await asyncpg.connect(database)
        try:
            await migrate(connection)
            cluster_id, pool_id = uuid.uuid4(), uuid.uuid4()
            await connection.execute(
                "INSERT INTO clusters (id, name, driver, endpoint) "
                "VALUES ($1, 'floor', 'simulator', 'simulator://floor')",
                cluster_id,
            )
            await connection.execute(
                "INSERT INTO pools (id, name, cluster_id, template, kind, os_type, min_size, "
                "max_size, spare, naming_pattern) VALUES ($1, 'floor', $2, 'ubuntu-22.04', "
                "'non_persistent', 'linux', $3, $3, 0, 'floor-{n:04}')",
                pool_id,
                cluster_id,
                users,
            )
            await connection.execute(
                "INSERT INTO desktops (pool_id, cluster_id, name, state, vm_id, template, node) "
                "SELECT $1, $2, 'floor-' || lpad(n::text, 4, '0'), 'ready', n::text, "
                "'ubuntu-22.04', 'sim-node-1' FROM generate_series(1, $3) AS n",
                pool_id,
                cluster_id,
                users,
            )
            user_ids = [
                row["id"]
                for row in await connection.fetch(
                    "INSERT INTO users (issuer, subject) SELECT 'floor', 'floor-' || n "
                    "FROM generate_series(1, $1) AS n RETURNING id",
                    users,
                )
            ]
            await connection.execute("ANALYZE")
        finally:
            await connection.close()
        pool = await asyncpg.create_pool(database, min_size=10, max_size=10)
        try:
            monitor = LoadMonitor(markers=[database.rsplit("/", 1)[-1]])
            monitor.start()
            started = time.perf_counter()
            got = await asyncio.gather(
                *(pool.fetchval(FLOOR_B, user_id, pool_id) for user_id in user_ids)
            )
            seconds = time.perf_counter() - started
            load = monitor.stop()
        finally:
            await pool.close()
        if None in got or len(set(got)) != users:
            raise SystemExit("FAILED: floor (b) did not hand out one desktop per user")
        return users / seconds, load
    finally:
        await drop_test_database(servers.admin_url, database)


class ColdMe(Part):
    """deskpool's cold ``GET /me`` and floor (a), each a process on one database of users."""

    def __init__(
        self, args: argparse.Namespace, idp: TestIdentityProvider, servers: ServiceAddresses
    ) -> None:
        super().__init__(args, idp, servers)
        self.database = ""
        self.processes: list[subprocess.Popen[Any]] = []
        self.sent = 0

    async def setup(self) -> None:
        """The database, its users and their tokens."""
        args = self.args
        self.database = await create_test_database(self.servers.admin_url, DB_PREFIX)
        connection = await asyncpg.connect(self.database)
        try:
            await migrate(connection)
            await connection.execute(
                "INSERT INTO users (issuer, subject, email) SELECT $1, 'me-' || n, "
                "'me-' || n || '@example.com' FROM generate_series(1, $2) AS n",
                self.idp.issuer_url,
                args.me_users,
            )
            await connection.execute("ANALYZE")
        finally:
            await connection.close()
        tokens = [
            self.idp.issue_token(f"me-{n}", expires_in=7200, email=f"me-{n}@example.com")
            for n in range(1, args.me_users + 1)
        ]
        (self.scratch / "tokens").write_text("\n".join(tokens) + "\n")
        self.probe = {"Authorization": f"Bearer {tokens[0]}"}

    def start(self) -> None:
        """Both servers, once they answer."""
        args = self.args
        env = {
            **os.environ,
            "DATABASE_URL": self.database,
            "KVSTORE_ADDR": self.servers.kv_addr,
            "KVSTORE_KEY_PREFIX": f"deskpool-bench-storm-me-{secrets.token_hex(4)}:",
            "LOG_LEVEL": "warn",
            "APP_ENV": "bench",
            "AUTH_OIDC_ISSUER_URL": self.idp.issuer_url,
            "AUTH_OIDC_AUDIENCE": self.idp.audience,
            "API_RATE_LIMIT_PER_MINUTE": "100000000",
        }
        api, api_base, ops = deskpool_api(env, self.scratch)
        self.processes.append(api)
        floor, floor_port = listening_port(
            [
                sys.executable,
                str(BENCH / "floor_me.py"),
                "0",
                self.database,
                self.idp.issuer_url,
                self.idp.audience,
            ]
        )
        self.processes.append(floor)
        self.api_url = f"{api_base}/api/v1/me"
        self.floor_url = f"http://127.0.0.1:{floor_port}/api/v1/me"
        wait_for(self.api_url, self.probe)
        wait_for(self.floor_url, self.probe)
        self.bench = Bench(args, self.database.rsplit("/", 1)[-1], f"{ops}/metrics")

    def run(self, side: str, number: int) -> Run:
        """One wrk run of deskpool or the floor, tokens rotated from where deskpool stopped."""
        deskpool = side == "deskpool"
        rotate = self.scratch / "rotate.lua"
        rotate.write_text(ROTATE % (self.scratch / "tokens", self.sent % self.args.me_users))
        run = self.bench.run(
            side,
            number,
            self.api_url if deskpool else self.floor_url,
            ["-s", str(rotate)],
            deskpool,
        )
        requests = int(run.figures.pop("requests"))
        if deskpool:
            self.sent += requests
        return run

    async def close(self) -> None:
        """Stop both servers and drop the database."""
        for process in self.processes:
            process.terminate()
            process.wait(10)
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self.database:
            await drop_test_database(self.servers.admin_url, self.database)


def reasons_table(
    series: Series, reasons: dict[tuple[str, int], tuple[collections.Counter[str], ...]]
) -> list[str]:
    """Refusals retried, 5xx and users not served by reason, over the accepted runs."""
    lines = []
    for side in series.sides:
        totals: list[collections.Counter[str]] = [collections.Counter() for _ in range(3)]
        for run in series.runs:
            if run.side == side and series.usable(run):
                for total, found in zip(totals, reasons[side, run.round], strict=True):
                    total.update(found)
        for title, total in zip(("refusals retried", "5xx", "not served"), totals, strict=True):
            shown = ", ".join(f"{count} x {reason}" for reason, count in total.most_common())
            lines.append(f"- {side}, {title} (all accepted runs): {shown or 'none'}")
    return lines


def verdicts(storm_series: Series, allocation: Series, me: Series, users: int) -> list[str]:
    """The targets of issue 27 against the accepted runs' medians."""

    def median(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    one = storm_series.sides[0]
    me_p99, floor_p99 = median(me.values("deskpool", "p99")), median(me.values("floor (a)", "p99"))
    worst = [
        value
        for side in storm_series.sides
        for key in ("double", "without", "server_errors")
        for value in storm_series.values(side, key)
    ]
    bad = max(worst) if worst else None
    # (what, measured, unit, whether it meets the target)
    checks: list[tuple[str, float | None, str, bool]] = [
        (
            f"cold GET /me at least {TARGET_ME_RATE}x floor (a)",
            (r := median(me.ratios("floor (a)", "rate"))),
            "x",
            r is not None and r >= TARGET_ME_RATE,
        ),
        (
            f"cold GET /me p99 within {TARGET_ME_P99}x floor (a)'s",
            (q := me_p99 / floor_p99 if me_p99 is not None and floor_p99 else None),
            "x",
            q is not None and q <= TARGET_ME_P99,
        ),
        (
            f"open a desktop at least {TARGET_OPEN_RATE}x floor (b), allocations/s",
            (a := median(allocation.ratios("floor (b)", "rate"))),
            "x",
            a is not None and a >= TARGET_OPEN_RATE,
        ),
        (
            f"{users:,} users, the last first frame within {TARGET_WALL:g} s ({one})",
            (w := median(storm_series.values(one, "wall"))),
            " s",
            w is not None and w <= TARGET_WALL,
        ),
        (
            f"p99 of a user's time to first frame within {TARGET_USER_P99:g} s ({one})",
            (p := median(storm_series.values(one, "user_p99"))),
            " s",
            p is not None and p <= TARGET_USER_P99,
        ),
        (
            "0 double allocations, 0 users without a desktop, 0 5xx (worst accepted run)",
            bad,
            "",
            bad == 0,
        ),
    ]
    lines = ["Against the targets of issue 27 (accepted runs, medians):"]
    for what, value, unit, ok in checks:
        shown = (
            "no accepted run"
            if value is None
            else f"{value:.2f}{unit}: " + ("meets it" if ok else "MISSES it")
        )
        lines.append(f"- {what}: {shown}")
    return lines


async def bench(args: argparse.Namespace) -> None:
    """Every round: the storm on 1 and 2 processes, floor (b), cold /me and floor (a)."""
    servers = ServiceAddresses.from_environ()
    began = time.perf_counter()
    with IssuerThread() as idp:
        deployment = Deployment(args, idp, servers)
        cold = ColdMe(args, idp, servers)
        try:
            deployment.start_daemons()
            await deployment.provision()
            if "me" in args.parts:
                await cold.setup()
                cold.start()
            runs = [(n, f"{n} api + {n} gateway", "") for n in args.processes]
            if args.baseline:
                runs += [
                    (n, f"{n} api + {n} gateway, baseline", args.baseline) for n in args.processes
                ]
            sides = [side for _, side, _ in runs]
            storm_series = Series(
                f"Login storm: {args.users:,} users with unseen tokens in one burst, pools of "
                f"{args.per_pool} ready desktops, one worker",
                sides,
                STORM_FIGURES,
                keep_starved=args.keep_starved,
            )
            allocation = Series(
                f"Opening desktops: deskpool in the storm ({sides[0]}) and floor (b), "
                f"{args.users:,} allocations",
                [f"deskpool ({sides[0]})", "floor (b)"],
                ALLOCATION_FIGURES,
                keep_starved=args.keep_starved,
            )
            heading = (
                f"wrk, {args.threads} thread, {args.connections} connections, "
                f"{args.seconds} s per run"
            )
            me = Series(
                f"Cold GET /api/v1/me, {args.me_users:,} users and tokens rotated, "
                f"and floor (a) ({heading})",
                ["deskpool", "floor (a)"],
                ME_FIGURES,
                keep_starved=args.keep_starved,
            )
            for number in range(1, args.runs + 1):
                for processes, side, code in runs:
                    run = await deployment.run(side, number, processes, code)
                    print_run(storm_series, run, log)
                    if side == sides[0]:
                        opened = Run(
                            f"deskpool ({sides[0]})",
                            number,
                            {"rate": run.figures.get("open_rate", 0.0)},
                            run.load,
                        )
                        print_run(allocation, opened, log)
                if "floors" in args.parts:
                    rate, load = await floor_allocations(servers, args.users)
                    print_run(allocation, Run("floor (b)", number, {"rate": rate}, load), log)
                if "me" in args.parts:
                    print_run(me, cold.run("deskpool", number), log)
                    print_run(me, cold.run("floor (a)", number), log)
            print(
                f"{args.users:,} desktops provisioned once in {deployment.provisioned:.0f} s "
                f"(not timed); {args.daemons} desktop daemon simulator processes"
            )
            print()
            print(storm_series.table())
            print()
            print("\n".join(reasons_table(storm_series, deployment.reasons)))
            print()
            print(allocation.table())
            print()
            print(me.table())
            print()
            print("\n".join(verdicts(storm_series, allocation, me, args.users)))
            print()
            print(f"The whole run took {time.perf_counter() - began:.0f} s.")
        finally:
            await cold.close()
            await deployment.forget_template()
            deployment.stop()


def deployment_parser(description: str) -> argparse.ArgumentParser:
    """The arguments of every benchmark run on a :class:`Deployment` (users, rounds, pools)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--users", type=int, default=1000, help="users in the storm")
    parser.add_argument("--runs", type=int, default=3, help="rounds (each side once per round)")
    parser.add_argument("--per-pool", type=int, default=250, help="desktops per pool")
    parser.add_argument("--within", type=float, default=120, help="seconds a user may take")
    parser.add_argument(
        "--daemons", type=int, default=4, help="desktop daemon simulator processes (one address)"
    )
    parser.add_argument("--keep-starved", action="store_true", help="for developing only")
    parser.add_argument(
        "--logs", default="", help="a folder for every process's whole log, by side and round"
    )
    return parser


def main() -> None:
    """Parse the arguments and run the rounds."""
    parser = deployment_parser((__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--processes", type=int, nargs="+", default=[1, 2], help="api and gateway processes"
    )
    parser.add_argument("--me-users", type=int, default=12000, help="users of the /me series")
    parser.add_argument("--seconds", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="wrk threads")
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=("storm", "floors", "me"),
        default=["storm", "floors", "me"],
        help="what to run besides the storm (for developing: the tables need all three)",
    )
    parser.add_argument(
        "--baseline",
        default="",
        help="a source tree (git archive of another commit): its storms run as more sides",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
