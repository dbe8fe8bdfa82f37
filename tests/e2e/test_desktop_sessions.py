"""A user's desktop session end to end, with real ``deskpool run`` processes.

One api process, one worker and two gateway processes share a database of this module's own,
a simulated cluster (its state in Redis) and a desktop daemon simulator (the tests' guacd).
Through the REST API, an administrator connects the cluster and creates a non-persistent pool
that logs its users off as soon as they disconnect, and entitles a user. Then:

1. the user opens a desktop through the API, connects to a gateway with a client speaking
   ``Guacamole.WebSocketTunnel``'s protocol, the gateway shakes hands with the daemon, and
   instructions flow both ways; the session is listed, open, on that gateway; an administrator
   joins it read-only through the other gateway;
2. an administrator disconnects it through the API: the tunnel closes (and the read-only view
   with it), the session ends with ``admin_disconnect``, and the desktop is logged off and
   rebuilt before anyone gets it again;
3. the user opens a desktop again and connects through the other gateway, which is then killed
   with SIGKILL: the session ends as ``gateway_lost`` within the lease, the desktop stays the
   user's (an end the user did not cause never logs off at once), and the user reconnects to
   the same desktop through the surviving gateway.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import pytest
from tests.secret_leak_guard import LeakGuard
from tests.support.e2e import (
    DeploymentEnviron,
)

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.processes import (
    ANY_PORT,
    DeskpoolProcess,
    listening,
    running,
    until,
)
from deskpool.testing.tunnels import TunnelClosed, WebSocketTunnelClient

ADMIN = "e2e-session-admin"
USER = "e2e-session-user"
LEASE_SECONDS = 3
PUBLIC_URL = "wss://desktops.e2e.test/websocket-tunnel"

#: Fast simulated phases: a rebuilt desktop is ready again within a second.
SIMULATOR_OPTIONS = {
    "clone_seconds": 0.05,
    "boot_seconds": 0.05,
    "agent_seconds": 0.05,
    "oobe_seconds": 0.05,
    "shutdown_seconds": 0.05,
}

pytestmark = pytest.mark.slow


@pytest.fixture
def environ(
    quick_deployment: DeploymentEnviron,
    desktop_daemon: DesktopDaemonSimulator,
    leak_guard: LeakGuard,
) -> dict[str, str]:
    """The environment every process shares."""
    return quick_deployment(
        ADMIN,
        API_ADDR=ANY_PORT,
        SECRETS_MASTER_KEY=leak_guard.master_key(),
        GATEWAY_PUBLIC_WS_URL=PUBLIC_URL,
        DESKTOPD_ADDRESS=desktop_daemon.address,
        GATEWAY_LEASE_DURATION=f"{LEASE_SECONDS}s",
        WORKER_LEASE_DURATION="5s",
    )


@pytest.fixture
async def processes(environ: dict[str, str]) -> AsyncIterator[dict[str, DeskpoolProcess]]:
    """The api, a worker and two gateways, each on its own port."""
    started = {
        "api": DeskpoolProcess(["api"], environ),
        "worker": DeskpoolProcess(["worker"], environ),
        "gateway-a": listening(["gateway"], environ, "GATEWAY_ADDR"),
        "gateway-b": listening(["gateway"], environ, "GATEWAY_ADDR"),
    }
    async with running(started, one_by_one=True) as processes:
        yield processes


def tunnel_url(process: DeskpoolProcess) -> str:
    """Where a gateway process listens (a load balancer would stand at ``PUBLIC_URL``)."""
    return f"{process.url('gateway', 'ws')}/websocket-tunnel"


class ApiCaller:
    """Calls the API of a deskpool process with a bearer header; the JSON of a success."""

    def __init__(self, http: aiohttp.ClientSession, api: str) -> None:
        self.http = http
        self.api = api

    async def __call__(self, method: str, path: str, headers: dict[str, str], **kw: Any) -> Any:
        async with self.http.request(
            method, f"{self.api}{path}", headers=headers, **kw
        ) as response:
            body = await response.json()
            assert response.status < 300, (method, path, response.status, body)
            return body


async def entitled_simulator_pool(
    call: ApiCaller, admin: dict[str, str], user_id: str, name: str, **pool: Any
) -> Any:
    """A simulated cluster and an entitled pool on it, both called ``name``: the pool as created.

    The pool's desktops are ``ubuntu-22.04`` clones with ``pool``'s settings; the user
    ``user_id`` is entitled to it.
    """
    cluster = await call(
        "POST",
        "/clusters",
        admin,
        json={
            "name": name,
            "driver": "simulator",
            "endpoint": f"simulator://{name}",
            "options": SIMULATOR_OPTIONS,
        },
    )
    created = await call(
        "POST",
        "/pools",
        admin,
        json={"name": name, "cluster_id": cluster["id"], "template": "ubuntu-22.04", **pool},
    )
    await call(
        "POST",
        f"/pools/{created['id']}/entitlements",
        admin,
        json={"subject_type": "user", "subject_id": user_id},
    )
    return created


async def test_a_desktop_session_from_opening_to_logoff_across_two_gateways(
    processes: dict[str, DeskpoolProcess],
    environ: dict[str, str],
    identity_provider: TestIdentityProvider,
    db: asyncpg.Connection,
) -> None:
    api = f"{processes['api'].url('api')}/api/v1"
    admin = {"Authorization": f"Bearer {identity_provider.issue_token(ADMIN)}"}
    user = {"Authorization": f"Bearer {identity_provider.issue_token(USER)}"}
    async with aiohttp.ClientSession() as http:
        call = ApiCaller(http, api)
        me = await call("GET", "/me", user)
        pool = await entitled_simulator_pool(
            call,
            admin,
            me["id"],
            "e2e-sessions",
            kind="non_persistent",
            os_type="linux",
            min_size=2,
            spare=1,
            max_size=4,
            naming_pattern="sess-{n:02}",
            session_policy={"after_disconnect": "logoff_immediately"},
        )
        pool_id = uuid.UUID(pool["id"])

        async def ready() -> int:
            return int(
                await db.fetchval(
                    "SELECT count(*) FROM desktops WHERE pool_id = $1 AND state = 'ready' "
                    "AND NOT used_since_refresh",
                    pool_id,
                )
            )

        await until(ready, "the pool has a ready desktop")

        async def session_of(desktop_id: str) -> Any:
            page = await call("GET", f"/sessions?desktop_id={desktop_id}&state=open", admin)
            items = page["items"]
            return items[0] if items and items[0]["connected_at"] else None

        # 1. Open, connect through gateway A, instructions both ways.
        opened = await call("POST", f"/me/pools/{pool_id}/desktop", user)
        connection = opened["connection"]
        assert (connection["url"], connection["protocol"]) == (PUBLIC_URL, "vnc")
        gateway_a, gateway_b = processes["gateway-a"], processes["gateway-b"]
        client = await WebSocketTunnelClient.connect(
            http, tunnel_url(gateway_a), {"token": connection["token"]}
        )
        drawn = await client.until("sync", within=20)
        assert client.uuid is not None
        assert any(instruction.opcode in ("img", "png") for instruction in drawn)
        await client.send("mouse", 40, 40, 1)
        await client.send("key", ord("d"), 1)
        await client.send("key", ord("d"), 0)
        await client.until("sync")
        session = await until(lambda: session_of(opened["id"]), "the session is connected")
        assert session["user_id"] == me["id"]
        assert session["pool_id"] == str(pool_id)
        mine = await call("GET", "/me/sessions?state=open", user)
        assert [item["id"] for item in mine["items"]] == [session["id"]]
        row = await db.fetchrow("SELECT * FROM desktops WHERE id = $1::uuid", opened["id"])
        assert (row["state"], row["in_session"]) == ("in_use", True)

        # An administrator watches it read-only, through the other gateway.
        shadow = await call("POST", f"/sessions/{session['id']}/shadow", admin)
        viewer = await WebSocketTunnelClient.connect(
            http, tunnel_url(gateway_b), {"token": shadow["connection"]["token"]}
        )
        watched = await viewer.until("sync", within=20)
        assert any(instruction.opcode in ("img", "png") for instruction in watched)
        views = await call("GET", f"/sessions?desktop_id={opened['id']}&state=open", admin)
        assert {item["read_only"] for item in views["items"]} == {False, True}

        # 2. An administrator disconnects it: closed, logged off, rebuilt; the view closes too.
        await call("POST", f"/sessions/{session['id']}/disconnect", admin)
        closed = await client.closed(within=15)
        assert isinstance(closed, TunnelClosed)
        assert isinstance(await viewer.closed(within=15), TunnelClosed)
        ended = await until(
            lambda: _ended(call, admin, session["id"]), "the disconnected session ended"
        )
        assert ended["end_reason"] == "admin_disconnect"
        assert ended["bytes_to_browser"] > 0

        async def rebuilt() -> bool:
            row = await db.fetchrow("SELECT * FROM desktops WHERE id = $1::uuid", opened["id"])
            return bool(
                row["state"] == "ready"
                and row["assigned_user"] is None
                and not row["used_since_refresh"]
            )

        refreshed = await db.fetchval(
            "SELECT state FROM desktops WHERE id = $1::uuid", opened["id"]
        )
        assert refreshed in ("refreshing", "starting", "waiting_for_agent", "ready")
        await until(rebuilt, "the logged-off desktop is rebuilt")

        # 3. Connect through gateway B, then SIGKILL it mid-session.
        again = await call("POST", f"/me/pools/{pool_id}/desktop", user)
        client = await WebSocketTunnelClient.connect(
            http, tunnel_url(gateway_b), {"token": again["connection"]["token"]}
        )
        await client.until("sync", within=20)
        lost = await until(lambda: session_of(again["id"]), "the session on gateway B")
        assert lost["gateway_id"] != session["gateway_id"]
        gateway_b.kill()
        killed_at = time.monotonic()
        assert isinstance(await client.closed(within=10), TunnelClosed)
        ended = await until(
            lambda: _ended(call, admin, lost["id"]),
            "the lost gateway's session ended",
            seconds=LEASE_SECONDS + 10,
        )
        assert ended["end_reason"] == "gateway_lost"
        # Within the lease plus one session check (and the time to notice), under load.
        waited = time.monotonic() - killed_at
        print(f"session of the SIGKILLed gateway ended {waited:.2f}s after the kill")
        row = await db.fetchrow("SELECT * FROM desktops WHERE id = $1::uuid", again["id"])
        assert (row["state"], str(row["assigned_user"]), row["in_session"]) == (
            "in_use",
            me["id"],
            False,
        )
        # The user comes back, through the surviving gateway, to the same desktop.
        back = await call("POST", f"/me/pools/{pool_id}/desktop", user)
        assert back["id"] == again["id"]
        client = await WebSocketTunnelClient.connect(
            http, tunnel_url(gateway_a), {"token": back["connection"]["token"]}
        )
        await client.until("sync", within=20)
        await client.ws.close()
    for name in ("api", "worker", "gateway-a"):
        assert "Traceback" not in processes[name].output, processes[name].output


async def _ended(call: Any, headers: dict[str, str], session_id: str) -> Any:
    session = await call("GET", f"/sessions/{session_id}", headers)
    return session if session["state"] == "ended" else None
