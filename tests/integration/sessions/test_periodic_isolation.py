"""The session check handles each session and desktop alone: one that fails stops nothing else.

The poison is stored behind the API's back: a session whose start is ``-infinity``, which
asyncpg hands back as a naive ``datetime.min`` that no limit can be computed from.
The sessions past their limits next to it are still asked to close, and the desktop whose user
left past its pool's delay is still logged off; the poisoned session costs one warning line.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tests.support.sessions import Estate, connected_through, desktop_row, open_desktop

from deskpool.provisioning.starts import end_stale_starts
from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker
from deskpool.sessions.maintenance import check_sessions
from deskpool.sessions.model import AfterDisconnect, SessionPolicy
from deskpool.sessions.tunnel import SessionEndReason, TunnelCounters

MakeEstate = Callable[..., Awaitable[Estate]]


async def test_a_poisoned_session_does_not_stop_the_session_check(
    client: Any,
    estate: MakeEstate,
    broker: PlatformSessionBroker,
    pools_runtime: Runtime,
    caplog: pytest.LogCaptureFixture,
) -> None:
    limited = await estate(ready=3, policy=SessionPolicy(max_session_duration=3600))
    poisoned, long, _ = [
        await broker.redeem(
            (await open_desktop(client, limited))["connection"]["token"], gateway_id="gw-iso"
        )
        for _ in range(3)
    ]
    leaving = await estate(
        ready=1, policy=SessionPolicy(after_disconnect=AfterDisconnect.LOGOFF_IMMEDIATELY)
    )
    gone, grant = await connected_through(client, broker, leaving, "gw-iso")
    async with pools_runtime.db.acquire() as db:
        await db.execute(
            "UPDATE desktop_sessions SET started_at = '-infinity' WHERE id = $1",
            poisoned.session_id,
        )
        await db.execute(
            "UPDATE desktop_sessions SET started_at = now() - interval '2 hours' WHERE id = $1",
            long.session_id,
        )
        # The user left without the gateway saying so: the check logs him off.
        await db.execute(
            "UPDATE desktop_sessions SET ended_at = now(), end_reason = 'client_closed' "
            "WHERE id = $1",
            grant.session_id,
        )
        await db.execute("UPDATE desktops SET in_session = false WHERE id = $1", grant.desktop_id)
    requests = broker.disconnect_requests("gw-iso")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        done = await check_sessions(pools_runtime, sweep_starts=end_stale_starts)

    assert done.disconnects_requested == 1
    assert (await anext(requests)).session_id == long.session_id
    await requests.aclose()
    assert done.logged_off == 1
    desktop = await desktop_row(pools_runtime, gone["id"])
    assert desktop["assigned_user"] is None
    failures = [record for record in caplog.records if str(poisoned.session_id) in record.message]
    assert len(failures) == 1, [record.message for record in caplog.records]
    assert failures[0].levelno == logging.WARNING
    assert not any(record.exc_info for record in caplog.records)
    await broker.session_ended(long.session_id, SessionEndReason.MAX_DURATION, TunnelCounters())
