"""Fixtures of the end-to-end tests: a deployment's environment, the console's instance.

A deployment's processes run on the module's database; the browser tests' console instance
(:mod:`tests.e2e.console_instance`) on a database of the module's own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.console_instance import Instance, console_instance
from tests.secret_leak_guard import LeakGuard
from tests.support.e2e import PUBLIC_URL, DeploymentEnviron, GatewayDeployment, api_worker_gateway

from deskpool.db import migrate
from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.testing.postgres_server import PrivatePostgres, private_postgres
from deskpool.testing.processes import (
    ANY_PORT,
    QUICK_INTERVALS,
    DeskpoolProcess,
    deployment_environ,
)
from deskpool.testing.pytest_plugin import connected, fresh_database


@pytest.fixture
def quick_deployment(
    deskpool_environ: dict[str, str], module_database_url: str, identity_provider: Any
) -> DeploymentEnviron:
    """``quick_deployment(admin, **settings)``: the environment of a deployment's processes.

    On the module's database, trusting the test issuer, ``admin`` a bootstrap administrator,
    with :data:`~deskpool.testing.processes.QUICK_INTERVALS` and ``settings``.
    """

    def make(admin: str, **settings: str) -> dict[str, str]:
        return deployment_environ(
            deskpool_environ,
            module_database_url,
            identity_provider,
            admin=admin,
            **(QUICK_INTERVALS | settings),
        )

    return make


@pytest.fixture
def gateway_environ(
    quick_deployment: DeploymentEnviron,
    desktop_daemon: DesktopDaemonSimulator,
    leak_guard: LeakGuard,
) -> DeploymentEnviron:
    """``gateway_environ(admin, **settings)``: a :func:`quick_deployment` with a gateway.

    The api on a port it picks, secrets sealed with the leak guard's master key, the gateway
    said to be reached at :data:`~tests.support.e2e.PUBLIC_URL` and showing
    ``desktop_daemon``'s desktops; then ``settings``.
    """

    def make(admin: str, **settings: str) -> dict[str, str]:
        return quick_deployment(
            admin,
            API_ADDR=ANY_PORT,
            SECRETS_MASTER_KEY=leak_guard.master_key(),
            GATEWAY_PUBLIC_WS_URL=PUBLIC_URL,
            DESKTOPD_ADDRESS=desktop_daemon.address,
            **settings,
        )

    return make


@pytest.fixture
def gateway_deployment(gateway_environ: DeploymentEnviron) -> GatewayDeployment:
    """``async with gateway_deployment(admin, database_url=..., **settings) as processes``.

    :func:`~tests.support.e2e.api_worker_gateway` of a :func:`gateway_environ` with ``settings``,
    on ``database_url`` (the module's database when ``None``).
    """

    def deploy(
        admin: str, database_url: str | None = None, **settings: str
    ) -> AbstractAsyncContextManager[dict[str, DeskpoolProcess]]:
        environ = gateway_environ(admin, **settings)
        if database_url is not None:
            environ["DATABASE_URL"] = database_url
        return api_worker_gateway(environ)

    return deploy


@pytest.fixture
async def own_postgres() -> AsyncIterator[PrivatePostgres]:
    """A PostgreSQL server of the test's own (migrated), which the test may stop and start."""
    async with private_postgres() as server:
        async with connected(server.url()) as connection:
            await migrate(connection)
        yield server


@pytest.fixture
def db_url(module_database_url: str) -> str:
    """``db`` connects to the test module's database, where its processes run."""
    return module_database_url


@pytest.fixture(scope="module")
def console_database(test_servers: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A database of the test module's own (named after it), for its console instance."""
    module = request.module.__name__.rpartition(".")[2]
    with fresh_database(test_servers, f"deskpool_{module}") as url:
        yield url


@pytest.fixture
async def instance(
    console_database: str, test_servers: Any, tmp_path: Path
) -> AsyncIterator[Instance]:
    """The console served by ``deskpool run all`` (:func:`console_instance`) on it."""
    async with console_instance(
        console_database, test_servers, tmp_path, DesktopDaemonSimulator()
    ) as running:
        yield running
