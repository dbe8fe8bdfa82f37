"""An opening waits in line for the license's growth lock, not past its statement bound.

The growth lock is held alone while a desktop is built or started for a user, and by the
openings near the license's limit, each until its transaction ends. An opening that shares
the lock queued behind them inside one statement, so a wait longer than the 1 s
``DATABASE_STATEMENT_TIMEOUT`` was answered 503 "database unavailable" with the database
answering all along (seen in a full run of the suite: 1 of 20 users opening a pool with
nothing ready). It now only tries the shared lock, and waits in line with the lock alone,
bounded as long as one waits for a pool's growth lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.sessions import Estate

from deskpool.licensing.store import GROWTH_LOCK_KEY
from deskpool.runtime import Runtime

MakeEstate = Callable[..., Awaitable[Estate]]

#: Longer than the tests' statement bound (1 s), shorter than the wait for a growth lock (5 s).
HELD_FOR = 1.6


async def test_an_opening_waits_for_a_growth_held_longer_than_a_statement_may_last(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate(ready=1)
    held = asyncio.Event()

    async def grow_for_a_while() -> None:
        async with pools_runtime.db.acquire() as connection, connection.transaction():
            await connection.execute("SET LOCAL statement_timeout = 0")
            await connection.execute("SELECT pg_advisory_xact_lock($1)", GROWTH_LOCK_KEY)
            held.set()
            await asyncio.sleep(HELD_FOR)

    growing = asyncio.create_task(grow_for_a_while())
    await held.wait()
    opened = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    await growing
    assert opened.status == 200, await opened.text()
