"""Revocation without Redis: a user disabled while Redis is down loses his tunnel within 10 s.

One api process, one worker and one gateway share a database and a Redis of this test's own
(never the shared one). A user opens a desktop and connects through the gateway; Redis is
stopped; an administrator disables the user. The gateway learns of the disconnect request
from the database, on a timer of its own that does not wait on Redis: the tunnel closes with
``CLIENT_FORBIDDEN`` within 10 seconds and the session ends ``access_revoked``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
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
from deskpool.testing.redis_server import PrivateRedis, private_redis
from deskpool.testing.tunnels import WebSocketTunnelClient

ADMIN = "e2e-noredis-admin"
USER = "e2e-noredis-user"

pytestmark = pytest.mark.slow


@pytest.fixture
async def own_redis() -> AsyncIterator[PrivateRedis]:
    async with private_redis() as server:
        yield server


@pytest.fixture
async def processes(
    gateway_deployment: GatewayDeployment, own_redis: PrivateRedis
) -> AsyncIterator[dict[str, DeskpoolProcess]]:
    """The api, a worker and a gateway, each its own process, on the test's own Redis."""
    async with gateway_deployment(ADMIN, KVSTORE_ADDR=own_redis.address) as processes:
        yield processes


async def test_a_user_disabled_while_redis_is_down_loses_his_tunnel_within_ten_seconds(
    processes: dict[str, DeskpoolProcess],
    identity_provider: TestIdentityProvider,
    db: asyncpg.Connection,
    own_redis: PrivateRedis,
) -> None:
    tunnel_url = f"{processes['gateway'].url('gateway', 'ws')}/websocket-tunnel"
    async with aiohttp.ClientSession() as http:
        admin = Api(http, processes["api"], identity_provider.issue_token(ADMIN))
        user = Api(http, processes["api"], identity_provider.issue_token(USER))
        me = await user("GET", "/me")
        cluster = await admin.simulated_cluster("e2e-noredis")
        pool = await admin(
            "POST",
            "/pools",
            json={
                "name": "e2e-noredis",
                "cluster_id": cluster["id"],
                "template": "ubuntu-22.04",
                "kind": "non_persistent",
                "os_type": "linux",
                "min_size": 1,
                "max_size": 2,
                "naming_pattern": "nor-{n:02}",
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
        client = await WebSocketTunnelClient.connect(
            http, tunnel_url, {"token": opened["connection"]["token"]}
        )
        await client.until("sync", within=20)
        session_id = client.uuid
        assert session_id is not None

        keep_alive = asyncio.create_task(_keep_alive(client))
        await own_redis.stop()
        # Let every process notice (its subscriptions drop and retry) before the change.
        await asyncio.sleep(2)

        status, _ = await admin.status("PATCH", f"/users/{me['id']}", json={"disabled": True})
        assert status == 200
        disabled_at = time.monotonic()
        closed = await client.closed(within=10)
        assert closed.status == Status.CLIENT_FORBIDDEN, processes["gateway"].output[-2000:]
        assert time.monotonic() - disabled_at < 10
        keep_alive.cancel()

        async def ended() -> Any:
            return await db.fetchval(
                "SELECT end_reason FROM desktop_sessions WHERE id = $1 AND ended_at IS NOT NULL",
                uuid.UUID(session_id),
            )

        assert await until(ended, "the session ended", seconds=15) == "access_revoked"
    # (The worker's jobs on the simulated cluster fail while Redis is down, with their
    # tracebacks: the simulator keeps its state in Redis.)
    for name in ("api", "gateway"):
        assert "Traceback" not in processes[name].output, processes[name].output


async def _keep_alive(client: WebSocketTunnelClient) -> None:
    """What a browser sends while it shows the desktop: pings and ``nop`` every second."""
    with contextlib.suppress(Exception):
        while True:
            await client.ping(int(time.time() * 1000))
            await client.send("nop")
            await asyncio.sleep(1)
