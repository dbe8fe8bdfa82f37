"""Fixtures of the session tests: the pool API fixtures, plus desktops with real simulated VMs.

The API runtime, its client and signed-in callers come from the pool tests' fixtures (the
module's own database with a master key). Unlike there, each desktop here has a VM that exists
on a simulated cluster (cloned, started, its guest agent answering), so opening it asks the
simulator driver where it is shown, as in production.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tests.support.pools import (
    TUNNEL_URL,
    pool_model,
    ready_desktops,
)
from tests.support.sessions import (
    CONSOLE_HOST,
    VNC_PORT,
    Estate,
    NewCaller,
    audit_actions,
    desktop_row,
    details,
    open_desktop,
    running_gateway,
)

from deskpool.pools import store as store_pools
from deskpool.pools.model import DesktopState, PoolKind
from deskpool.runtime import Runtime
from deskpool.sessions import store_policies
from deskpool.sessions.broker import PlatformSessionBroker
from deskpool.sessions.model import SessionPolicy


@pytest.fixture
def client_runtime(pools_runtime: Runtime) -> Runtime:
    """``client`` calls the API of ``pools_runtime`` (tests/support/pool_api.py)."""
    return pools_runtime


@pytest.fixture
def estate(
    pools_runtime: Runtime,
    api_cluster: Any,
    new_caller: NewCaller,
) -> Callable[..., Awaitable[Estate]]:
    """``await estate(ready=1, kind=..., policy=SessionPolicy(...))``: see :class:`Estate`."""

    async def make(ready: int = 1, policy: SessionPolicy | None = None, **overrides: Any) -> Estate:
        cluster_id = uuid.UUID(await api_cluster(desktop={"host": CONSOLE_HOST, "port": VNC_PORT}))
        pool = pool_model(cluster_id, template="ubuntu-22.04", **overrides)
        async with pools_runtime.db.acquire() as connection:
            record = await store_pools.create_pool(connection, pool)
            if policy is not None:
                await store_policies.put_policy(connection, pool.id, policy)
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
def broker(pools_runtime: Runtime) -> PlatformSessionBroker:
    """The platform broker, as a gateway process builds it."""
    return PlatformSessionBroker(pools_runtime, lease=30.0)


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
