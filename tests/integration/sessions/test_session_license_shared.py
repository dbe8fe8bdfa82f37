"""Openings near the license's session limit share its lock while the room covers them (issue 39).

An opening counts the sessions it sees and must leave room for every opening that may be
adding one at once, unseen. It reckoned that as one per connection the server allows
(``max_connections``, 100 here), so within 100 sessions of the limit every opening took the
growth lock alone and the openings went one at a time: at 9 a.m. with a license of 1,000
sessions, the last hundred users of the storm waited for each other (pg_stat_statements:
90 such openings waited 159 ms each on the lock). It now reckons the openings that actually
hold the lock at that moment. Its own module: a fresh database, whose license watermark no
other test's runtime signed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.sessions import Estate, install_license

from deskpool.runtime import Runtime
from deskpool.testing.licensing import TestVendor

MakeEstate = Callable[..., Awaitable[Estate]]

SESSIONS = 12


async def test_openings_within_the_room_share_the_lock_and_never_pass_the_limit(
    client: Any,
    estate: MakeEstate,
    pools_runtime: Runtime,
    license_vendor: TestVendor,
) -> None:
    await install_license(pools_runtime, license_vendor, sessions=SESSIONS)
    estates = [await estate(ready=1) for _ in range(SESSIONS + 8)]

    async def open_one(one: Estate) -> tuple[int, dict[str, Any]]:
        response = await client.post(
            f"/api/v1/me/pools/{one.pool.id}/desktop", headers=one.user.headers
        )
        return response.status, await response.json()

    # One opening with room for it (12 of 12 free, fewer than max_connections): shared.
    first = await open_one(estates[0])
    assert first[0] == 200, first
    assert not pools_runtime.licensing.sessions_near_limit

    # Then a burst of more than the room: exactly the room is taken, the rest refused.
    answers = await asyncio.gather(*(open_one(one) for one in estates[1:]))
    statuses = sorted(status for status, _ in answers)
    assert statuses == [200] * (SESSIONS - 1) + [409] * 8, answers
    assert {body["code"] for status, body in answers if status == 409} == {"license_limit_reached"}
    async with pools_runtime.db.acquire() as connection:
        tokens = await connection.fetchval("SELECT count(*) FROM connection_tokens")
    assert tokens == SESSIONS
