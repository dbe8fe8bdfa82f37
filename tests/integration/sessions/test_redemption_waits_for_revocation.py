"""A redemption that waits for a revocation's lock judges access as the revocation left it.

A revocation locks the user's row ``FOR UPDATE`` before it takes access away; a redemption
shares the lock. Issue 39 folded the redemption's reads into fewer statements, and PostgreSQL
reads every table of one statement in the snapshot taken when the statement began, even when
the statement then waits for a row lock: a read of the entitlements in the statement that
waited would see them as they were before the revocation committed, and open the desktop the
revocation just took away. So the lock is taken by the statement before the reads.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import pytest
from tests.support.sessions import Estate, open_desktop

from deskpool.pools.model import PoolKind
from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker
from deskpool.sessions.tunnel import TokenRejected
from deskpool.testing.processes import until


async def _waiting_for_a_lock(runtime: Runtime) -> bool:
    async with runtime.db.acquire() as connection:
        waiting = await connection.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
    return bool(waiting)


async def test_a_redemption_waiting_for_a_revocation_sees_what_it_took_away(
    client: object,
    estate: Callable[..., Awaitable[Estate]],
    broker: PlatformSessionBroker,
    pools_runtime: Runtime,
) -> None:
    place = await estate(ready=1, kind=PoolKind.PERSISTENT)
    token = (await open_desktop(client, place))["connection"]["token"]
    await broker.heartbeat("gw-lock", {})
    user_id = uuid.UUID(place.user.id)

    async with pools_runtime.db.acquire() as revoking, revoking.transaction():
        # The revocation: the user's row locked, then the entitlement behind the desktop gone.
        await revoking.execute("SELECT 1 FROM users WHERE id = $1 FOR UPDATE", user_id)
        await revoking.execute(
            "DELETE FROM pool_entitlements WHERE subject_type = 'user' AND subject_id = $1",
            user_id,
        )
        redemption = asyncio.create_task(broker.redeem(token, gateway_id="gw-lock"))
        await until(lambda: _waiting_for_a_lock(pools_runtime), "the redemption waits", seconds=10)
        assert not redemption.done()
    with pytest.raises(TokenRejected) as refused:
        await redemption
    assert refused.value.reason == "access_revoked"
