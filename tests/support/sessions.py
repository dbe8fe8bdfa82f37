"""The session tests' helpers: an estate of desktops on simulated VMs, opening one, a gateway."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from deskpool.actor import Actor
from deskpool.clusters.repository import get_cluster
from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.desktops.store import get_desktop
from deskpool.licensing import service as licensing_service
from deskpool.pools.model import Pool
from deskpool.pools.store import get_pool
from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker
from deskpool.sessions.store_policies import get_policy
from deskpool.sessions.tokens import ask_target
from deskpool.sessions.tunnel import TunnelGrant
from deskpool.testing.licensing import TestVendor
from deskpool.testing.processes import ANY_PORT
from deskpool.testing.pytest_plugin import opened_runtime
from deskpool_gateway import GatewayComponent
from tests.support.pools import (
    Caller,
)

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


async def install_license(runtime: Runtime, vendor: TestVendor, **limits: int) -> None:
    """Install a license of ``vendor`` with these ``limits`` (``sessions=1``...)."""
    async with runtime.db.acquire() as connection:
        await licensing_service.install_license(
            connection,
            runtime.licensing,
            vendor.issue(limits=limits),
            Actor.system("test:sessions"),
        )


async def record_addresses(runtime: Runtime, desktop_ids: list[uuid.UUID]) -> None:
    """Record each desktop's address, as the worker does when it becomes ready (issue 39)."""
    for desktop_id in desktop_ids:
        async with runtime.db.acquire() as connection:
            desktop = await get_desktop(connection, desktop_id)
            assert desktop is not None
            pool = await get_pool(connection, desktop.pool_id)
            cluster = await get_cluster(connection, pool.cluster_id) if pool else None
            policy = await get_policy(connection, desktop.pool_id)
        assert cluster is not None
        async with runtime.drivers.open(cluster) as driver:
            await ask_target(runtime, desktop, policy, driver)
