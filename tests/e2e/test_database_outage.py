"""Through a PostgreSQL outage longer than every lease, nothing is taken from a working user.

One api process, one worker and one gateway run on a PostgreSQL of this test's own (never the
shared one), with short leases (the gateway's 6 s, a job's 20 s). A user works in a
non-persistent desktop through the gateway (its pool logs a disconnected user off after 2 s,
and rebuilds the desktop); a second pool is being provisioned on a slow cluster. PostgreSQL
is stopped for 90 s (longer than every lease), then started again; the gateway is held still
(SIGSTOP) across the return until the worker's session check ran (at most 12 s), so the check
reaches the database before the gateway's next heartbeat (what happens when the heartbeat,
every third of a lease, comes second). Afterwards:

- the tunnel kept flowing all along (frames drawn during the outage and after it);
- the session was never ended (no ``session.end`` in the audit, the row still open), the
  desktop is still ``in_use`` by its user, never logged off or rebuilt (its VM is the same);
- the job in flight at the stop finished within a minute of the return.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import pytest
from tests.e2e.deployment_api import FAST_SIMULATOR, Api
from tests.support.e2e import GatewayDeployment
from tests.support.tunnel_flow import Flow

from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.postgres_server import PrivatePostgres
from deskpool.testing.processes import DeskpoolProcess, until
from deskpool.testing.tunnels import WebSocketTunnelClient

ADMIN = "e2e-outage-admin"
USER = "e2e-outage-user"
#: Longer than every lease of the deployment below (the gateway's 6 s, a job's 20 s).
OUTAGE_SECONDS = 90.0
#: How long the gateway may be held still (SIGSTOP) across the return, its heartbeat with it
#: (less than the 15 s after which a silent browser or daemon closes the tunnel).
GATEWAY_HELD_SECONDS = 12.0
#: How long after the return the job in flight at the stop may take to finish.
JOB_FINISHES_WITHIN = 60.0


@pytest.fixture
async def processes(
    gateway_deployment: GatewayDeployment, own_postgres: PrivatePostgres
) -> AsyncIterator[dict[str, DeskpoolProcess]]:
    """The api, a worker and a gateway, each its own process, on the test's own PostgreSQL."""
    deploying = gateway_deployment(
        ADMIN,
        own_postgres.url(),
        GATEWAY_LEASE_DURATION="6s",
        WORKER_LEASE_DURATION="20s",
        SESSION_CHECK_INTERVAL="1s",
    )
    async with deploying as processes:
        yield processes


