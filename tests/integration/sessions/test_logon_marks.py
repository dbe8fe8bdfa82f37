"""A gateway's batched logon phases: a mark the database refuses fails alone (issue 39).

The phases of tunnels opened at once are written in one statement
(:mod:`deskpool.sessions.logon_marks`). One value PostgreSQL cannot take (here a daemon's
connection id with a NUL character) must not cost the other tunnels their records: the batch
is written again mark by mark, and only that caller hears the error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from tests.support.sessions import Estate, connected_through, record_addresses

from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker


async def test_a_mark_the_database_refuses_fails_alone(
    client: Any,
    estate: Callable[..., Awaitable[Estate]],
    broker: PlatformSessionBroker,
    pools_runtime: Runtime,
) -> None:
    estates = [await estate(ready=1) for _ in range(3)]
    await record_addresses(pools_runtime, [d for one in estates for d in one.desktops])
    await broker.heartbeat("gw-1", {})
    grants = [(await connected_through(client, broker, one, "gw-1"))[1] for one in estates]
    ids = [f"$good-{n}" for n in range(3)]
    ids[1] = "$bad-\x00"

    results = await asyncio.gather(
        *(
            broker.session_connected(grant.session_id, connection_id=connection_id)
            for grant, connection_id in zip(grants, ids, strict=True)
        ),
        return_exceptions=True,
    )

    assert results[0] is None, results
    assert results[2] is None, results
    assert isinstance(results[1], asyncpg.PostgresError), results
    async with pools_runtime.db.acquire() as connection:
        recorded = {
            row["id"]: row["connection_id"]
            for row in await connection.fetch(
                "SELECT id, connection_id FROM desktop_sessions WHERE id = ANY($1)",
                [grant.session_id for grant in grants],
            )
        }
    assert recorded == {
        grants[0].session_id: "$good-0",
        grants[1].session_id: None,
        grants[2].session_id: "$good-2",
    }
