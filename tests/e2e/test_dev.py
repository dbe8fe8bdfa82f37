"""``deskpool dev``, the quick start: everything in one process with a development sign-in."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
from tests.support.e2e import (
    dev_process_environ,
)
from tests.support.paths import REPO

from deskpool.guacamole.handshake import ClientInfo, perform_handshake
from deskpool.guacamole.stream import InstructionReader
from deskpool.testing.processes import deskpool_command, read_addresses, until, until_ready
from deskpool.testing.tunnels import WebSocketTunnelClient


async def open_when_ready(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str]
) -> dict[str, Any]:
    """Open the desktop once one is ready (the demo cluster takes some seconds to build one).

    The open answers 202 while the pool builds a desktop reserved to the caller (issue 39);
    its connection is then asked for until the desktop is handed over (202, then 200).
    """
    api = url.split("/me/pools/")[0]
    pending: list[str] = []

    async def opened() -> dict[str, Any] | None:
        asked = f"{api}/me/desktops/{pending[0]}/connection" if pending else url
        async with session.post(asked, headers=headers) as response:
            body = await response.json()
            if response.status == 200:
                return dict(body)
            if response.status == 202:
                if not pending:
                    pending.append(body["id"])
                return None
            assert response.status == 503, body
            assert body["code"] in ("no_desktop_available", "desktop_unreachable"), body
            return None

    desktop: dict[str, Any] = await until(opened, "a demo desktop opens", 90, every=0.5)
    return desktop


async def test_dev_serves_signs_in_and_seeds_a_simulated_pool(
    deskpool_environ: dict[str, str], module_database_url: str, tmp_path: Path
) -> None:
    addresses_file = tmp_path / "addresses.json"
    # Every listener binds a port the system picks, and the process says which. A database of
    # this module's own: deskpool dev seeds its demo only on a fresh one (the run's shared one
    # holds the pools of the integration tests that ran before).
    env = dev_process_environ(deskpool_environ, addresses_file)
    env["DATABASE_URL"] = module_database_url
    command = [*deskpool_command(), "dev", "--state-dir", str(tmp_path), "--issuer-port", "0"]
    process = await asyncio.create_subprocess_exec(
        *command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    lines: list[str] = []
    assert process.stdout is not None
    stdout = process.stdout

    async def drain() -> None:
        while line := await stdout.readline():
            lines.append(line.decode())

    draining: asyncio.Task[None] | None = None
    try:
        token = None
        while token is None:
            line = (await stdout.readline()).decode()
            assert line, "".join(lines)
            lines.append(line)
            match = re.search(r"Bearer ([\w.-]+)'", line)
            token = match.group(1) if match else None
        draining = asyncio.create_task(drain())

        async def written() -> dict[str, str] | None:
            assert process.returncode is None, "".join(lines)
            return read_addresses(addresses_file)

        bound = await until(written, "deskpool dev wrote the addresses it bound")
        assert set(bound) == {"api", "ops", "gateway", "web", "issuer", "desktopd"}, bound
        api = f"http://{bound['api']}"
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession() as session:
            await until_ready(session, f"http://{bound['ops']}/readyz", "deskpool dev is ready")
            async with session.get(f"{api}/api/v1/me", headers=headers) as me:
                assert me.status == 200
                assert (await me.json())["is_platform_admin"]

            async def demo_pools() -> list[dict[str, Any]]:
                async with session.get(f"{api}/api/v1/pools", headers=headers) as pools:
                    return list((await pools.json())["items"])

            items = await until(demo_pools, "the demo pool is created")
            assert [pool["name"] for pool in items] == ["demo-linux"]
            async with session.get(f"{api}/api/v1/setup", headers=headers) as setup:
                assert (await setup.json())["cluster_connected"]
            # Opening the demo pool's desktop gives a token whose tunnel shows the desktop.
            opened = await open_when_ready(
                session, f"{api}/api/v1/me/pools/{items[0]['id']}/desktop", headers
            )
            connection = opened["connection"]
            assert connection["url"] == f"ws://{bound['gateway']}/websocket-tunnel"
            tunnel = await WebSocketTunnelClient.connect(
                session, connection["url"], {"token": connection["token"]}
            )
            drawn = await tunnel.until("sync", within=20)
            assert any(instruction.opcode in ("img", "png") for instruction in drawn)
            await tunnel.ws.close()
        banner = "".join(lines)
        assert f"running the desktop daemon simulator on {bound['desktopd']}" in banner
        assert f"OIDC issuer  http://{bound['issuer']}" in banner
        host, _, port = bound["desktopd"].rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        handshake = await perform_handshake(
            InstructionReader(reader), writer, "vnc", {"hostname": "vm"}, ClientInfo(), within=5
        )
        assert handshake.connection_id.startswith("$")
        writer.close()
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0, "".join(lines)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        if draining is not None:
            await draining
