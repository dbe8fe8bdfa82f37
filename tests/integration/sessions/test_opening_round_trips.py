"""An opening costs a handful of round trips and one flushed commit (issue 39, item 1).

Counted in PostgreSQL's own statement log (:mod:`tests.support.statement_log`: a private server
logging every statement) for ``POST /api/v1/me/pools/{id}/desktop`` of a signed-in user, after
one opening by another user warmed the api's prepared statements: every statement the api sent
while answering, prepared or executed, and every transaction that wrote. The address of the
desktop was recorded when it became ready, so the opening asks no driver.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tests.support.sessions import Estate, audit_actions, open_desktop, record_addresses
from tests.support.statement_log import LoggedDatabase

from deskpool.runtime import Runtime

#: The issue's bound.
MOST_ROUND_TRIPS = 8


@pytest.fixture(scope="module")
def module_database_url(logged: LoggedDatabase) -> str:
    """The module's database (the sealing tests' ``isolated_database_url``): the logged one."""
    return logged.url


async def test_an_opening_is_a_handful_of_round_trips_and_one_flushed_commit(
    client: Any,
    estate: Callable[..., Awaitable[Estate]],
    pools_runtime: Runtime,
    logged: LoggedDatabase,
) -> None:
    warm = await estate(ready=2)
    measured = await estate(ready=2)
    await record_addresses(pools_runtime, warm.desktops + measured.desktops)
    for caller in (warm.user, measured.user):  # signed in: the principal is cached
        assert (await client.get("/api/v1/me", headers=caller.headers)).status == 200
    await open_desktop(client, warm)

    mark = logged.log.mark()
    opened = await open_desktop(client, measured)
    counted = logged.log.since(mark)

    assert opened["connection"]["token"]
    assert counted.round_trips <= MOST_ROUND_TRIPS, "\n".join(counted.texts())
    assert counted.flushed_commits == 1, "\n".join(counted.texts())
    # Still all of it: the logon's phases, the token, the audit event.
    async with pools_runtime.db.acquire() as connection:
        logon = await connection.fetchrow(
            "SELECT * FROM logons WHERE user_id = $1::uuid", measured.user.id
        )
        tokens = await connection.fetchval(
            "SELECT count(*) FROM connection_tokens WHERE user_id = $1::uuid", measured.user.id
        )
    assert None not in (logon["allocated_at"], logon["guest_ready_at"], logon["token_issued_at"])
    assert str(logon["desktop_id"]) == opened["id"]
    assert tokens == 1
    assert "desktop.allocate" in await audit_actions(pools_runtime, opened["id"])
