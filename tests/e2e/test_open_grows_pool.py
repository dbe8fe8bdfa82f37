"""9 a.m. with nothing ready: 20 users open a pool at once, each is answered 202, none 503.

Real processes (an api, a worker, a gateway) share this module's database and a desktop daemon
simulator. An administrator makes, through the REST API, a pool with no desktop at all
(``min_size`` 0, ``spare`` 0) and a ``max_size`` above the number of users, entitled to a group
bound to an OIDC group claim. Then 20 users, each with a token the API has never seen, open it
at once: each must be answered 202 with a pending connection (a desktop being built, reserved
to them: ``starting.building``), never 503. Each then asks for its connection until the worker
has built the desktop and handed it over (the connection's 202 while it is built, then 200),
redeems the token at the gateway and waits for the desktop daemon's first image. The database
must show 20 desktops, each one user's, each user's session on their own.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import asyncpg
import pytest
from tests.secret_leak_guard import LeakGuard
from tests.support.e2e import DeploymentEnviron, api_worker_gateway

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.processes import ANY_PORT, DeskpoolProcess
from deskpool.testing.storm import CLAIM, SIMULATOR_OPTIONS, Api, new_subjects
from deskpool.testing.tunnels import TunnelClosed, WebSocketTunnelClient

ADMIN = "e2e-grow-admin"
USERS = 20
MAX_SIZE = 30
#: Generous: 20 desktops built by one worker on a machine shared by several engineers.
WITHIN = 240.0

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
        GATEWAY_PUBLIC_WS_URL="wss://desktops.e2e.test/websocket-tunnel",
        DESKTOPD_ADDRESS=desktop_daemon.address,
        API_RATE_LIMIT_PER_MINUTE="100000",
    )


@pytest.fixture
async def processes(environ: dict[str, str]) -> AsyncIterator[dict[str, DeskpoolProcess]]:
    """The api, a worker and a gateway."""
    async with api_worker_gateway(environ) as started:
        yield started


async def empty_pool(http: aiohttp.ClientSession, api_url: str, admin_token: str) -> str:
    """A pool with no desktop, below its maximum, entitled to the group of :data:`CLAIM`."""
    api = Api(http, api_url, admin_token)
    group = await api.call("POST", "/groups", json={"key": "grow", "name": "grow"})
    await api.call(
        "POST", "/oidc-group-bindings", json={"claim_value": CLAIM, "group_id": group["id"]}
    )
    cluster = await api.call(
        "POST",
        "/clusters",
        json={
            "name": "grow",
            "driver": "simulator",
            "endpoint": "simulator://grow",
            "options": SIMULATOR_OPTIONS,
        },
    )
    pool = await api.call(
        "POST",
        "/pools",
        json={
            "name": "grow",
            "cluster_id": cluster["id"],
            "template": "ubuntu-22.04",
            "kind": "non_persistent",
            "os_type": "linux",
            "min_size": 0,
            "spare": 0,
            "max_size": MAX_SIZE,
            "naming_pattern": "grow-{n:03}",
        },
    )
    await api.call(
        "POST",
        f"/pools/{pool['id']}/entitlements",
        json={"subject_type": "group", "subject_id": group["id"]},
    )
    return str(pool["id"])


@dataclass
class Run:
    """What one user was answered, in order, and how far they got."""

    subject: str
    opened: int = 0
    building: bool = False
    desktop_id: str | None = None
    answers: Counter[str] = field(default_factory=Counter)
    first_frame: float | None = None
    failure: str | None = None


async def one_user(
    http: aiohttp.ClientSession,
    api_url: str,
    gateway_url: str,
    pool_id: str,
    subject: str,
    token: str,
    go: asyncio.Event,
    tunnels: list[WebSocketTunnelClient],
) -> Run:
    """Open the pool, wait for the desktop built for the user, then its first image."""
    run = Run(subject)
    api = api_url.rstrip("/") + "/api/v1"
    headers = {"Authorization": f"Bearer {token}"}
    await go.wait()
    started = time.perf_counter()
    try:
        async with asyncio.timeout(WITHIN):
            async with http.post(f"{api}/me/pools/{pool_id}/desktop", headers=headers) as answer:
                body: Any = await answer.json(content_type=None)
                run.opened = answer.status
                run.answers[f"open {answer.status}"] += 1
            if answer.status != 202:
                run.failure = f"open {answer.status} {body.get('detail')}"
                return run
            run.desktop_id = body["id"]
            run.building = bool(body["starting"]["building"])
            while True:
                async with http.post(
                    f"{api}/me/desktops/{run.desktop_id}/connection", headers=headers
                ) as answer:
                    body = await answer.json(content_type=None)
                    run.answers[f"connection {answer.status}"] += 1
                if answer.status == 200:
                    break
                if answer.status != 202:
                    run.failure = f"connection {answer.status} {body.get('detail')}"
                    return run
                await asyncio.sleep(0.25)
            client = await WebSocketTunnelClient.connect(
                http, gateway_url, {"token": body["connection"]["token"]}
            )
            tunnels.append(client)
            await client.tunnel_id(WITHIN)
            while (await client.read(WITHIN)).opcode not in ("img", "png"):
                pass
            run.first_frame = time.perf_counter() - started
    except TunnelClosed as closed:
        run.failure = f"tunnel closed: {closed}"
    except TimeoutError:
        run.failure = f"no first image within {WITHIN} s ({dict(run.answers)})"
    except aiohttp.ClientError as error:
        run.failure = f"{type(error).__name__}: {error}"
    return run


async def test_twenty_users_open_a_pool_with_nothing_ready_and_each_gets_a_desktop_built(
    processes: dict[str, DeskpoolProcess],
    identity_provider: TestIdentityProvider,
    db: asyncpg.Connection,
) -> None:
    api_url = processes["api"].url("api")
    gateway_url = f"{processes['gateway'].url('gateway', 'ws')}/websocket-tunnel"
    async with aiohttp.ClientSession() as http:
        pool_id = await empty_pool(http, api_url, identity_provider.issue_token(ADMIN))
    assert await db.fetchval("SELECT count(*) FROM desktops WHERE pool_id = $1::uuid", pool_id) == 0
    tokens = [
        (subject, identity_provider.issue_token(subject, claims={"groups": [CLAIM]}))
        for subject in new_subjects(USERS)
    ]

    go = asyncio.Event()
    tunnels: list[WebSocketTunnelClient] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        users = [
            asyncio.create_task(
                one_user(http, api_url, gateway_url, pool_id, subject, token, go, tunnels)
            )
            for subject, token in tokens
        ]
        await asyncio.sleep(0)
        go.set()
        runs = await asyncio.gather(*users)
        await asyncio.gather(*(tunnel.ws.close() for tunnel in tunnels), return_exceptions=True)

    answered = Counter(label for run in runs for label in run.answers.elements())
    said = [
        line
        for process in processes.values()
        for line in process.lines
        if '"level": "info"' not in line and " INFO " not in line
    ]
    assert [run.failure for run in runs if run.failure] == [], (answered, said[-15:])
    assert [run.opened for run in runs] == [202] * USERS, answered  # none 503
    assert all(run.building for run in runs)
    assert not any(label.endswith(" 503") for label in answered), answered
    assert all(run.first_frame is not None for run in runs)
    desktops = {run.desktop_id for run in runs}
    assert len(desktops) == USERS  # each their own

    rows = await db.fetch(
        "SELECT id::text, state, assigned_user FROM desktops WHERE pool_id = $1::uuid", pool_id
    )
    assert len(rows) == USERS  # grown by as many as needed, no more
    assert {row["id"] for row in rows} == desktops
    assert {row["state"] for row in rows} == {"in_use"}
    assert len({row["assigned_user"] for row in rows}) == USERS
    sessions = await db.fetch(
        """
        SELECT u.subject, s.desktop_id::text
          FROM desktop_sessions s JOIN users u ON u.id = s.user_id
         WHERE s.desktop_id = ANY($1::uuid[])
        """,
        list(desktops),
    )
    by_user = {run.subject: run.desktop_id for run in runs}
    assert {(row["subject"], row["desktop_id"]) for row in sessions} == set(by_user.items())
