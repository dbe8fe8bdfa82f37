"""A ready desktop that another transaction has locked for a moment is waited for, not refused.

An opening takes the oldest free ready desktop ``FOR UPDATE SKIP LOCKED``, so that a thousand
openings at 9 a.m. take a thousand different desktops without queueing on one. But a free
desktop is also locked, for a moment, by the worker (reconciliation, a health check, the
address recorded): skipped then, a pool of one ready desktop answered 503 "at its maximum of 1
desktops and none is free" while its card said "A desktop is ready for you" (seen in a fresh
clone's ``make test``, ``test_console_desktop_transfers``). With no free desktop found, the
opening runs again with the pool's growth lock alone, no other opening in its way; that pass
now waits for a locked free desktop (bounded as every wait for the growth lock) and skips none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.sessions import Estate

from deskpool.runtime import Runtime

MakeEstate = Callable[..., Awaitable[Estate]]

#: How long the worker holds the desktop: shorter than the wait for a growth lock (5 s).
HELD_FOR = 1.0


async def test_a_ready_desktop_locked_for_a_moment_is_opened_not_refused(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate(ready=1, min_size=1, spare=0, max_size=1)
    held = asyncio.Event()

    async def hold_the_desktop() -> None:
        async with pools_runtime.db.acquire() as connection, connection.transaction():
            await connection.execute("SET LOCAL statement_timeout = 0")
            await connection.execute(
                "SELECT 1 FROM desktops WHERE id = $1 FOR UPDATE", place.desktops[0]
            )
            held.set()
            await asyncio.sleep(HELD_FOR)

    holding = asyncio.create_task(hold_the_desktop())
    await held.wait()
    opened = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    await holding
    body = await opened.text()
    assert opened.status == 200, body
    assert str(place.desktops[0]) in body