async def test_a_database_outage_longer_than_every_lease_takes_nothing_from_a_working_user(
    processes: dict[str, DeskpoolProcess],
    identity_provider: TestIdentityProvider,
    own_postgres: PrivatePostgres,
) -> None:
    tunnel_url = f"{processes['gateway'].url('gateway', 'ws')}/websocket-tunnel"
    db = await asyncpg.connect(own_postgres.url())
    try:
        async with aiohttp.ClientSession() as http:
            admin = Api(http, processes["api"], identity_provider.issue_token(ADMIN))
            user = Api(http, processes["api"], identity_provider.issue_token(USER))
            me = await user("GET", "/me")
            cluster = await admin.simulated_cluster("e2e-outage")
            pool = await admin(
                "POST",
                "/pools",
                json={
                    "name": "e2e-outage",
                    "cluster_id": cluster["id"],
                    "template": "ubuntu-22.04",
                    "kind": "non_persistent",
                    "os_type": "linux",
                    "min_size": 1,
                    "max_size": 2,
                    "naming_pattern": "out-{n:02}",
                    "session_policy": {"after_disconnect": "logoff_after_delay", "logoff_delay": 2},
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

            await until(ready, "the pool has a ready desktop", seconds=60)
            opened = await user("POST", f"/me/pools/{pool_id}/desktop")
            client = await WebSocketTunnelClient.connect(
                http, tunnel_url, {"token": opened["connection"]["token"]}
            )
            await client.until("sync", within=20)
            assert client.uuid is not None
            session_id = uuid.UUID(client.uuid)
            flow = Flow(client)
            desktop_before = await _desktop_of(db, session_id)

            # A job in flight at the stop: a second pool's desktop, cloned slowly.
            slow = await admin(
                "POST",
                "/clusters",
                json={
                    "name": "e2e-outage-slow",
                    "driver": "simulator",
                    "endpoint": "simulator://e2e-outage-slow",
                    "options": {**FAST_SIMULATOR, "clone_seconds": 15},
                },
            )
            await admin(
                "POST",
                "/pools",
                json={
                    "name": "e2e-outage-slow",
                    "cluster_id": slow["id"],
                    "template": "ubuntu-22.04",
                    "kind": "non_persistent",
                    "os_type": "linux",
                    "min_size": 1,
                    "max_size": 1,
                    "naming_pattern": "slow-{n:02}",
                },
            )

            async def running_job() -> Any:
                return await db.fetchval(
                    "SELECT id FROM jobs WHERE state = 'running' AND kind LIKE 'desktop.%'"
                )

            job_id = await until(running_job, "a desktop job is running", seconds=30)
            await db.close()

            await own_postgres.stop()
            stopped_at = time.monotonic()
            await asyncio.sleep(OUTAGE_SECONDS)
            assert flow.closed is None, (flow.closed, processes["gateway"].output[-3000:])
            assert flow.frames_since(stopped_at + OUTAGE_SECONDS / 2) > 0, "no frame mid-outage"
            # The worker's session check reaches the database before the gateway's next
            # heartbeat (it may come up to a third of a lease later): the gateway is held still
            # across the return until the check ran (its tunnel is paused, not cut).
            gateway = processes["gateway"].pid
            os.kill(gateway, signal.SIGSTOP)
            try:
                await own_postgres.start()
                returned_at = time.monotonic()
                db = await asyncpg.connect(own_postgres.url())
                await _session_check_ran(db, within=GATEWAY_HELD_SECONDS)
            finally:
                os.kill(gateway, signal.SIGCONT)

            async def job_finished() -> Any:
                return await db.fetchval(
                    "SELECT state FROM jobs WHERE id = $1"
                    " AND state IN ('succeeded', 'dead', 'cancelled')",
                    job_id,
                )

            finished = await until(
                job_finished, "the job in flight finished", seconds=JOB_FINISHES_WITHIN
            )
            assert finished == "succeeded", processes["worker"].output[-3000:]
            assert time.monotonic() - returned_at < JOB_FINISHES_WITHIN
            # Every lease has run out many times over: give the session check, the heartbeats
            # and the logoff delay their chance to take the desktop.
            await asyncio.sleep(15)

            assert flow.closed is None, (flow.closed, processes["gateway"].output[-3000:])
            assert flow.frames_since(returned_at + 10) > 0, "no frame since the return"
            session = await db.fetchrow(
                "SELECT ended_at, end_reason FROM desktop_sessions WHERE id = $1", session_id
            )
            assert session is not None
            assert (session["ended_at"], session["end_reason"]) == (None, None)
            ends = await db.fetch(
                "SELECT details FROM audit_events WHERE action = 'session.end'"
                " AND resource_id = $1",
                str(session_id),
            )
            assert ends == [], ends
            assert await _desktop_of(db, session_id) == desktop_before
            jobs = await db.fetch(
                "SELECT kind, state FROM jobs WHERE payload->>'desktop_id' = $1 ORDER BY id",
                str(desktop_before["id"]),
            )
            assert [job["kind"] for job in jobs] == ["desktop.provision"], jobs
            await flow.stop()
    finally:
        await db.close()
    for name in ("api", "gateway"):
        assert "Traceback" not in processes[name].output, processes[name].output[-3000:]


async def _session_check_ran(db: asyncpg.Connection, *, within: float) -> None:
    """Wait (at most ``within`` seconds) for the worker's session check to finish a run."""
    since = await db.fetchval("SELECT now()")
    finished = "SELECT last_finished_at > $1 FROM periodic_tasks WHERE name = 'session_check'"

    async def ran() -> Any:
        return await db.fetchval(finished, since)

    # Held no longer than ``within``: past it the gateway goes on, the check or not.
    with contextlib.suppress(AssertionError):
        await until(ran, "the session check ran", seconds=within, every=0.2)


async def _desktop_of(db: asyncpg.Connection, session_id: uuid.UUID) -> dict[str, Any]:
    """The state, user, VM and session flag of the desktop of ``session_id``."""
    row = await db.fetchrow(
        "SELECT d.id, d.state, d.assigned_user, d.vm_id, d.in_session"
        "  FROM desktops AS d JOIN desktop_sessions AS s ON s.desktop_id = d.id"
        " WHERE s.id = $1",
        session_id,
    )
    assert row is not None
    desktop = dict(row)
    assert (desktop["state"], desktop["in_session"]) == ("in_use", True), desktop
    return desktop
