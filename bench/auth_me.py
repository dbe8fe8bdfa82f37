"""Authenticated ``GET /api/v1/me`` next to a bare aiohttp JSON handler, in the same run.

Both servers run as one process each on loopback; wrk (Debian's ``wrk`` package, one thread,
64 connections by default) drives them in turn, alternated round after round, with the same
connections and duration. Each run reports requests per second and wrk's latency p50 and p99.

Two comparisons:

1. **one user, one token**: every request carries the same token, so after the first one the
   verified token and the principal come from deskpool's process caches: this figure measures
   a **cache hit** (the warm path: no signature check, no database, no Redis). One request
   before each such run puts the token and principal back in the caches, which the
   many-users runs evict; the hit share is printed.
2. **many users**: ``--users`` tokens of as many distinct users (signed in once beforehand, so
   the users exist), rotated by a wrk Lua script so consecutive requests never repeat a token
   until all were used, each run continuing where deskpool's previous one stopped. With more
   users than the token cache and the principal cache hold (10,000 each), every request
   **misses both**: the signature is verified and the principal
   is loaded from PostgreSQL. The principal cache's hit/miss counters (deskpool's
   ``/metrics``) are read around each run and the hit share is printed. The bare handler gets
   the same script (it ignores the header).

The sign-in of the users beforehand (each user's first request creates it) is timed and
printed too, as information.

Run from the repository root, with PostgreSQL and Redis up::

    .venv/bin/python bench/auth_me.py [--runs 5] [--seconds 5] [--connections 64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
from harness import Figure, LoadMonitor, Run, Series, print_run

from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.processes import ANY_PORT, read_addresses
from deskpool.testing.services import (
    ServiceAddresses,
    create_test_database,
    drop_test_database,
)

REPO = Path(__file__).resolve().parent.parent
#: Marks the benchmark's database (the load monitor counts its backends as ours).
DB_PREFIX = "dpbench_me"

BARE_SERVER = """
import asyncio
from aiohttp import web

async def handler(request):
    return web.json_response({"id": "00000000-0000-0000-0000-000000000000", "ok": True})

