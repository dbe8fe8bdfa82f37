"""A gateway process stops accepting at SIGTERM, drains within its timeout, then closes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import aiohttp
from tests.support.gateway import (
    gateway_environ,
)
from tests.support.paths import REPO

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.guacamole import Status
from deskpool.testing.processes import ANY_PORT
from deskpool.testing.tunnels import WebSocketTunnelClient


async def test_sigterm_drains_open_tunnels_then_closes_them(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    env = {
        **gateway_environ(desktop_daemon.address),
        "GATEWAY_ADDR": ANY_PORT,
        "GATEWAY_SHUTDOWN_TIMEOUT": "2s",
        "PATH": os.environ["PATH"],
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.fixtures.gateway_process",
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        assert line.startswith("ready "), line
        _, token, address = line.split()
        async with aiohttp.ClientSession() as session:
            url = f"ws://{address}/websocket-tunnel"
            client = await WebSocketTunnelClient.connect(session, url, {"token": token})
            await client.until("sync")
            process.send_signal(signal.SIGTERM)
            assert (await process.stdout.readline()).decode().strip() == "stopping"
            started = time.monotonic()
            # The tunnel stays usable while the gateway drains...
            await client.send("key", ord("a"), 1)
            await client.until("sync")
            # ...and new tunnels cannot be opened: the listener is closed.
            try:
                await WebSocketTunnelClient.connect(session, url, {"token": "x"})
            except aiohttp.ClientConnectionError:
                pass
            else:
                raise AssertionError("a draining gateway accepted a new tunnel")
            closed = await client.closed(within=10)
            waited = time.monotonic() - started
        assert closed.status == Status.UPSTREAM_UNAVAILABLE
        assert 1.5 <= waited < 6
        rest = (await asyncio.wait_for(process.stdout.read(), 15)).decode()
        assert "ended gateway_shutdown" in rest
        assert "released 1" in rest
        assert await asyncio.wait_for(process.wait(), 10) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
