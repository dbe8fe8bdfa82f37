"""The 9 a.m. login storm at a small scale (issue 27): correctness, not speed.

Real processes (an api, a worker, a gateway) share this module's database and a desktop daemon
simulator. An administrator makes pools holding 50 ready desktops, entitled to a group bound
to an OIDC group claim. Then 50 users, each with a token the API has never seen, go at once:
each lists their pools, opens a desktop, redeems the connection token at the gateway and waits
for the first image. The database must show that every user got exactly one desktop and no
desktop went to two users, and no answer may be a 5xx. Nothing here is timed: the figures are
``bench/login_storm.py``'s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import asyncpg
import pytest
from tests.secret_leak_guard import LeakGuard
from tests.support.e2e import DeploymentEnviron, api_worker_gateway

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.processes import ANY_PORT, DeskpoolProcess
from deskpool.testing.storm import CLAIM, check_allocations, new_subjects, prepare, storm

ADMIN = "e2e-storm-admin"
USERS = 50

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


async def test_fifty_new_users_at_once_each_get_one_desktop_and_a_first_image(
    processes: dict[str, DeskpoolProcess],
    identity_provider: TestIdentityProvider,
    db: asyncpg.Connection,
) -> None:
    api = processes["api"].url("api")
    async with aiohttp.ClientSession() as http:
        prepared = await prepare(
            http, api, identity_provider.issue_token(ADMIN), db, desktops=USERS, per_pool=25
        )
    assert len(prepared.pool_ids) == 2
    tokens = [
        (subject, identity_provider.issue_token(subject, claims={"groups": [CLAIM]}))
        for subject in new_subjects(USERS)
    ]
    unseen = await db.fetchval(
        "SELECT count(*) FROM users WHERE subject = ANY($1::text[])", [s for s, _ in tokens]
    )
    assert unseen == 0

    result = await storm(
        [api], [f"{processes['gateway'].url('gateway', 'ws')}/websocket-tunnel"], tokens
    )

    assert result.failures() == {}, [user for user in result.users if user.failure][:3]
    assert result.served == USERS
    said = [
        line
        for process in processes.values()
        for line in process.lines
        if '"level": "info"' not in line and " INFO " not in line
    ]
    assert result.server_errors() == {}, said[-10:]
    check = await check_allocations(db, identity_provider.issuer_url, result)
    assert check.sound, check
    assert len({user.desktop_id for user in result.users}) == USERS
