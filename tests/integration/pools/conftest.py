"""Fixtures of the pool tests: database connections, cluster records, pools and callers.

Desktops a test opens have VMs on a simulated cluster (:func:`ready_desktops`), so opening
one asks the simulator driver where it is shown, as in production.

The repository tests run on the run's shared database with unique names (a pool per test on
a cluster of its own), so they never see each other's rows. The API tests seal domain-join
passwords, so they run on a database of the module's own with a master key (as the cluster
tests do), emptied of clusters (and so of pools) before each test.
"""

from __future__ import annotations

import secrets
import uuid
from typing import Any

import asyncpg
import pytest
from tests.support.pools import (
    MakePool,
    pool_model,
)

from deskpool.pools import store as store_pools
from deskpool.pools.model import Pool
from deskpool.runtime import Runtime


@pytest.fixture
def client_runtime(pools_runtime: Runtime) -> Runtime:
    """``client`` calls the API of ``pools_runtime`` (tests/support/pool_api.py)."""
    return pools_runtime


@pytest.fixture
async def cluster_id(db: asyncpg.Connection) -> uuid.UUID:
    """A simulator cluster record of this test (no driver is opened)."""
    value: uuid.UUID = await db.fetchval(
        "INSERT INTO clusters (name, driver, endpoint) VALUES ($1, 'simulator', 'sim://') "
        "RETURNING id",
        f"cluster-{secrets.token_hex(6)}",
    )
    return value


@pytest.fixture
def make_pool(db: asyncpg.Connection, cluster_id: uuid.UUID) -> MakePool:
    """``await make_pool(**fields)``: a stored pool on the test's cluster."""

    async def make(**overrides: Any) -> Pool:
        record = await store_pools.create_pool(db, pool_model(cluster_id, **overrides))
        return record.pool

    return make


# ------------------------------------------------------------------------------ the API
