"""Grant propagation benchmark: how soon a grant (and its revocation) is seen by another api.

Two ``deskpool run api`` processes share one fresh database and Redis (each listens on a port
it picks). Each api caches the principals it resolved; a change to grants, memberships,
bindings or roles is announced on a Redis channel and every process drops its cache
(:mod:`deskpool.identity.authenticator`). The end-to-end test of scale-out once asserted that
a grant made through one api is effective on the other within a second; the tests now only
wait for it, and the figure is measured here.

One *change* is: a viewer without ``pools:read`` whose principal is cached on the observing
api (``GET /api/v1/pools`` answered 403 just before); the administrator grants ``pools:read``
through api-a (``POST /api/v1/grants``); the observer polls ``GET /api/v1/pools`` back to back
until it answers 200. **Grant seen** is the time from the grant's response to that 200's.
Then the grant is revoked through api-a (``DELETE /api/v1/grants/{id}``) and **revoke seen**
is the time until the observer answers 403 again. A run makes ``--changes`` changes (20 by
default) and gives their median and maximum, and the median of a plain ``GET /api/v1/pools``
on the observer (**one request**: the polling's resolution).

The sides: the observer is **api-b** (another process: the change reaches it through Redis),
or **api-a** (the process that made the change: the floor). They alternate in every round
(``--runs`` rounds, 5 by default); the table gives min / median / max over the runs, and the
machine's load, through ``harness.py``.

Run it from the repository root with PostgreSQL and Redis running (``make services``)::

    .venv/bin/python bench/grant_propagation.py
    .venv/bin/python bench/grant_propagation.py --runs 3 --changes 10
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import asyncpg
from harness import Figure, LoadMonitor, Run, Series, arguments, print_run

from deskpool.db import migrate
from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.processes import deployment_environ, listening, running
from deskpool.testing.services import (
    ServiceAddresses,
    create_test_database,
    drop_test_database,
)

DB_PREFIX = "dpbench_grants"
ADMIN = "bench-admin"
VIEWER = "bench-viewer"
SIDES = ("api-b (other process)", "api-a (same process)")
FIGURES = (
    Figure("grant_median", "grant seen, median ms", 1, ratio=True),
    Figure("grant_max", "grant seen, max ms", 1),
    Figure("revoke_median", "revoke seen, median ms", 1, ratio=True),
    Figure("revoke_max", "revoke seen, max ms", 1),
    Figure("request", "one request, median ms", 1),
)


@dataclass
class Caller:
    """Calls one api as one signed-in user."""

    http: aiohttp.ClientSession
    api: str
    token: str

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """The status and JSON body (``None`` when empty) of ``method path``."""
        async with self.http.request(
            method,
            f"{self.api}/api/v1{path}",
            json=body,
            headers={"Authorization": f"Bearer {self.token}"},
        ) as response:
            text = await response.text()
            return response.status, (None if not text else await response.json())

    async def status(self, path: str) -> int:
        """The status of ``GET path``."""
        return (await self.call("GET", path))[0]


async def seen(check: Callable[[], Awaitable[bool]], what: str) -> float:
    """Seconds until ``check()`` holds, polled back to back; fails after 30 s."""
    started = time.perf_counter()
    while not await check():
        if time.perf_counter() - started > 30:
            raise SystemExit(f"FAILED: {what} not seen within 30 s")
    return time.perf_counter() - started


async def one_change(admin: Caller, observer: Caller, viewer_id: str) -> tuple[float, float]:
    """Grant then revoke ``pools:read``; the seconds until ``observer`` saw each."""
    if await observer.status("/pools") != 403:  # the viewer's principal is cached, without it
        raise SystemExit("FAILED: the viewer reads pools before the grant")
    status, grant = await admin.call(
        "POST",
        "/grants",
        {"subject_type": "user", "subject_id": viewer_id, "permission": "pools:read"},
    )
    if status != 201:
        raise SystemExit(f"FAILED: the grant answered {status}: {grant}")

    async def granted() -> bool:
        return await observer.status("/pools") == 200

    grant_seconds = await seen(granted, "the grant")
    status, body = await admin.call("DELETE", f"/grants/{grant['id']}")
    if status != 204:
        raise SystemExit(f"FAILED: the revocation answered {status}: {body}")

    async def revoked() -> bool:
        return await observer.status("/pools") == 403

    return grant_seconds, await seen(revoked, "the revocation")


async def request_floor(observer: Caller, count: int = 20) -> float:
    """The median seconds of one ``GET /pools`` on the observer."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await observer.status("/pools")
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def measure(
    side: str, number: int, changes: int, callers: dict[str, Caller], viewer_id: str, marker: str
) -> Run:
    """One run: ``changes`` grant and revoke changes seen from ``side``'s observer."""
    observer = callers["viewer-b"] if side == SIDES[0] else callers["viewer-a"]
    monitor = LoadMonitor(markers=[marker])
    monitor.start()
    grants, revokes = [], []
    for _ in range(changes):
        grant, revoke = await one_change(callers["admin"], observer, viewer_id)
        grants.append(grant)
        revokes.append(revoke)
    request = await request_floor(observer)
    load = monitor.stop()
    return Run(
        side,
        number,
        {
            "grant_median": 1000 * statistics.median(grants),
            "grant_max": 1000 * max(grants),
            "revoke_median": 1000 * statistics.median(revokes),
            "revoke_max": 1000 * max(revokes),
            "request": 1000 * request,
        },
        load,
    )