async def serve():
    app = web.Application()
    app.router.add_get("/api/v1/me", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    print(f"listening on {runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()

asyncio.run(serve())
"""

#: wrk script rotating over the tokens in a file, one global sequence per wrk thread, starting
#: where the previous run stopped (a run that started over would find the tokens it used last
#: in the caches: they keep the 10,000 most recent).
ROTATE = """
local tokens = {}
for line in io.lines("%s") do tokens[#tokens + 1] = line end
local next_token = %d
request = function()
  next_token = next_token %% #tokens + 1
  return wrk.format("GET", nil, {["Authorization"] = "Bearer " .. tokens[next_token]})
end
"""

CACHE_COUNTER = re.compile(r'deskpool_auth_principal_cache_total\{result="(hit|miss)"\} (\S+)')
UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}
#: Seconds wrk waits for an answer before counting a timeout (its default, 2 s, would drop
#: slow answers from the percentiles).
WRK_TIMEOUT = 10


def listening_port(command: list[str], **popen: Any) -> tuple[subprocess.Popen[str], int]:
    """Start ``command``, a server on a port it picks; it and the port its first line names.

    The server prints ``listening on PORT`` on stdout once it listens.
    """
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, **popen)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("listening on "):
        process.kill()
        raise SystemExit(f"{command[:2]} did not start: {line!r}")
    return process, int(line.rsplit(" ", 1)[1])


def deskpool_api(env: dict[str, str], scratch: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """``deskpool run api`` on ports it picks; it, its API's and its ops listener's URLs."""
    addresses = scratch / "addresses.json"
    env = {
        **env,
        "API_ADDR": ANY_PORT,
        "METRICS_ADDR": ANY_PORT,
        "LISTEN_ADDRESSES_FILE": str(addresses),
    }
    process = subprocess.Popen([sys.executable, "-m", "deskpool", "run", "api"], env=env, cwd=REPO)
    deadline = time.monotonic() + 60
    while (bound := read_addresses(addresses)) is None:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise SystemExit("deskpool run api did not start")
        time.sleep(0.1)
    return process, f"http://{bound['api']}", f"http://{bound['ops']}"


def wait_for(url: str, headers: dict[str, str] | None = None, timeout: float = 30) -> None:
    """Wait until ``url`` answers 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            request = urllib.request.Request(url, headers=headers or {})
            with urllib.request.urlopen(request, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not answer 200 within {timeout}s")


def cache_counts(metrics_url: str) -> dict[str, float]:
    """deskpool's principal cache hits and misses so far."""
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        text = response.read().decode()
    return {name: float(value) for name, value in CACHE_COUNTER.findall(text)}


def milliseconds(text: str) -> float:
    """``1.23ms`` -> 1.23."""
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    assert match, text
    return float(match.group(1)) * UNITS[match.group(2)]


def parse_wrk(output: str, url: str) -> dict[str, float]:
    """Requests per second, latency percentiles and socket errors from wrk's output.

    An error response fails the benchmark; socket errors (timeouts: no answer within
    ``WRK_TIMEOUT``) are counted.
    """
    failed = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if failed:
        raise SystemExit(f"FAILED: {url}: {failed.group(0)}")
    errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    requests = re.search(r"(\d+) requests in", output)
    assert requests, output
    p50 = re.search(r"^\s+50%\s+(\S+)", output, re.MULTILINE)
    p99 = re.search(r"^\s+99%\s+(\S+)", output, re.MULTILINE)
    assert rate, output
    assert p50, output
    assert p99, output
    return {
        "rate": float(rate.group(1)),
        "p50": milliseconds(p50.group(1)),
        "p99": milliseconds(p99.group(1)),
        "errors": sum(int(count) for count in errors.groups()) if errors else 0,
        "requests": int(requests.group(1)),
    }


class IssuerThread:
    """The test identity provider, served from a thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.idp = TestIdentityProvider()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> TestIdentityProvider:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.idp.start(), self.loop).result(10)
        return self.idp

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.idp.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


async def sign_in_all(url: str, tokens: list[str], concurrency: int) -> float:
    """Send each token once (each user's first sign-in); return the seconds it took."""
    queue = list(reversed(tokens))

    async def client(session: aiohttp.ClientSession) -> None:
        while queue:
            token = queue.pop()
            async with session.get(url, headers={"Authorization": f"Bearer {token}"}) as reply:
                if reply.status != 200:
                    raise SystemExit(f"FAILED: first sign-in answered {reply.status}")
                await reply.read()

    started = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    return time.perf_counter() - started


class Bench:
    """Runs wrk against a URL under the load monitor."""

    def __init__(self, args: argparse.Namespace, marker: str, metrics_url: str) -> None:
        self.args = args
        self.marker = marker
        self.metrics_url = metrics_url

    def run(
        self,
        side: str,
        number: int,
        url: str,
        extra: list[str],
        deskpool: bool,
        warm: str | None = None,
    ) -> Run:
        """One wrk run of ``side``, after one request with the token ``warm`` if given.

        The warm-up puts the token and its principal back in the caches (the many-users runs
        evict them), so the whole run measures hits, not 64 connections missing at once.
        """
        args = self.args
        if warm is not None:
            wait_for(url, {"Authorization": f"Bearer {warm}"})
        command = [
            "wrk",
            f"-t{args.threads}",
            f"-c{args.connections}",
            f"-d{args.seconds}s",
            "--latency",
            f"--timeout={WRK_TIMEOUT}s",
            *extra,
            url,
        ]
        before = cache_counts(self.metrics_url) if deskpool else {}
        monitor = LoadMonitor(markers=[self.marker], generator_cores=args.threads)
        monitor.start()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        monitor.generator(process.pid)
        assert process.stdout is not None
        output = process.stdout.read()
        # Wait for wrk to exit without reaping it, so its CPU time is still readable.
        os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
        load = monitor.stop()
        if process.wait() != 0:
            raise SystemExit(f"FAILED: wrk exited with {process.returncode}")
        figures = parse_wrk(output, url)
        if deskpool:
            after = cache_counts(self.metrics_url)
            hits = after.get("hit", 0) - before.get("hit", 0)
            misses = after.get("miss", 0) - before.get("miss", 0)
            figures["hits"] = 100 * hits / max(1.0, hits + misses)
        return Run(side, number, figures, load)


FIGURES = (
    Figure("rate", "requests/s", ratio=True),
    Figure("p50", "latency p50, ms", 2),
    Figure("p99", "latency p99, ms", 2),
    Figure("hits", "principal cache hits, %", 1),
    Figure("errors", f"socket errors (timeouts after {WRK_TIMEOUT} s)"),
)


def main() -> None:
    """Start both servers, sign the users in, run the rounds and print the tables."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds (each side once per round)")
    parser.add_argument("--seconds", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="wrk threads")
    parser.add_argument(
        "--users", type=int, default=12000, help="distinct users and tokens (above 10,000)"
    )
    parser.add_argument("--keep-starved", action="store_true", help="for developing only")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    servers = ServiceAddresses.from_environ()
    database = asyncio.run(create_test_database(servers.admin_url, DB_PREFIX))
    processes: list[subprocess.Popen[Any]] = []
    scratch = Path(tempfile.mkdtemp(prefix="deskpool-bench-me-"))
    try:
        with IssuerThread() as idp:
            env = {
                **os.environ,
                "DATABASE_URL": database,
                "KVSTORE_ADDR": servers.kv_addr,
                "KVSTORE_KEY_PREFIX": "deskpool-bench:",
                "LOG_LEVEL": "warn",
                "APP_ENV": "bench",
                "AUTH_OIDC_ISSUER_URL": idp.issuer_url,
                "AUTH_OIDC_AUDIENCE": idp.audience,
                "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": "bench-user",
                "API_RATE_LIMIT_PER_MINUTE": "100000000",
            }
            deskpool = [sys.executable, "-m", "deskpool"]
            subprocess.run([*deskpool, "migrate"], env=env, check=True, capture_output=True)
            bare, bare_port = listening_port([sys.executable, "-c", BARE_SERVER])
            processes.append(bare)
            api, api_base, ops = deskpool_api(env, scratch)
            processes.append(api)
            token = idp.issue_token("bench-user", expires_in=3600, email="bench@example.com")
            bare_url = f"http://127.0.0.1:{bare_port}/api/v1/me"
            api_url = f"{api_base}/api/v1/me"
            wait_for(bare_url)
            wait_for(api_url, {"Authorization": f"Bearer {token}"})

            started = time.perf_counter()
            tokens = [
                idp.issue_token(f"bench-{n}", expires_in=7200, email=f"bench-{n}@example.com")
                for n in range(args.users)
            ]
            issued = time.perf_counter() - started
            signing = asyncio.run(sign_in_all(api_url, tokens, 32))
            print(
                f"{args.users:,} tokens issued in {issued:.1f}s; first sign-in of "
                f"{args.users:,} users (each creates the user): {args.users / signing:,.0f}/s",
                flush=True,
            )
            (scratch / "tokens").write_text("\n".join(tokens) + "\n")
            rotate = scratch / "rotate.lua"

            bench = Bench(args, database.rsplit("/", 1)[-1], f"{ops}/metrics")
            heading = (
                f"wrk, {args.threads} thread, {args.connections} connections, "
                f"{args.seconds} s per run"
            )
            warm = Series(
                f"GET /api/v1/me, one user, one token: a cache hit ({heading})",
                ["deskpool", "bare aiohttp"],
                FIGURES,
                keep_starved=args.keep_starved,
            )
            cold = Series(
                f"GET /api/v1/me, {args.users:,} users and tokens rotated: every request "
                f"verifies a token and loads a principal ({heading})",
                ["deskpool", "bare aiohttp"],
                FIGURES,
                keep_starved=args.keep_starved,
            )
            header = ["-H", f"Authorization: Bearer {token}"]
            script = ["-s", str(rotate)]
            sent = 0

            def cold_run(side: str, number: int, url: str, deskpool: bool) -> Run:
                nonlocal sent
                rotate.write_text(ROTATE % (scratch / "tokens", sent % args.users))
                run = bench.run(side, number, url, script, deskpool)
                requests = int(run.figures.pop("requests"))
                if deskpool:  # only deskpool's own requests move its caches
                    sent += requests
                return run

            def out(line: str) -> None:
                print(line, file=sys.stderr, flush=True)

            for number in range(1, args.runs + 1):
                print_run(warm, bench.run("deskpool", number, api_url, header, True, token), out)
                print_run(warm, bench.run("bare aiohttp", number, bare_url, header, False), out)
                print_run(cold, cold_run("deskpool", number, api_url, True), out)
                print_run(cold, cold_run("bare aiohttp", number, bare_url, False), out)
            print()
            print(warm.table())
            print()
            print(cold.table())
    finally:
        for process in processes:
            process.terminate()
            process.wait(10)
        shutil.rmtree(scratch, ignore_errors=True)
        asyncio.run(drop_test_database(servers.admin_url, database))


if __name__ == "__main__":
    main()
