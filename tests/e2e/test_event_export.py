"""Events pushed out end to end: a day of deskpool to a webhook receiver and to rsyslog.

Every audit event reaches both, across a killed worker, a failing receiver and a restarted
syslog server.

One api process, one worker and one gateway share a database of this module's own, a simulated
cluster and a desktop daemon simulator. The worker streams the audit trail to an rsyslogd of
the test's own (Debian's, a TCP input on a free port, its file in ``tmp_path``) and sends
webhook deliveries to a receiver in the test that verifies every signature with the
``standardwebhooks`` library. The day, through the REST API and the gateway:

1. an administrator subscribes the receiver to every event (``*``), connects a cluster and
   creates a pool; a user signs in and is entitled; a call with a bad token is refused (a
   failed logon, ``session.failed``); the user opens a desktop and connects through the
   gateway (``session.started``); an administrator disconnects him (``session.ended``);
2. the receiver answers 500 for 30 s; meanwhile the administrator starts an image rollout
   (``rollout.changed``), the worker is killed with SIGKILL and another started, and rsyslog
   is stopped and started again;
3. the receiver answers 200 again, the rollout succeeds.

Then the receiver holds every audit event from the subscription's creation on, with no gap
(each verified, in the order the outbox keeps), and rsyslog's file every audit event of the
day; at most the last batch twice.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from tests.support.e2e import DeploymentEnviron, api_worker_gateway
from tests.support.rsyslog import Rsyslog
from tests.support.webhooks import WebhookReceiver

from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.processes import (
    DeskpoolProcess,
    running,
    until,
)
from deskpool.testing.tunnels import TunnelClosed, WebSocketTunnelClient

ADMIN = "e2e-export-admin"
USER = "e2e-export-user"
FAILING_SECONDS = 30

SIMULATOR_OPTIONS = {
    "clone_seconds": 0.05,
    "boot_seconds": 0.05,
    "agent_seconds": 0.05,
    "oobe_seconds": 0.05,
    "shutdown_seconds": 0.05,
    "templates": [{"name": "ubuntu-22.04"}, {"name": "ubuntu-24.04"}],
}

pytestmark = pytest.mark.slow


@pytest.fixture
def rsyslog(tmp_path: Path) -> Iterator[Rsyslog]:
    """rsyslogd of the test's own, writing every message raw to a file in ``tmp_path``."""
    with Rsyslog(tmp_path) as server:
        yield server


@pytest.fixture
def environ(gateway_environ: DeploymentEnviron, rsyslog: Rsyslog) -> dict[str, str]:
    """The environment every process shares: quick retries, the syslog server."""
    return gateway_environ(
        ADMIN,
        WORKER_LEASE_DURATION="5s",
        WEBHOOK_RETRY_BACKOFF="1s",
        WEBHOOK_RETRY_MAX_BACKOFF="2s",
        SYSLOG_ADDRESS=f"127.0.0.1:{rsyslog.port}",
        SYSLOG_HOSTNAME="e2e-worker",
        SYSLOG_BATCH_SIZE="20",
        SYSLOG_CONFIRM_WAIT="200ms",
    )


@pytest.fixture
async def processes(environ: dict[str, str]) -> AsyncIterator[dict[str, DeskpoolProcess]]:
    """The api, a worker and a gateway."""
    async with api_worker_gateway(environ) as processes:
        yield processes


