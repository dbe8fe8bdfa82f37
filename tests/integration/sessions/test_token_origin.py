"""A gateway asks Redis only for the tokens issued from the outage snapshot (issue 39).

The gateway's broker (:class:`deskpool.outage_brokering.broker.OutageSessionBroker`) redeems
tokens of two origins: issued through the database, and issued from the snapshot while the
database was away (kept in Redis, taken once). It looked every token up in Redis first: at
9 a.m. a round trip to Redis for each of a thousand redemptions, 6.6 % of the gateway's Python
time in the storm (py-spy --gil), for tokens the database issued. A snapshot's token now says
where it comes from.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.sessions import Estate, open_desktop, record_addresses

from deskpool.outage_brokering.broker import OutageSessionBroker
from deskpool.runtime import Runtime
from deskpool.sessions.model import issued_from_snapshot, new_token, plausible_token


def test_a_snapshots_token_says_so_and_a_databases_does_not() -> None:
    for _ in range(200):  # whatever its random characters
        snapshot, database = new_token(from_snapshot=True), new_token()
        assert plausible_token(snapshot)
        assert plausible_token(database)
        assert issued_from_snapshot(snapshot)
        assert not issued_from_snapshot(database)


async def test_a_token_the_database_issued_is_redeemed_without_asking_redis(
    client: Any,
    estate: Callable[..., Awaitable[Estate]],
    pools_runtime: Runtime,
    monkeypatch: Any,
) -> None:
    owned = await estate(ready=1)
    await record_addresses(pools_runtime, owned.desktops)
    token = (await open_desktop(client, owned))["connection"]["token"]
    asked: list[Any] = []
    getdel = pools_runtime.kv.getdel

    async def counted(*args: Any) -> Any:
        asked.append(args)
        return await getdel(*args)

    monkeypatch.setattr(pools_runtime.kv, "getdel", counted)
    grant = await OutageSessionBroker(pools_runtime).redeem(token, gateway_id="gw-origin")

    assert str(grant.user_id) == owned.user.id
    assert asked == []
