"""Brokering through a PostgreSQL outage: desktops handed out from Redis, journaled, replayed.

One api process, one worker and one gateway run on a PostgreSQL of this test's own (never the
shared one) with the shared Redis. A pool of 22 desktops is entitled to a group; 21 users of
the group signed in before (one of them, the *holder*, holds a desktop he disconnected from),
a 22nd member was disabled, and an outsider never signed in. Once the worker's snapshot in
Redis shows the pool (:func:`deskpool.outage_brokering.snapshot.read_status`), PostgreSQL is
stopped, and at once:

- the holder reconnects to his desktop and 20 other users each open the pool: each gets a
  connection token, and the gateway opens the tunnel and the desktop draws, all within 5 s of
  the stop; the 21 desktops are all different (the holder's is his own);
- the disabled member and the outsider (a first sign-in) are refused; administration answers
  503 naming the database.

PostgreSQL is started again; the journal is replayed into it. Then the database shows, once
each: the 21 sessions (under the ids the gateway gave the tunnels), their 21 logons, the
``session.start`` of each and the ``desktop.allocate`` of the 20 desktops handed out; every
desktop is ``in_use`` by the user who got it, no desktop by two users. The tunnels still flow.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import pytest
from redis.asyncio import Redis
from tests.e2e.deployment_api import Api
from tests.support.e2e import GatewayDeployment
from tests.support.tunnel_flow import Flow

from deskpool.outage_brokering.snapshot import read_status
from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.postgres_server import PrivatePostgres
from deskpool.testing.processes import DeskpoolProcess, until
from deskpool.testing.tunnels import WebSocketTunnelClient

ADMIN = "e2e-broker-admin"
HOLDER = "e2e-broker-holder"
USERS = [f"e2e-broker-user-{n:02}" for n in range(20)]
DISABLED = "e2e-broker-disabled"
STRANGER = "e2e-broker-stranger"
POOL_SIZE = 22
#: Every user has his desktop drawing within this many seconds of the stop.
SERVED_WITHIN = 5.0


@pytest.fixture
async def processes(
    gateway_deployment: GatewayDeployment, own_postgres: PrivatePostgres
) -> AsyncIterator[dict[str, DeskpoolProcess]]:
    """The api, a worker and a gateway, each its own process, on the test's own PostgreSQL."""
    deploying = gateway_deployment(ADMIN, own_postgres.url(), OUTAGE_SNAPSHOT_INTERVAL="1s")
    async with deploying as processes:
        yield processes


async def _tunnel(http: aiohttp.ClientSession, url: str, opened: Any) -> WebSocketTunnelClient:
    """The tunnel of an opened desktop, once the desktop drew its first frame."""
    client = await WebSocketTunnelClient.connect(
        http, url, {"token": opened["connection"]["token"]}
    )
    await client.until("sync", within=10)
    return client


