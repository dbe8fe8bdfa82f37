"""Logon timing: every phase of opening a desktop is recorded, through the real gateway.

A user opens a desktop through the REST API; the token opens a tunnel through a real gateway
component (the platform's broker) to the desktop daemon simulator. The session's record then
gives every phase in order, and each process's metrics count the phases it recorded. A logon
that stops (the daemon cannot be reached, the token expires unused) keeps the phases it reached
and why it stopped.
"""

from __future__ import annotations

import contextlib
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
from prometheus_client import generate_latest
from tests.support.sessions import (
    Estate,
    open_desktop,
)

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.guacamole import Status
from deskpool.provisioning.starts import end_stale_starts
from deskpool.runtime import Runtime
from deskpool.sessions import store_logons
from deskpool.sessions.broker import PlatformSessionBroker
from deskpool.sessions.maintenance import check_sessions
from deskpool.sessions.tunnel import TokenRejected
from deskpool.testing.processes import ANY_PORT, until
from deskpool.testing.pytest_plugin import opened_runtime
from deskpool.testing.tunnels import WebSocketTunnelClient
from deskpool_gateway import GatewayComponent

MakeEstate = Callable[..., Awaitable[Estate]]

API_PHASES = ["asked", "allocated", "guest_ready", "token_issued"]
GATEWAY_PHASES = ["tunnel_opened", "daemon_connected", "first_frame"]


@contextlib.asynccontextmanager
async def gateway_tunnel(
    environ: dict[str, str], daemon: str, opened: dict[str, Any]
) -> AsyncIterator[tuple[Runtime, WebSocketTunnelClient]]:
    """A gateway component in front of the daemon at ``daemon``, and a tunnel to ``opened``."""
    environ = {**environ, "GATEWAY_ADDR": ANY_PORT, "DESKTOPD_ADDRESS": daemon}
    async with opened_runtime(environ, ("gateway",)) as runtime:
        gateway = GatewayComponent(runtime)
        await gateway.start()
        try:
            async with aiohttp.ClientSession() as http:
                yield (
                    runtime,
                    await WebSocketTunnelClient.connect(
                        http,
                        f"ws://{gateway.bound}/tunnel",
                        {"token": opened["connection"]["token"]},
                    ),
                )
        finally:
            await gateway.stop()


def phase_count(runtime: Runtime, phase: str) -> float:
    """The ``deskpool_logon_phase_seconds`` count of ``phase`` in the process's metrics."""
    prefix = f'deskpool_logon_phase_seconds_count{{phase="{phase}"}} '
    for line in generate_latest(runtime.metrics).decode().splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return 0.0


async def _session(client: Any, place: Estate, session_id: str) -> dict[str, Any]:
    got = await client.get(f"/api/v1/sessions/{session_id}", headers=place.admin.headers)
    assert got.status == 200, await got.text()
    return dict(await got.json())


async def test_every_phase_of_a_logon_through_the_gateway_is_recorded(
    client: Any,
    estate: MakeEstate,
    pools_environ: dict[str, str],
    pools_runtime: Runtime,
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    place = await estate()
    opened = await open_desktop(client, place)
    async with gateway_tunnel(pools_environ, desktop_daemon.address, opened) as (runtime, tunnel):
        await tunnel.until("sync")
        session_id = tunnel.uuid
        assert session_id is not None

        async def drawn() -> dict[str, Any] | None:
            record = await _session(client, place, session_id)
            logon = record["logon"]
            return record if logon and logon["outcome"] == "connected" else None

        record = await until(drawn, "the first frame is recorded")
        for phase in GATEWAY_PHASES:
            assert phase_count(runtime, phase) == 1.0, phase
    logon = record["logon"]
    names = [item["phase"] for item in logon["phases"]]
    assert names == API_PHASES + GATEWAY_PHASES
    times = [item["at"] for item in logon["phases"]]
    assert times == sorted(times)
    assert all(item["seconds"] >= 0 for item in logon["phases"])
    assert logon["failure_reason"] is None
    total = sum(item["seconds"] for item in logon["phases"])
    assert abs(logon["duration_seconds"] - total) < 1e-3
    for phase in API_PHASES[1:]:
        assert phase_count(pools_runtime, phase) >= 1.0, phase
    # The session's end after its first frame leaves the logon connected.
    ended = await _session(client, place, record["id"])
    assert ended["state"] == "ended"
    assert ended["logon"]["outcome"] == "connected"


def _closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


async def test_a_logon_that_cannot_reach_the_daemon_keeps_its_phases_and_why(
    client: Any,
    estate: MakeEstate,
    pools_environ: dict[str, str],
) -> None:
    place = await estate()
    opened = await open_desktop(client, place)
    async with gateway_tunnel(pools_environ, _closed_port(), opened) as (_, tunnel):
        assert (await tunnel.closed(within=10)).status == Status.UPSTREAM_NOT_FOUND
    listed = await client.get(
        f"/api/v1/sessions?pool_id={place.pool.id}", headers=place.admin.headers
    )
    (item,) = (await listed.json())["items"]
    logon = (await _session(client, place, item["id"]))["logon"]
    assert logon["outcome"] == "failed"
    assert logon["failure_reason"] == "daemon_error"
    assert [p["phase"] for p in logon["phases"]] == [*API_PHASES, "tunnel_opened"]
    assert logon["failed_at"] >= logon["phases"][-1]["at"]


async def _expire_tokens(runtime: Runtime, desktop_id: str) -> None:
    async with runtime.db.acquire() as db:
        await db.execute(
            "UPDATE connection_tokens SET expires_at = now() - interval '1 second' "
            "WHERE desktop_id = $1::uuid",
            desktop_id,
        )


async def test_a_token_that_expires_unused_or_late_fails_its_logon(
    client: Any,
    estate: MakeEstate,
    broker: PlatformSessionBroker,
    pools_runtime: Runtime,
) -> None:
    place = await estate()
    late = await open_desktop(client, place)
    await _expire_tokens(pools_runtime, late["id"])
    rejected = None
    try:
        await broker.redeem(late["connection"]["token"], gateway_id="gw-1")
    except TokenRejected as error:
        rejected = error.reason
    assert rejected == "expired"
    user = uuid.UUID(place.user.id)
    async with pools_runtime.db.acquire() as db:
        rows = await db.fetch("SELECT id FROM logons WHERE user_id = $1", user)
        (logon,) = [await store_logons.get_logon(db, row["id"]) for row in rows]
    assert logon is not None
    assert (logon.outcome, logon.failure_reason) == ("failed", "token_expired")
    assert (logon.token_issued_at is not None, logon.tunnel_opened_at) == (True, None)

    # A token nobody redeems fails its logon when the worker's session check sees it expired.
    other = await estate()
    unused = await open_desktop(client, other)
    await _expire_tokens(pools_runtime, unused["id"])
    await check_sessions(pools_runtime, sweep_starts=end_stale_starts)
    async with pools_runtime.db.acquire() as db:
        reasons = await db.fetch(
            "SELECT failure_reason FROM logons WHERE user_id = $1::uuid", other.user.id
        )
    assert [row["failure_reason"] for row in reasons] == ["token_expired"]
