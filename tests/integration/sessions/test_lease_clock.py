"""The lease clock: a lease that ran out while nobody reached the database restarts, once.

A gateway's lease ran out during a silence (nobody touched the lease clock) longer than the
lease: the first check after it restarts the lease instead of ending the gateway's sessions.
A gateway that really died is judged lost when the restarted lease runs out in turn, however
long the next silence: a lease restarts at most once without a heartbeat in between. While
heartbeats and checks touch the clock, an expired lease ends its sessions as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.sessions import Estate, open_desktop

from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker, end_lost_gateways

MakeEstate = Callable[..., Awaitable[Estate]]


async def _silence(runtime: Runtime, gateway_id: str, *, seconds: float) -> None:
    """Nobody reached the database for ``seconds``: the clock and the lease are that old."""
    async with runtime.db.acquire() as db, db.transaction():
        await db.execute(
            "UPDATE lease_clock SET touched_at = touched_at - make_interval(secs => $1)", seconds
        )
        await db.execute(
            "UPDATE gateway_leases SET heartbeat_at = heartbeat_at - make_interval(secs => $2),"
            " lease_expires_at = lease_expires_at - make_interval(secs => $2),"
            " restarted_at = restarted_at - make_interval(secs => $2)"
            " WHERE gateway_id = $1",
            gateway_id,
            seconds,
        )


async def _session(runtime: Runtime, session_id: Any) -> tuple[Any, Any]:
    async with runtime.db.acquire() as db:
        row = await db.fetchrow(
            "SELECT ended_at, end_reason FROM desktop_sessions WHERE id = $1", session_id
        )
    assert row is not None
    return row["ended_at"], row["end_reason"]


async def test_a_lease_that_ran_out_while_nobody_reached_the_database_restarts_once(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate()
    opened = await open_desktop(client, place)
    gateway = PlatformSessionBroker(pools_runtime, lease=30.0)
    grant = await gateway.redeem(opened["connection"]["token"], gateway_id="gw-silenced")

    # A 95 s outage: the gateway's heartbeats all failed, its lease ran out 65 s ago.
    await _silence(pools_runtime, "gw-silenced", seconds=95)
    assert await end_lost_gateways(pools_runtime) == 0
    assert await _session(pools_runtime, grant.session_id) == (None, None)
    async with pools_runtime.db.acquire() as db:
        lease = await db.fetchrow(
            "SELECT lease_expires_at - now() AS left, restarted_at FROM gateway_leases"
            " WHERE gateway_id = 'gw-silenced'"
        )
    assert lease is not None
    assert lease["restarted_at"] is not None
    assert 25 < lease["left"].total_seconds() <= 30  # a full lease from the return

    # The gateway never heartbeats again (it died in the outage): when the restarted lease
    # runs out, even after another silence, its sessions end.
    async with pools_runtime.db.acquire() as db:
        await db.execute(
            "UPDATE lease_clock SET touched_at = now() - interval '95 seconds'; "
            "UPDATE gateway_leases SET lease_expires_at = now() - interval '1 second', "
            "restarted_at = now() - interval '31 seconds' WHERE gateway_id = 'gw-silenced'"
        )
    assert await end_lost_gateways(pools_runtime) == 1
    assert (await _session(pools_runtime, grant.session_id))[1] == "gateway_lost"


async def test_a_heartbeat_after_the_restart_keeps_the_gateway(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate()
    opened = await open_desktop(client, place)
    gateway = PlatformSessionBroker(pools_runtime, lease=30.0)
    grant = await gateway.redeem(opened["connection"]["token"], gateway_id="gw-back")

    await _silence(pools_runtime, "gw-back", seconds=95)
    assert await end_lost_gateways(pools_runtime) == 0
    await gateway.heartbeat("gw-back", {})
    # A second outage later: the lease, renewed since its restart, restarts again.
    await _silence(pools_runtime, "gw-back", seconds=95)
    assert await end_lost_gateways(pools_runtime) == 0
    assert await _session(pools_runtime, grant.session_id) == (None, None)


async def test_while_the_clock_is_touched_an_expired_lease_ends_its_sessions(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate()
    opened = await open_desktop(client, place)
    doomed = PlatformSessionBroker(pools_runtime, lease=30.0)
    grant = await doomed.redeem(opened["connection"]["token"], gateway_id="gw-dead")
    # Another gateway's heartbeats touched the clock all along; gw-dead's lease ran out.
    await PlatformSessionBroker(pools_runtime, lease=30.0).heartbeat("gw-alive", {})
    async with pools_runtime.db.acquire() as db:
        await db.execute(
            "UPDATE gateway_leases SET heartbeat_at = now() - interval '31 seconds',"
            " lease_expires_at = now() - interval '1 second' WHERE gateway_id = 'gw-dead'"
        )
    assert await end_lost_gateways(pools_runtime) == 1
    assert (await _session(pools_runtime, grant.session_id))[1] == "gateway_lost"
