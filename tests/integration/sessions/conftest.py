"""Fixtures of the session tests: the pool API fixtures, plus desktops with real simulated VMs.

The API runtime, its client and signed-in callers come from the pool tests' fixtures (the
module's own database with a master key). Unlike there, each desktop here has a VM that exists
on a simulated cluster (cloned, started, its guest agent answering), so opening it asks the
simulator driver where it is shown, as in production.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from tests.integration.pools.conftest import (  # noqa: F401 (fixtures)
    TUNNEL_URL,
    Caller,
    api_cluster,
    client_runtime,
    new_caller,
    pool_model,
    pools_environ,
    pools_runtime,
    ready_desktops,
)

from deskpool.actor import Actor
from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.licensing import service as licensing_service
from deskpool.pools import store as store_pools
from deskpool.pools.model import DesktopState, Pool, PoolKind
from deskpool.runtime import Runtime
from deskpool.sessions import store
from deskpool.sessions.broker import PlatformSessionBroker
from deskpool.sessions.model import SessionPolicy
from deskpool.sessions.tunnel import TunnelGrant
from deskpool.testing.licensing import TestVendor
from deskpool.testing.processes import ANY_PORT
from deskpool.testing.pytest_plugin import opened_runtime
from deskpool_gateway import GatewayComponent

#: The simulated cluster's console host and VNC port, as the driver reports them.
CONSOLE_HOST = "desktops.sim.test"
VNC_PORT = 5901

NewCaller = Callable[..., Awaitable[Caller]]


@dataclass(frozen=True)
class Estate:
    """A pool with ready desktops backed by simulated VMs, and a user entitled to it."""

    pool: Pool
    desktops: list[uuid.UUID]
    user: Caller
    admin: Caller


@pytest.fixture
def estate(
    pools_runtime: Runtime,  # noqa: F811 (the imported fixture)
    api_cluster: Any,  # noqa: F811
    new_caller: NewCaller,  # noqa: F811
) -> Callable[..., Awaitable[Estate]]:
    """``await estate(ready=1, kind=..., policy=SessionPolicy(...))``: see :class:`Estate`."""

    async def make(ready: int = 1, policy: SessionPolicy | None = None, **overrides: Any) -> Estate:
        cluster_id = uuid.UUID(await api_cluster(desktop={"host": CONSOLE_HOST, "port": VNC_PORT}))
        pool = pool_model(cluster_id, template="ubuntu-22.04", **overrides)
        async with pools_runtime.db.acquire() as connection:
            record = await store_pools.create_pool(connection, pool)
            if policy is not None:
                await store.put_policy(connection, pool.id, policy)
        desktops = await ready_desktops(pools_runtime, record.pool, ready)
        user = await new_caller()
        admin = await new_caller("sessions:manage", "sessions:read")
        async with pools_runtime.db.acquire() as connection:
            await connection.execute(
                "INSERT INTO pool_entitlements (pool_id, subject_type, subject_id) "
                "VALUES ($1, 'user', $2::uuid)",
                pool.id,
                user.id,
            )
        return Estate(record.pool, desktops, user, admin)

    return make


@pytest.fixture
def broker(pools_runtime: Runtime) -> PlatformSessionBroker:  # noqa: F811
    """The platform broker, as a gateway process builds it."""
    return PlatformSessionBroker(pools_runtime, lease=30.0)


async def open_desktop(client: Any, estate: Estate) -> dict[str, Any]:
    """Open the estate's pool as its user; return the response body (asserting 200)."""
    response = await client.post(
        f"/api/v1/me/pools/{estate.pool.id}/desktop", headers=estate.user.headers
    )
    body = await response.json()
    assert response.status == 200, body
    return dict(body)


async def connected_through(
    api: Any, broker: PlatformSessionBroker, estate: Estate, gateway_id: str
) -> tuple[dict[str, Any], TunnelGrant]:
    """Open the estate's pool as its user and redeem the token at ``gateway_id``.

    :returns: the opening's response body and the grant of the session it started.
    """
    opened = await open_desktop(api, estate)
    return opened, await broker.redeem(opened["connection"]["token"], gateway_id=gateway_id)


async def desktop_row(runtime: Runtime, desktop_id: str | uuid.UUID) -> dict[str, Any]:
    """The desktop's row (state, assigned_user, in_session...)."""
    async with runtime.db.acquire() as connection:
        row = await connection.fetchrow(
            "SELECT * FROM desktops WHERE id = $1", uuid.UUID(str(desktop_id))
        )
    assert row is not None
    return dict(row)


async def audit_actions(runtime: Runtime, resource_id: str) -> list[str]:
    """The audit actions recorded on a resource, oldest first."""
    async with runtime.db.acquire() as connection:
        rows = await connection.fetch(
            "SELECT action FROM audit_events WHERE resource_id = $1 ORDER BY id", resource_id
        )
    return [row["action"] for row in rows]


@contextlib.asynccontextmanager
async def running_gateway(
    environ: dict[str, str], daemon: DesktopDaemonSimulator
) -> AsyncIterator[str]:
    """A gateway component (its own runtime, the platform's broker) in front of ``daemon``.

    :returns: the tunnel's WebSocket URL.
    """
    environ = {**environ, "GATEWAY_ADDR": ANY_PORT, "DESKTOPD_ADDRESS": daemon.address}
    async with opened_runtime(environ, ("gateway",)) as runtime:
        gateway = GatewayComponent(runtime)
        await gateway.start()
        try:
            yield f"ws://{gateway.bound}/tunnel"
        finally:
            await gateway.stop()


def details(value: Any) -> dict[str, Any]:
    """An audit event's details as a dict."""
    return dict(json.loads(value) if isinstance(value, str) else value)


__all__ = [
    "TUNNEL_URL",
    "DesktopState",
    "Estate",
    "PoolKind",
    "audit_actions",
    "desktop_row",
    "details",
    "open_desktop",
    "running_gateway",
]


async def install_license(runtime: Runtime, vendor: TestVendor, **limits: int) -> None:
    """Install a license of ``vendor`` with these ``limits`` (``sessions=1``...)."""
    async with runtime.db.acquire() as connection:
        await licensing_service.install_license(
            connection,
            runtime.licensing,
            vendor.issue(limits=limits),
            Actor.system("test:sessions"),
        )