async def run(args: argparse.Namespace) -> None:
    """Start the two apis, alternate the sides, print the table."""
    servers = ServiceAddresses.from_environ()
    database = await create_test_database(servers.admin_url, DB_PREFIX)
    try:
        connection = await asyncpg.connect(database)
        try:
            await migrate(connection)
        finally:
            await connection.close()
        async with TestIdentityProvider() as idp:
            base = {
                **os.environ,
                "KVSTORE_ADDR": servers.kv_addr,
                "KVSTORE_KEY_PREFIX": f"deskpool-bench-grants-{secrets.token_hex(4)}:",
                "METRICS_ADDR": "",
                "API_RATE_LIMIT_PER_MINUTE": "100000000",
            }
            env = deployment_environ(base, database, idp, admin=ADMIN)
            apis = {name: listening(["api"], env, "API_ADDR") for name in ("api-a", "api-b")}
            async with running(apis) as processes, aiohttp.ClientSession() as http:
                url = {name: process.url("api") for name, process in processes.items()}
                admin_token, viewer_token = idp.issue_token(ADMIN), idp.issue_token(VIEWER)
                callers = {
                    "admin": Caller(http, url["api-a"], admin_token),
                    "viewer-a": Caller(http, url["api-a"], viewer_token),
                    "viewer-b": Caller(http, url["api-b"], viewer_token),
                }
                status, me = await callers["viewer-a"].call("GET", "/me")
                if status != 200:
                    raise SystemExit(f"FAILED: the viewer's sign-in answered {status}")
                series = Series(
                    f"Grant propagation: {args.changes} grant and revoke changes per run, "
                    "made through api-a",
                    SIDES,
                    FIGURES,
                    keep_starved=args.keep_starved,
                )
                marker = database.rsplit("/", 1)[-1]
                for number in range(1, args.runs + 1):
                    for side in SIDES:
                        measured = await measure(
                            side, number, args.changes, callers, me["id"], marker
                        )
                        print_run(
                            series, measured, lambda line: print(line, file=sys.stderr, flush=True)
                        )
                print()
                print(series.table())
    finally:
        await drop_test_database(servers.admin_url, database)


def main() -> None:
    """Parse the arguments and run."""
    parser = arguments(__doc__, "rounds (both sides once each)")
    parser.add_argument("--changes", type=int, default=20, help="grant and revoke changes per run")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
