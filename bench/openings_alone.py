"""Openings alone (issue 39): U signed-in users open a desktop at once, next to floor (b).

Issue 39's openings line compares the desktops a storm opens per second with floor (b), U bare
allocation statements on a database with nothing else to do. In the storm the openings share
the two cores with everything else the storm does meanwhile: the other users' sign-ins and
listings, the gateway's redemptions and first frames, the desktop daemon simulators and the
benchmark's own client. This benchmark measures the opening alone, on the same footing as
floor (b), so the two can be compared like for like. It does not replace the storm's figure:
``bench/login_storm.py`` still prints that one, against the same floor.

Each run: a fresh database cloned from pools of U ready desktops (provisioned once, as in
``bench/login_storm.py``), one api and one worker process. Every user first signs in and
lists its pools (``GET /api/v1/me/pools``, 50 at a time, not timed), so its principal is the
API's to recall, as it is when a user of the storm opens. Then every user at once opens a
desktop (``POST /api/v1/me/pools/{id}/desktop``, user *i* in the *i*-th pool, the next one on a
refusal; :func:`deskpool.testing.storm.open_at_once`): the whole opening (the bearer token,
the entitlement and the license's checks, the allocation, the logon's phases, the single-use
token, the audit event, the announcement). Printed: openings per second (U over the span from
the burst to the last answer), each opening's p50/p95/p99, refusals retried and 5xx answers,
the database's word on the allocations, and the CPU seconds of each part; floor (b) in the same
rounds, alternated, as ``bench/login_storm.py`` measures it.

Run from the repository root with PostgreSQL and Redis up::

    .venv/bin/python bench/openings_alone.py [--users 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import aiohttp
import asyncpg
from auth_me import IssuerThread
from harness import Figure, LoadMonitor, Run, Series, percentile, print_run
from login_storm import (
    CPU_PARTS,
    Deployment,
    deployment_parser,
    floor_allocations,
    forget_prefix,
    keep_logs,
    log,
    log_reasons,
    storm_part,
)

from deskpool.testing.processes import DeskpoolProcess, listening, running
from deskpool.testing.services import ServiceAddresses, drop_test_database
from deskpool.testing.storm import StormResult, open_at_once, wait_ready

#: Issue 39's line: openings per second at least this share of floor (b)'s allocations.
TARGET_OPEN_RATE = 0.1
#: Users signing in at once before the burst (not timed).
SIGN_IN_AT_ONCE = 50
DESKPOOL = "deskpool, openings alone (1 api)"
FLOOR = "floor (b)"

FIGURES = (
    Figure("rate", "openings/s (allocations/s for the floor)", 0, ratio=True),
    Figure("opened", "users with a desktop opened"),
    *(Figure(f"open_{q}", f"open desktop p{q}, ms", 0) for q in (50, 95, 99)),
    Figure("retries", "refusals retried"),
    Figure("server_errors", "5xx answers"),
    Figure("double", "users with several desktops (database)"),
    Figure("without", "users without a desktop (database)"),
    Figure("mismatches", "desktops answered that the database does not show (database)"),
    *(
        Figure(f"cpu_{part}", f"CPU seconds in the burst: {label}", 1)
        for part, label in CPU_PARTS
        if part not in ("gateway", "simulators")
    ),
)

_HELD = """
SELECT u.subject, array_remove(array_agg(d.id::text), NULL) AS desktops
  FROM users u LEFT JOIN desktops d ON d.assigned_user = u.id
 WHERE u.issuer = $1 AND u.subject = ANY($2::text[])
 GROUP BY u.subject
"""


async def sign_in_all(api_url: str, tokens: list[tuple[str, str]]) -> list[str]:
    """Every user lists its pools (signing in); the pools' ids in the listing's order."""
    api = api_url.rstrip("/") + "/api/v1/me/pools"
    limit = asyncio.Semaphore(SIGN_IN_AT_ONCE)
    listings: list[list[str]] = []

    async def one(http: aiohttp.ClientSession, token: str) -> None:
        async with limit, http.get(api, headers={"Authorization": f"Bearer {token}"}) as answer:
            body = await answer.json(content_type=None)
            if answer.status != 200:
                raise SystemExit(f"FAILED: listing pools answered {answer.status}: {body}")
            listings.append([pool["id"] for pool in body["items"]])

    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(one(http, token) for _, token in tokens))
    if not listings or not listings[0]:
        raise SystemExit("FAILED: no pool listed")
    return listings[0]


async def held_by_users(
    db: asyncpg.Connection, issuer: str, result: StormResult
) -> dict[str, float]:
    """What the database says: each user's desktops, against the desktops the API answered."""
    subjects = [user.subject for user in result.users]
    rows = await db.fetch(_HELD, issuer, subjects)
    held = {row["subject"]: list(row["desktops"]) for row in rows}
    counts = [len(held.get(subject, [])) for subject in subjects]
    mismatches = sum(
        1
        for user in result.users
        if user.desktop_id is not None and held.get(user.subject) != [user.desktop_id]
    )
    return {
        "double": float(sum(1 for count in counts if count > 1)),
        "without": float(counts.count(0)),
        "mismatches": float(mismatches),
    }


