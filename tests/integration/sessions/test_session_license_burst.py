"""A burst of openings takes no more sessions than the license allows (issue 27).

Each opening's allocation commits before its connection token exists; the desktop counts as
one with a session from the allocation on (its logon is allocated, its token not issued yet),
or every opening of a burst would pass the limit. Its own module: a fresh database, whose
license watermark no other test's runtime signed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.sessions import (
    Estate,
    install_license,
)

from deskpool.runtime import Runtime
from deskpool.testing.licensing import TestVendor

MakeEstate = Callable[..., Awaitable[Estate]]


async def test_concurrent_openings_take_no_more_sessions_than_the_license_allows(
    client: Any,
    estate: MakeEstate,
    pools_runtime: Runtime,
    license_vendor: TestVendor,
) -> None:
    await install_license(pools_runtime, license_vendor, sessions=3)
    estates = [await estate(ready=1) for _ in range(7)]

    async def open_one(one: Estate) -> tuple[int, dict[str, Any]]:
        response = await client.post(
            f"/api/v1/me/pools/{one.pool.id}/desktop", headers=one.user.headers
        )
        return response.status, await response.json()

    answers = await asyncio.gather(*(open_one(one) for one in estates))

    assert sorted(status for status, _ in answers) == [200] * 3 + [409] * 4, answers
    assert {body["code"] for status, body in answers if status == 409} == {"license_limit_reached"}
    desktops = [one.desktops[0] for one in estates]
    async with pools_runtime.db.acquire() as connection:
        assigned = await connection.fetchval(
            "SELECT count(*) FROM desktops "
            "WHERE id = ANY($1::uuid[]) AND assigned_user IS NOT NULL",
            desktops,
        )
        tokens = await connection.fetchval(
            "SELECT count(*) FROM connection_tokens WHERE desktop_id = ANY($1::uuid[])",
            desktops,
        )
    assert assigned == 3
    assert tokens == 3
