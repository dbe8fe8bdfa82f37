"""Fixtures of the pool tests: database connections, a cluster record and pool builders.

The repository tests run on the run's shared database with unique names (a pool per test on
a cluster of its own), so they never see each other's rows.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import asyncpg
import pytest

from deskpool.pools import repository
from deskpool.pools.model import DesktopState, OsType, Pool, PoolKind

MakePool = Callable[..., Awaitable[Pool]]


@pytest.fixture
async def db(migrated_database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to this run's database."""
    connection = await asyncpg.connect(migrated_database_url)
    yield connection
    await connection.close()


@pytest.fixture
async def cluster_id(db: asyncpg.Connection) -> uuid.UUID:
    """A simulator cluster record of this test (no driver is opened)."""
    value: uuid.UUID = await db.fetchval(
        "INSERT INTO clusters (name, driver, endpoint) VALUES ($1, 'simulator', 'sim://') "
        "RETURNING id",
        f"cluster-{secrets.token_hex(6)}",
    )
    return value


def pool_model(cluster_id: uuid.UUID, **overrides: Any) -> Pool:
    """A valid pool on ``cluster_id`` with a unique name and naming pattern."""
    tag = secrets.token_hex(3)
    base = Pool(
        id=uuid.uuid4(),
        name=f"pool-{tag}",
        cluster_id=cluster_id,
        template="tpl-ubuntu",
        kind=PoolKind.NON_PERSISTENT,
        min_size=0,
        max_size=20,
        spare=0,
        naming_pattern=f"d{tag}-{{n:03}}",
        os_type=OsType.LINUX,
    )
    return replace(base, **overrides)


@pytest.fixture
def make_pool(db: asyncpg.Connection, cluster_id: uuid.UUID) -> MakePool:
    """``await make_pool(**fields)``: a stored pool on the test's cluster."""

    async def make(**overrides: Any) -> Pool:
        record = await repository.create_pool(db, pool_model(cluster_id, **overrides))
        return record.pool

    return make


async def add_desktops(
    connection: asyncpg.Connection,
    pool: Pool,
    count: int,
    state: DesktopState = DesktopState.READY,
    **columns: Any,
) -> list[uuid.UUID]:
    """Insert ``count`` desktops into ``pool`` directly in ``state`` (with ``columns`` set)."""
    names = [f"{pool.naming_pattern.split('-')[0]}-{index:03}" for index in range(count)]
    names = [f"{name}-{secrets.token_hex(2)}" for name in names]
    desktops = await repository.insert_desktops(connection, pool, names)
    ids = [desktop.id for desktop in desktops]
    assignments = ", ".join(f"{column} = ${index + 3}" for index, column in enumerate(columns))
    await connection.execute(
        f"""
        UPDATE desktops SET state = $2, vm_id = 'vm-' || name, template = 'tpl-ubuntu'
            {", " + assignments if assignments else ""}
         WHERE id = ANY($1::uuid[])
        """,
        ids,
        str(state),
        *columns.values(),
    )
    return ids


async def add_user(connection: asyncpg.Connection) -> str:
    """A new user's id."""
    user_id = await connection.fetchval(
        "INSERT INTO users (issuer, subject) VALUES ('https://issuer.test', $1) RETURNING id",
        f"user-{secrets.token_hex(6)}",
    )
    return str(user_id)