class OpeningsAlone(Deployment):
    """The storm's deployment, its users opening and doing nothing else."""

    async def burst(self, number: int) -> Run:
        """One run: a fresh database, the sign-ins, then every opening at once."""
        assert self.prepared is not None
        database, prefix = await self.clone()
        name = database.rsplit("/", 1)[-1]
        try:
            env = self.environ(database, prefix)
            started = {
                "api": listening(["api"], env, "API_ADDR", self.command),
                "worker": DeskpoolProcess(["worker"], env, command=self.command),
            }
            async with running(started) as processes:
                api = processes["api"].url("api")
                db = await asyncpg.connect(database)
                try:
                    await wait_ready(db, self.prepared, within=300)
                    tokens = self.new_users()
                    pools = await sign_in_all(api, tokens)
                    monitor = LoadMonitor(markers=[name])
                    monitor.start()
                    result = await open_at_once(api, tokens, pools, within=self.args.within)
                    load = monitor.stop()
                    cpu = monitor.cpu_by_part(storm_part(name))
                    checked = await held_by_users(db, self.idp.issuer_url, result)
                    keep_logs(self.args.logs, f"openings-{number}", processes)
                finally:
                    await db.close()
        finally:
            await drop_test_database(self.servers.admin_url, database)
            await forget_prefix(self.servers.kv_addr, prefix)
        opened = [user for user in result.users if user.total is not None]
        times = [user.steps["open_desktop"] * 1000 for user in opened]
        last = max((user.started + user.steps["open_desktop"] for user in opened), default=0.0)
        first = min((user.started for user in result.users), default=0.0)
        figures: dict[str, float] = {
            "rate": len(opened) / max(last - first, 1e-6) if opened else 0.0,
            "opened": float(len(opened)),
            "retries": float(sum(result.retries().values())),
            "server_errors": float(sum(result.server_errors().values())),
            **checked,
            **{f"cpu_{part}": cpu.get(part, 0.0) for part, _ in CPU_PARTS},
        }
        if times:
            figures.update({f"open_{q}": percentile(times, q / 100) for q in (50, 95, 99)})
        log_reasons(f"openings round {number}", result, "NOT OPENED")
        return Run(DESKPOOL, number, figures, load)


async def bench(args: argparse.Namespace) -> None:
    """Every round: the openings alone, then floor (b)."""
    servers = ServiceAddresses.from_environ()
    began = time.perf_counter()
    with IssuerThread() as idp:
        deployment = OpeningsAlone(args, idp, servers)
        try:
            deployment.start_daemons()
            await deployment.provision()
            series = Series(
                f"Opening desktops alone: {args.users:,} signed-in users open at once, pools of "
                f"{args.per_pool} ready desktops, one api, one worker; and floor (b)",
                [DESKPOOL, FLOOR],
                FIGURES,
                keep_starved=args.keep_starved,
            )
            for number in range(1, args.runs + 1):
                print_run(series, await deployment.burst(number), log)
                rate, load = await floor_allocations(servers, args.users)
                print_run(series, Run(FLOOR, number, {"rate": rate}, load), log)
            ratios = series.ratios(FLOOR, "rate")
            median = statistics.median(ratios) if ratios else None
            print(
                f"{args.users:,} desktops provisioned once in {deployment.provisioned:.0f} s "
                "(not timed)"
            )
            print()
            print(series.table())
            print()
            verdict = (
                "no accepted pair"
                if median is None
                else f"{median:.2f}x: "
                + ("meets it" if median >= TARGET_OPEN_RATE else "MISSES it")
            )
            print(f"Openings alone at least {TARGET_OPEN_RATE}x floor (b) (median pair): {verdict}")
            print()
            print(f"The whole run took {time.perf_counter() - began:.0f} s.")
        finally:
            await deployment.forget_template()
            deployment.stop()


def main() -> None:
    """Parse the arguments and run the rounds."""
    parser = deployment_parser((__doc__ or "").splitlines()[0])
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