async def test_a_day_of_events_reaches_the_webhook_and_rsyslog_with_no_gap(
    processes: dict[str, DeskpoolProcess],
    environ: dict[str, str],
    identity_provider: TestIdentityProvider,
    db: asyncpg.Connection,
    rsyslog: Rsyslog,
) -> None:
    api = f"{processes['api'].url('api')}/api/v1"
    admin = {"Authorization": f"Bearer {identity_provider.issue_token(ADMIN)}"}
    user = {"Authorization": f"Bearer {identity_provider.issue_token(USER)}"}
    async with WebhookReceiver() as receiver, aiohttp.ClientSession() as http:

        async def call(method: str, path: str, headers: dict[str, str], **kw: Any) -> Any:
            async with http.request(method, f"{api}{path}", headers=headers, **kw) as response:
                body = await response.json()
                assert response.status < 300, (method, path, response.status, body)
                return body

        # 1. Subscribe, set up, sign in, a failed logon, a session opened and ended.
        hook = await call(
            "POST",
            "/webhooks",
            admin,
            json={"name": "receiver", "url": receiver.url, "event_types": ["*"]},
        )
        receiver.secret = hook["secret"]
        first_id = await db.fetchval(
            "SELECT id FROM audit_events WHERE action = 'webhook.create' AND resource_id = $1",
            hook["id"],
        )
        cluster = await call(
            "POST",
            "/clusters",
            admin,
            json={
                "name": "e2e-export",
                "driver": "simulator",
                "endpoint": "simulator://e2e-export",
                "options": SIMULATOR_OPTIONS,
            },
        )
        pool = await call(
            "POST",
            "/pools",
            admin,
            json={
                "name": "e2e-export",
                "cluster_id": cluster["id"],
                "template": "ubuntu-22.04",
                "kind": "non_persistent",
                "os_type": "linux",
                "min_size": 2,
                "spare": 1,
                "max_size": 3,
                "naming_pattern": "exp-{n:02}",
                "session_policy": {"after_disconnect": "logoff_immediately"},
            },
        )
        pool_id = uuid.UUID(pool["id"])
        me = await call("GET", "/me", user)
        await call(
            "POST",
            f"/pools/{pool_id}/entitlements",
            admin,
            json={"subject_type": "user", "subject_id": me["id"]},
        )
        async with http.get(f"{api}/me", headers={"Authorization": "Bearer forged"}) as refused:
            assert refused.status == 401

        async def ready() -> int:
            return int(
                await db.fetchval(
                    "SELECT count(*) FROM desktops WHERE pool_id = $1 AND state = 'ready' "
                    "AND NOT used_since_refresh",
                    pool_id,
                )
            )

        await until(ready, "the pool has a ready desktop", 60)
        opened = await call("POST", f"/me/pools/{pool_id}/desktop", user)
        gateway = processes["gateway"]
        client = await WebSocketTunnelClient.connect(
            http,
            f"{gateway.url('gateway', 'ws')}/websocket-tunnel",
            {"token": opened["connection"]["token"]},
        )
        await client.until("sync", within=20)

        async def open_session() -> Any:
            page = await call("GET", f"/sessions?desktop_id={opened['id']}&state=open", admin)
            items = page["items"]
            return items[0] if items and items[0]["connected_at"] else None

        session = await until(open_session, "the session is connected", 30, every=0.3)
        await call("POST", f"/sessions/{session['id']}/disconnect", admin)
        assert isinstance(await client.closed(within=15), TunnelClosed)

        # 2. The receiver fails for 30 s; a rollout; the worker killed; rsyslog restarted.
        receiver.status = 500
        failing_from = time.monotonic()
        rollout = await call(
            "POST",
            f"/pools/{pool_id}/rollouts",
            admin,
            json={"template": "ubuntu-24.04", "batch_size": 1, "in_use": "force_logoff"},
        )
        await asyncio.sleep(2)
        processes["worker"].signal(signal.SIGKILL)
        await processes["worker"].wait()
        rsyslog.stop()
        await asyncio.sleep(2)
        async with running({"worker": DeskpoolProcess(["worker"], environ)}):
            rsyslog.start()
            await asyncio.sleep(max(0.0, FAILING_SECONDS - (time.monotonic() - failing_from)))
            failed_attempts = sum(1 for item in receiver.received if item.status == 500)
            receiver.status = 200

            # 3. The rollout succeeds; everything arrives.
            async def succeeded() -> bool:
                shown = await call("GET", f"/pools/{pool_id}/rollouts/{rollout['id']}", admin)
                return bool(shown["state"] == "succeeded")

            await until(succeeded, "the rollout succeeds", 120, every=0.5)

            async def day() -> list[asyncpg.Record]:
                return list(await db.fetch("SELECT id, action FROM audit_events ORDER BY id"))

            async def delivered_all() -> bool:
                expected = {row["id"] for row in await day() if row["id"] >= first_id}
                got = {item.payload["data"]["id"] for item in receiver.delivered}
                return expected <= got

            async def written_all() -> bool:
                return {row["id"] for row in await day()} <= set(rsyslog.event_ids())

            try:
                await until(delivered_all, "the receiver has every event", 120, every=0.3)
            except AssertionError:
                expected = {
                    row["id"]: row["action"] for row in await day() if row["id"] >= first_id
                }
                got = {item.payload["data"]["id"] for item in receiver.delivered}
                missing = {i: a for i, a in expected.items() if i not in got}
                rows = await db.fetch(
                    "SELECT id, audit_event_id, state, attempts, last_error, next_attempt_at, "
                    "tx_id::text FROM webhook_deliveries ORDER BY tx_id, id"
                )
                print("MISSING", missing)
                print("EXTRA", got - set(expected))
                for row in rows:
                    if row["audit_event_id"] in missing or row["state"] != "delivered":
                        print(dict(row))
                print(await db.fetch("SELECT * FROM webhook_subscriptions"))
                print(await db.fetchval("SELECT pg_snapshot_xmin(pg_current_snapshot())::text"))
                raise
            await until(written_all, "rsyslog has every event", 120, every=0.3)

    events = await day()
    expected = [row["id"] for row in events if row["id"] >= first_id]
    delivered = [item.payload["data"]["id"] for item in receiver.delivered]
    assert set(delivered) == set(expected)  # no gap, nothing foreign
    assert receiver.refused == 0  # every request carried a valid signature
    assert failed_attempts > 0  # the 500s were retried
    types = {item.payload["type"] for item in receiver.delivered}
    assert {"session.started", "session.ended", "session.failed", "rollout.changed"} <= types
    assert "audit.user.create" in types  # the user's first sign-in
    pending = await db.fetchval(
        "SELECT count(*) FROM webhook_deliveries WHERE state <> 'delivered'"
    )
    assert pending == 0
    written = Counter(rsyslog.event_ids())
    assert {row["id"] for row in events} <= set(written)
    assert sum(count - 1 for count in written.values()) <= 2 * 20  # a batch, at most twice
    lines = rsyslog.lines()
    assert all(" e2e-worker deskpool - " in line for line in lines)
    print(
        f"{len(expected)} events delivered ({len(receiver.received)} requests, "
        f"{failed_attempts} answered 500), {len(events)} written to rsyslog "
        f"({sum(written.values())} messages)"
    )