async def test_a_database_outage_brokers_from_redis_and_replays_every_act_once(
    processes: dict[str, DeskpoolProcess],
    identity_provider: TestIdentityProvider,
    own_postgres: PrivatePostgres,
    deskpool_environ: dict[str, str],
) -> None:
    tunnel_url = f"{processes['gateway'].url('gateway', 'ws')}/websocket-tunnel"
    kv = Redis.from_url(f"redis://{deskpool_environ.get('KVSTORE_ADDR', '127.0.0.1:6379')}")
    prefix = deskpool_environ["KVSTORE_KEY_PREFIX"]
    db = await asyncpg.connect(own_postgres.url())
    flows: list[Flow] = []
    try:
        async with aiohttp.ClientSession() as http:
            admin = Api(http, processes["api"], identity_provider.issue_token(ADMIN))
            callers = {
                name: Api(http, processes["api"], identity_provider.issue_token(name))
                for name in [HOLDER, *USERS, DISABLED]
            }
            ids = {name: (await caller("GET", "/me"))["id"] for name, caller in callers.items()}
            group = await admin(
                "POST", "/groups", json={"key": "e2e-broker", "name": "Outage brokering"}
            )
            for user_id in ids.values():
                await admin("PUT", f"/groups/{group['id']}/members/{user_id}")
            cluster = await admin.simulated_cluster("e2e-broker")
            pool = await admin(
                "POST",
                "/pools",
                json={
                    "name": "e2e-broker",
                    "cluster_id": cluster["id"],
                    "template": "ubuntu-22.04",
                    "kind": "non_persistent",
                    "os_type": "linux",
                    "min_size": POOL_SIZE,
                    "max_size": POOL_SIZE,
                    "naming_pattern": "brk-{n:02}",
                    "session_policy": {"after_disconnect": "never"},
                },
            )
            pool_id = pool["id"]
            entitle = {"subject_type": "group", "subject_id": group["id"]}
            await admin("POST", f"/pools/{pool_id}/entitlements", json=entitle)

            async def ready() -> bool:
                count = await db.fetchval(
                    "SELECT count(*) FROM desktops WHERE pool_id = $1 AND state = 'ready'",
                    uuid.UUID(pool_id),
                )
                return bool(count == POOL_SIZE)

            await until(ready, "the pool's desktops are ready", seconds=120, every=0.5)
            # The holder works in a desktop, then closes his tunnel: it stays his (``never``).
            held = await callers[HOLDER]("POST", f"/me/pools/{pool_id}/desktop")
            held_id = held["id"]
            first = await _tunnel(http, tunnel_url, held)
            await first.ws.close()
            await admin("PATCH", f"/users/{ids[DISABLED]}", json={"disabled": True})

            async def snapshot_shows_the_pool() -> bool:
                status = await read_status(kv, prefix)
                return (
                    status.ready.get(pool_id, 0) == POOL_SIZE - 1
                    and status.holders.get(held_id) == ids[HOLDER]
                    and status.fresh
                )

            await until(snapshot_shows_the_pool, "the snapshot shows the pool", seconds=30)
            await db.close()

            await own_postgres.stop()
            stopped_at = time.monotonic()

            timings: dict[str, tuple[float, float]] = {}

            async def served_to(name: str, path: str) -> tuple[str, Any, WebSocketTunnelClient]:
                opened = await callers[name]("POST", path)
                issued = time.monotonic() - stopped_at
                client = await _tunnel(http, tunnel_url, opened)
                timings[name] = (round(issued, 2), round(time.monotonic() - stopped_at, 2))
                return name, opened, client

            def reconnect() -> Any:
                return served_to(HOLDER, f"/me/desktops/{held_id}/connection")

            def open_pool(name: str) -> Any:
                return served_to(name, f"/me/pools/{pool_id}/desktop")

            served = await asyncio.gather(reconnect(), *(open_pool(name) for name in USERS))
            served_in = time.monotonic() - stopped_at
            flows = [Flow(client) for _, _, client in served]
            assert served_in < SERVED_WITHIN, (served_in, timings)
            desktops = {name: opened["id"] for name, opened, _ in served}
            assert desktops[HOLDER] == held_id
            assert len(set(desktops.values())) == len(served) == 21, desktops
            sessions = {name: uuid.UUID(str(client.uuid)) for name, _, client in served}

            # What cannot be made safe is refused; administration says why.
            status, body = await callers[DISABLED].status("POST", f"/me/pools/{pool_id}/desktop")
            assert status == 403, (status, body)
            stranger = Api(http, processes["api"], identity_provider.issue_token(STRANGER))
            status, body = await stranger.status("POST", f"/me/pools/{pool_id}/desktop")
            assert status == 503, (status, body)
            assert "sign-in" in body["detail"], body
            status, body = await admin.status("PATCH", f"/pools/{pool_id}", json={"min_size": 1})
            assert status == 503, (status, body)
            assert "database" in body["detail"], body

            await own_postgres.start()
            db = await asyncpg.connect(own_postgres.url())

            async def replayed() -> bool:
                count = await db.fetchval(
                    "SELECT count(*) FROM desktop_sessions WHERE id = ANY($1::uuid[])",
                    list(sessions.values()),
                )
                return bool(count == len(sessions))

            await until(replayed, "the outage's sessions are in the database", seconds=30)
            # Replays that come later (every snapshot interval) change nothing.
            await asyncio.sleep(5)
            for name, session_id in sessions.items():
                row = await db.fetchrow(
                    "SELECT user_id, desktop_id, ended_at FROM desktop_sessions WHERE id = $1",
                    session_id,
                )
                assert row is not None
                assert (str(row["user_id"]), str(row["desktop_id"]), row["ended_at"]) == (
                    ids[name],
                    desktops[name],
                    None,
                ), name
                logons = await db.fetchval(
                    "SELECT count(*) FROM logons WHERE session_id = $1 AND user_id = $2",
                    session_id,
                    uuid.UUID(ids[name]),
                )
                assert logons == 1, (name, logons)
                starts = await db.fetchval(
                    "SELECT count(*) FROM audit_events"
                    " WHERE action = 'session.start' AND resource_id = $1",
                    str(session_id),
                )
                assert starts == 1, (name, starts)
            allocations = await db.fetch(
                "SELECT resource_id, details->>'user_id' AS user_id FROM audit_events"
                " WHERE action = 'desktop.allocate' AND details ? 'journal_entry'"
            )
            assert sorted((row["resource_id"], row["user_id"]) for row in allocations) == sorted(
                (desktops[name], ids[name]) for name in USERS
            )
            # The disabled member's refused call, recorded from the journal.
            denials = await db.fetchval(
                "SELECT count(*) FROM audit_events WHERE action = 'auth.denied'"
                " AND details ? 'journal_entry' AND details->>'status' = '403'"
            )
            assert denials == 1, denials
            holders = await db.fetch(
                "SELECT id, assigned_user, state FROM desktops WHERE pool_id = $1",
                uuid.UUID(pool_id),
            )
            by_id = {str(row["id"]): row for row in holders}
            for name, desktop_id in desktops.items():
                assert str(by_id[desktop_id]["assigned_user"]) == ids[name], name
                assert by_id[desktop_id]["state"] == "in_use", name
            assigned = [str(row["assigned_user"]) for row in holders if row["assigned_user"]]
            assert len(assigned) == len(set(assigned)) == 21, assigned
            since = time.monotonic()
            await asyncio.sleep(3)
            for flow in flows:
                assert flow.closed is None, (flow.closed, processes["gateway"].output[-3000:])
                assert flow.frames_since(since) > 0, "a tunnel stopped drawing"
    finally:
        for flow in flows:
            await flow.stop()
            await flow.client.ws.close()
        await db.close()
        await kv.aclose()
    for name in ("api", "gateway"):
        assert "Traceback" not in processes[name].output, processes[name].output[-3000:]
    assert "outage snapshot failed" not in processes["worker"].output
