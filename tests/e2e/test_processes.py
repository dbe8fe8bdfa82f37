"""The real ``deskpool`` command: refusing to start, serving, and draining on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
from tests.conftest import REPO, deskpool_command

TESTPLUGIN = {"deskpool.plugins": {"greeter": "deskpool_testplugin"}}
Run = Callable[..., subprocess.CompletedProcess[str]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("unset", "named"),
    [("DATABASE_URL", "DATABASE_URL"), ("KVSTORE_ADDR", "KVSTORE_ADDR")],
)
def test_run_refuses_to_start_without_a_required_store(
    deskpool_environ: dict[str, str], run_deskpool: Run, unset: str, named: str
) -> None:
    env = {k: v for k, v in deskpool_environ.items() if k != unset}
    started = time.monotonic()
    result = run_deskpool("run", "api", env=env, timeout=20)
    assert result.returncode != 0
    assert time.monotonic() - started < 15
    assert named in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_run_refuses_to_start_when_the_schema_is_behind(
    deskpool_environ: dict[str, str], run_deskpool: Run, migrated_database_url: str
) -> None:
    env = {
        **deskpool_environ,
        "DATABASE_URL": migrated_database_url.rsplit("/", 1)[0] + "/postgres",
    }
    result = run_deskpool("run", "api", env=env, timeout=20)
    assert result.returncode == 2
    assert "deskpool migrate" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture
def served(
    deskpool_environ: dict[str, str], plugin_site: Callable[..., Path]
) -> Iterator[tuple[subprocess.Popen[str], dict[str, int]]]:
    site = plugin_site("deskpool-testplugin", ["deskpool_testplugin"], TESTPLUGIN)
    ports = {"api": free_port(), "ops": free_port()}
    env = {
        **deskpool_environ,
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(site),
        "API_ADDR": f"127.0.0.1:{ports['api']}",
        "METRICS_ADDR": f"127.0.0.1:{ports['ops']}",
        "API_SHUTDOWN_TIMEOUT": "10s",
        "WORKER_SHUTDOWN_TIMEOUT": "5s",
        "WORKER_POLL_INTERVAL": "1s",
    }
    process = subprocess.Popen(
        [*deskpool_command(), "run", "api", "worker"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield process, ports
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


async def wait_ready(
    session: aiohttp.ClientSession, url: str, process: subprocess.Popen[str]
) -> None:
    for _ in range(200):
        if process.poll() is not None:
            raise AssertionError(f"exited early: {process.stdout.read() if process.stdout else ''}")
        try:
            async with session.get(url) as response:
                if response.status == 200:
                    return
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} never became ready")


async def test_api_and_worker_in_one_process_drain_a_request_in_flight_on_sigterm(
    served: tuple[subprocess.Popen[str], dict[str, int]],
) -> None:
    process, ports = served
    api = f"http://127.0.0.1:{ports['api']}"
    async with aiohttp.ClientSession() as session:
        await wait_ready(session, f"http://127.0.0.1:{ports['ops']}/readyz", process)
        async with session.get(f"http://127.0.0.1:{ports['ops']}/readyz") as ready:
            body = await ready.json()
            assert body["checks"]["components"]["ok"]
        async with session.get(f"{api}/openapi.yaml") as document:
            assert document.status == 200
        async with session.get(f"{api}/api/v1/pools") as pools:
            assert pools.status == 503
            assert pools.content_type == "application/problem+json"

        in_flight = asyncio.create_task(session.get(f"{api}/testplugin/slow?seconds=1.5"))
        await asyncio.sleep(0.5)  # the request is being served (it sleeps 1.5 s server-side)
        process.send_signal(signal.SIGTERM)
        response = await in_flight
        assert response.status == 200
        assert (await response.json())["greeting"] == "hello"
    returncode = await asyncio.to_thread(process.wait, 20)
    output = process.stdout.read() if process.stdout else ""
    assert returncode == 0, output
    assert "component worker stopped" in output
    assert "component api stopped" in output
    assert "Traceback" not in output
