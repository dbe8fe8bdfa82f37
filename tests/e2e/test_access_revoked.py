"""A user disabled mid-session loses his desktop at once, with real ``deskpool run`` processes.

One api process, one worker and one gateway share a database of this module's own, a simulated
cluster and a desktop daemon simulator. An administrator creates a non-persistent pool through
the API and entitles a user, who opens a desktop, connects through the gateway and follows the
live event stream. The administrator disables him (``PATCH /api/v1/users/{id}``): his tunnel
closes within 10 seconds with ``CLIENT_FORBIDDEN``, the session ends with ``access_revoked``,
his event stream closes, his token cannot be used again and his API calls are refused, and the
desktop he held is rebuilt before anyone else gets it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import pytest
from tests.e2e.deployment_api import Api
from tests.support.e2e import GatewayDeployment

from deskpool.guacamole import Status
from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.processes import DeskpoolProcess, until
from deskpool.testing.tunnels import WebSocketTunnelClient

ADMIN = "e2e-revoke-admin"
USER = "e2e-revoke-user"

pytestmark = pytest.mark.slow


@pytest.fixture
async def processes(
    gateway_deployment: GatewayDeployment,
) -> AsyncIterator[dict[str, DeskpoolProcess]]:
    """The api, a worker and a gateway, each its own process."""
    async with gateway_deployment(ADMIN) as processes:
        yield processes


async def test_a_user_disabled_mid_session_loses_his_tunnel_within_ten_seconds(
    processes: dict[str, DeskpoolProcess],
    identity_provider: TestIdentityProvider,
    db: asyncpg.Connection,
) -> None:
    tunnel_url = f"{processes['gateway'].url('gateway', 'ws')}/websocket-tunnel"
    async with aiohttp.ClientSession() as http:
        admin = Api(http, processes["api"], identity_provider.issue_token(ADMIN))
        user = Api(http, processes["api"], identity_provider.issue_token(USER))
        me = await user("GET", "/me")
        cluster = await admin.simulated_cluster("e2e-revoke")
        pool = await admin(
            "POST",
            "/pools",
            json={
                "name": "e2e-revoke",
                "cluster_id": cluster["id"],
                "template": "ubuntu-22.04",
                "kind": "non_persistent",
                "os_type": "linux",
                "min_size": 1,
                "max_size": 2,
                "naming_pattern": "rev-{n:02}",
                # Alone, this policy would keep the user logged on after a disconnect.
                "session_policy": {"after_disconnect": "never"},
            },
        )
        pool_id = uuid.UUID(pool["id"])
        entitle = {"subject_type": "user", "subject_id": me["id"]}
        await admin("POST", f"/pools/{pool_id}/entitlements", json=entitle)

        async def ready() -> int:
            return int(
                await db.fetchval(
                    "SELECT count(*) FROM desktops WHERE pool_id = $1 AND state = 'ready'",
                    pool_id,
                )
            )

        await until(ready, "the pool has a ready desktop")
        opened = await user("POST", f"/me/pools/{pool_id}/desktop")
        token = opened["connection"]["token"]
        client = await WebSocketTunnelClient.connect(http, tunnel_url, {"token": token})
        await client.until("sync", within=20)
        assert client.uuid is not None
        events = await http.get(f"{user.base}/events", headers=user.headers)
        assert events.status == 200

        await admin("PATCH", f"/users/{me['id']}", json={"disabled": True})
        # Read from the socket until it closes: within 10 s, with a status of its own.
        closed = await client.closed(within=10)
        assert closed.status == Status.CLIENT_FORBIDDEN
        # The event stream closes too (it sent nothing of the user's since).
        rest = await asyncio.wait_for(events.content.read(), 10)
        assert rest.endswith(b": account disabled\n\n")

        async def ended() -> Any:
            session = await admin("GET", f"/sessions/{client.uuid}")
            return session if session["state"] == "ended" else None

        session = await until(ended, "the disabled user's session ended")
        assert session["end_reason"] == "access_revoked"
        # His token is spent and he cannot ask for another.
        replay = await WebSocketTunnelClient.connect(http, tunnel_url, {"token": token})
        assert (await replay.closed(within=10)).status == Status.CLIENT_UNAUTHORIZED
        status, _ = await user.status("POST", f"/me/desktops/{opened['id']}/connection")
        assert status == 403

        async def taken_back() -> bool:
            row = await db.fetchrow("SELECT * FROM desktops WHERE id = $1::uuid", opened["id"])
            return row["assigned_user"] is None and row["state"] != "in_use"

        await until(taken_back, "the disabled user's desktop is taken back to be rebuilt")
    for name in ("api", "worker", "gateway"):
        assert "Traceback" not in processes[name].output, processes[name].output
