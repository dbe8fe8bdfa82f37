"""Authenticated ``GET /api/v1/me`` next to a bare aiohttp JSON handler, in the same run.

Both servers run as one process each on loopback; wrk (Debian's ``wrk`` package) drives them in
turn with the same connections and duration. The figure is the ratio of deskpool's requests per
second to the bare handler's, with the token cache warm (the first request signs the user in).

Run from the repository root, with PostgreSQL and Redis up::

    .venv/bin/python bench/auth_me.py [--seconds 5] [--connections 32] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.services import (
    ServiceAddresses,
    create_test_database,
    drop_test_database,
)

REPO = Path(__file__).resolve().parent.parent

BARE_SERVER = """
import sys
from aiohttp import web

async def handler(request):
    return web.json_response({"id": "00000000-0000-0000-0000-000000000000", "ok": True})

app = web.Application()
app.router.add_get("/api/v1/me", handler)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(url: str, headers: dict[str, str] | None = None, timeout: float = 30) -> None:
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


def wrk(url: str, token: str | None, seconds: int, connections: int) -> float:
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", url]
    if token:
        command[1:1] = ["-H", f"Authorization: Bearer {token}"]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if non_2xx:
        raise SystemExit(f"{url}: {non_2xx.group(1)} error responses during the run")
    match = re.search(r"Requests/sec:\s+([\d.]+)", output)
    assert match, output
    return float(match.group(1))


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    servers = ServiceAddresses.from_environ()
    database = asyncio.run(create_test_database(servers.admin_url, "deskpool_bench"))
    bare_port, api_port = free_port(), free_port()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        with IssuerThread() as idp:
            env = {
                **os.environ,
                "DATABASE_URL": database,
                "KVSTORE_ADDR": servers.kv_addr,
                "KVSTORE_KEY_PREFIX": "deskpool-bench:",
                "API_ADDR": f"127.0.0.1:{api_port}",
                "METRICS_ADDR": "",
                "LOG_LEVEL": "warn",
                "APP_ENV": "bench",
                "AUTH_OIDC_ISSUER_URL": idp.issuer_url,
                "AUTH_OIDC_AUDIENCE": idp.audience,
                "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": "bench-user",
                "API_RATE_LIMIT_PER_MINUTE": "100000000",
            }
            deskpool = [sys.executable, "-m", "deskpool"]
            subprocess.run([*deskpool, "migrate"], env=env, check=True, capture_output=True)
            processes.append(subprocess.Popen([sys.executable, "-c", BARE_SERVER, str(bare_port)]))
            processes.append(subprocess.Popen([*deskpool, "run", "api"], env=env, cwd=REPO))
            token = idp.issue_token("bench-user", expires_in=3600, email="bench@example.com")
            bare_url = f"http://127.0.0.1:{bare_port}/api/v1/me"
            api_url = f"http://127.0.0.1:{api_port}/api/v1/me"
            wait_for(bare_url)
            wait_for(api_url, {"Authorization": f"Bearer {token}"})
            print(f"wrk: 1 thread, {args.connections} connections, {args.seconds}s per run")
            ratios = []
            for round_number in range(1, args.rounds + 1):
                bare = wrk(bare_url, None, args.seconds, args.connections)
                api = wrk(api_url, token, args.seconds, args.connections)
                ratios.append(api / bare)
                print(
                    f"round {round_number}: bare aiohttp {bare:9.0f} req/s   "
                    f"deskpool GET /api/v1/me {api:9.0f} req/s   ratio {api / bare:.2f}"
                )
            print(f"ratio (mean of {args.rounds} rounds): {sum(ratios) / len(ratios):.2f}")
    finally:
        for process in processes:
            process.terminate()
            process.wait(10)
        asyncio.run(drop_test_database(servers.admin_url, database))


if __name__ == "__main__":
    main()
