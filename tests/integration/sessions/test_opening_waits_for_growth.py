"""An opening waits for what another transaction holds a moment, instead of refusing.

**The growth lock.** It is held alone while a desktop is built or started for a user, and by
the openings near the license's limit, each until its transaction ends. An opening that
shares the lock queued behind them inside one statement, so a wait longer than the 1 s
``DATABASE_STATEMENT_TIMEOUT`` was answered 503 "database unavailable" with the database
answering all along (seen in a full run of the suite: 1 of 20 users opening a pool with
nothing ready). It now only tries the shared lock, and waits in line with the lock alone,
bounded as long as one waits for a pool's growth lock.

**A free desktop locked a moment.** An opening takes the oldest free ready desktop ``FOR
UPDATE SKIP LOCKED``, so that a thousand openings at 9 a.m. take a thousand different desktops
without queueing on one. But a free desktop is also locked, for a moment, by the worker
(reconciliation, a health check, the address recorded): skipped then, a pool of one ready
desktop answered 503 "at its maximum of 1 desktops and none is free" while its card said "A
desktop is ready for you" (seen in a fresh clone's ``make test``,
``test_console_desktop_transfers``). With no free desktop found, the opening runs again with
the growth lock alone, no other opening in its way; that pass waits for a locked free desktop
(bounded the same way) and skips none.
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


async def _opened_while_held(
    client: Any, runtime: Runtime, place: Estate, hold: str, *arguments: object
) -> tuple[int, str]:
    """Open the estate's pool while another transaction holds what ``hold`` locks."""
    held = asyncio.Event()

    async def hold_for_a_while() -> None:
        async with runtime.db.acquire() as connection, connection.transaction():
            await connection.execute("SET LOCAL statement_timeout = 0")
            await connection.execute(hold, *arguments)
            held.set()
            await asyncio.sleep(HELD_FOR)

    holding = asyncio.create_task(hold_for_a_while())
    await held.wait()
    opened = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    await holding
    return opened.status, await opened.text()


async def test_an_opening_waits_for_a_growth_held_longer_than_a_statement_may_last(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate(ready=1)
    status, body = await _opened_while_held(
        client, pools_runtime, place, "SELECT pg_advisory_xact_lock($1)", GROWTH_LOCK_KEY
    )
    assert status == 200, body


async def test_a_ready_desktop_locked_for_a_moment_is_opened_not_refused(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate(ready=1, min_size=1, spare=0, max_size=1)
    status, body = await _opened_while_held(
        client,
        pools_runtime,
        place,
        "SELECT 1 FROM desktops WHERE id = $1 FOR UPDATE",
        place.desktops[0],
    )
    assert status == 200, body
    assert str(place.desktops[0]) in body
