"""The real ``deskpool`` command: refusing to start, serving, and draining on SIGTERM."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest

from deskpool.testing.processes import ANY_PORT, DeskpoolProcess, until_ready

TESTPLUGIN = {"deskpool.plugins": {"greeter": "deskpool_testplugin"}}
Run = Callable[..., subprocess.CompletedProcess[str]]


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
async def served(
    deskpool_environ: dict[str, str], plugin_site: Callable[..., Path]
) -> AsyncIterator[DeskpoolProcess]:
    site = plugin_site("deskpool-testplugin", ["deskpool_testplugin"], TESTPLUGIN)
    env = {
        **deskpool_environ,
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(site),
        "API_ADDR": ANY_PORT,
        "METRICS_ADDR": ANY_PORT,
        "API_SHUTDOWN_TIMEOUT": "10s",
        "WORKER_SHUTDOWN_TIMEOUT": "5s",
        "WORKER_POLL_INTERVAL": "1s",
    }
    process = DeskpoolProcess(["api", "worker"], env)
    try:
        yield await process.start()
    finally:
        process.kill()
        if process.process is not None:
            await process.wait()


async def test_api_and_worker_in_one_process_drain_a_request_in_flight_on_sigterm(
    served: DeskpoolProcess,
) -> None:
    process = served
    api = process.url("api")
    async with aiohttp.ClientSession() as session:
        body = await until_ready(
            session,
            f"{process.url('ops')}/readyz",
            f"the process is ready:\n{process.output}",
        )
        assert body["checks"]["components"]["ok"]
        # A plugin's readiness check (its resource acquired in deskpool_startup).
        assert body["checks"]["testplugin"]["ok"]
        async with session.get(f"{api}/openapi.yaml") as document:
            assert document.status == 200
        async with session.get(f"{api}/api/v1/pools") as pools:
            assert pools.status == 503
            assert pools.content_type == "application/problem+json"
        serving = process.watch("testplugin serves a slow request")
        in_flight = asyncio.create_task(session.get(f"{api}/testplugin/slow?seconds=1.5"))
        async with asyncio.timeout(30):
            await serving.wait()  # the request is being served (it sleeps 1.5 s server-side)
        process.signal(signal.SIGTERM)
        response = await in_flight
        assert response.status == 200
        assert (await response.json())["greeting"] == "hello"
    returncode = await process.wait(20)
    output = process.output
    assert returncode == 0, output
    assert "component worker stopped" in output
    assert "component api stopped" in output
    assert "testplugin released its resource" in output  # deskpool_shutdown ran
    assert "Traceback" not in output


async def test_urls_naming_listeners_on_port_0_follow_what_they_bound(
    deskpool_environ: dict[str, str],
) -> None:
    env = {
        **deskpool_environ,
        "PATH": os.environ["PATH"],
        **dict.fromkeys(("API_ADDR", "GATEWAY_ADDR", "WEB_ADDR", "METRICS_ADDR"), ANY_PORT),
        "SECRETS_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
    }
    for unset in ("WEB_PUBLIC_API_BASE_URL", "API_CORS_ALLOWED_ORIGINS", "GATEWAY_PUBLIC_WS_URL"):
        env.pop(unset, None)
    process = DeskpoolProcess(["api", "gateway", "web"], env)
    try:
        await process.start()
        api, web = process.url("api"), process.url("web")
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{web}/config.json") as config:
                assert (await config.json())["apiBaseUrl"] == api
                policy = config.headers["Content-Security-Policy"]
            gateway = process.url("gateway", "ws")
            assert f"; connect-src 'self' {api} {gateway};" in policy, policy
            preflight = {"Origin": web, "Access-Control-Request-Method": "GET"}
            async with session.options(f"{api}/api/v1/pools", headers=preflight) as allowed:
                assert allowed.status == 204
                assert allowed.headers["Access-Control-Allow-Origin"] == web
    finally:
        await process.stop()
