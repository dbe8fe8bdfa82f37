"""What listing one's pools reads: a few rows, not every desktop of every pool (issue 39).

At 9 a.m. a thousand first sign-ins list their pools at once. Counting each pool's desktops
by state, by template and again for start on connect read every desktop of every listed pool
for each of them: with four pools of 250 desktops, 3,000 rows per listing, three million in
the storm. Whether opening a pool gives a desktop now needs only to find one.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import asyncpg
from tests.support.pools import add_user, pool_model

from deskpool.pools import store as store_pools
from deskpool.pools.model import Pool, PoolState
from deskpool.runtime import Runtime
from deskpool.starts import store as starts_store

DESKTOPS = 300


async def _pool(runtime: Runtime, cluster_id: uuid.UUID, **overrides: object) -> Pool:
    async with runtime.db.acquire() as connection:
        record = await store_pools.create_pool(
            connection, pool_model(cluster_id, template="ubuntu-22.04", **overrides)
        )
    return record.pool


async def _desktops(
    connection: asyncpg.Connection, pool: Pool, count: int, state: str, user: str | None = None
) -> None:
    await connection.execute(
        """
        INSERT INTO desktops (pool_id, cluster_id, name, state, template, assigned_user)
        SELECT $1, $2, $3 || n, $4, 'ubuntu-22.04', $5
          FROM generate_series(1, $6) AS n
        """,
        pool.id,
        pool.cluster_id,
        f"d{uuid.uuid4().hex[:6]}-",
        state,
        None if user is None else uuid.UUID(user),
        count,
    )


async def _rows_read(connection: asyncpg.Connection) -> int:
    """Rows of ``desktops`` this transaction has read so far (sequential and by index)."""
    return int(
        await connection.fetchval(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
            "FROM pg_stat_xact_user_tables WHERE relname = 'desktops'"
        )
    )


async def test_what_opening_gives_reads_a_few_rows_whatever_the_pools_hold(
    pools_runtime: Runtime, api_cluster: Callable[..., Awaitable[str]]
) -> None:
    cluster_id = uuid.UUID(await api_cluster())
    ready = await _pool(pools_runtime, cluster_id, max_size=DESKTOPS)
    full = await _pool(pools_runtime, cluster_id, max_size=DESKTOPS)
    starting = await _pool(pools_runtime, cluster_id, max_size=DESKTOPS)
    grows = await _pool(pools_runtime, cluster_id, max_size=DESKTOPS + 1)
    disabled = await _pool(
        pools_runtime, cluster_id, max_size=DESKTOPS + 1, state=PoolState.DISABLED
    )
    async with pools_runtime.db.acquire() as connection:
        user = await add_user(connection)
        await _desktops(connection, ready, DESKTOPS, "ready")
        await _desktops(connection, full, DESKTOPS, "in_use", user)
        await _desktops(connection, starting, DESKTOPS - 1, "in_use", user)
        await _desktops(connection, starting, 1, "powered_off")
        await _desktops(connection, grows, DESKTOPS, "in_use", user)
        await _desktops(connection, disabled, DESKTOPS, "in_use", user)
        await connection.execute("ANALYZE desktops")

        pools = [ready, full, starting, grows, disabled]
        gives = await starts_store.what_opening_gives(connection, [p.id for p in pools])

    assert {pool_id: (g.ready, g.startable) for pool_id, g in gives.items()} == {
        ready.id: (True, False),
        full.id: (False, False),
        starting.id: (False, True),
        grows.id: (False, True),
        disabled.id: (False, False),
    }
    # A pool with a free ready desktop, or one to start, is answered from an entry or two
    # (a full pool is told from one that may grow by counting its desktops up to its maximum,
    # only when it has neither).
    async with pools_runtime.db.acquire() as connection, connection.transaction():
        before = await _rows_read(connection)
        await starts_store.what_opening_gives(connection, [ready.id, starting.id])
        read = await _rows_read(connection) - before
    assert read <= 10, read
