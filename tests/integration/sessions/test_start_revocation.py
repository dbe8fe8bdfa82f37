"""A start on connect ends with the access behind it, and with the user's log-off.

A user opens a pool whose desktops rest powered off and is answered 202 (a desktop reserved to
him and powered on). If he is disabled, or his entitlement removed, before the worker makes the
desktop ready, the start is cancelled: the worker does not hand it to him, the reservation is
released as the pool's rule says (a non-persistent pool's desktop goes back to the pool, a
persistent owner's own desktop stays his, never ``in_use``), and an entitled user gets it. The
same when he logs off from the desktop while it starts.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tests.integration.sessions.test_start_on_connect import (
    logon,
    rest_powered_off,
    run_desktop_jobs,
)
from tests.support.pools import Caller
from tests.support.sessions import Estate, desktop_row

from deskpool.pools.model import PoolKind
from deskpool.runtime import Runtime

MakeEstate = Callable[..., Awaitable[Estate]]
NewCaller = Callable[..., Awaitable[Caller]]


async def start_pending(client: Any, runtime: Runtime, place: Estate) -> dict[str, Any]:
    """Open the estate's pool as its user while every desktop rests powered off: the 202."""
    await rest_powered_off(runtime, place.desktops)
    response = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    pending: dict[str, Any] = await response.json()
    assert response.status == 202, pending
    return pending


async def starts_of(runtime: Runtime, desktop_id: str) -> int:
    async with runtime.db.acquire() as connection:
        count = await connection.fetchval(
            "SELECT count(*) FROM desktop_starts WHERE desktop_id = $1", uuid.UUID(desktop_id)
        )
    return int(count)


async def entitle(runtime: Runtime, place: Estate, user: Caller) -> None:
    async with runtime.db.acquire() as connection:
        await connection.execute(
            "INSERT INTO pool_entitlements (pool_id, subject_type, subject_id) "
            "VALUES ($1, 'user', $2::uuid)",
            place.pool.id,
            user.id,
        )


async def take_away(client: Any, admin: Caller, how: str, place: Estate) -> None:
    """Disable the estate's user, or remove his entitlement, through the API."""
    if how == "disabled":
        answered = await client.patch(
            f"/api/v1/users/{place.user.id}", json={"disabled": True}, headers=admin.headers
        )
    else:
        answered = await client.delete(
            f"/api/v1/pools/{place.pool.id}/entitlements/user/{place.user.id}",
            headers=admin.headers,
        )
    assert answered.status in (200, 204), await answered.text()


@pytest.mark.parametrize("how", ["disabled", "entitlement_removed"])
async def test_access_taken_away_after_the_202_cancels_the_start_and_frees_the_desktop(
    client: Any, estate: MakeEstate, pools_runtime: Runtime, new_caller: NewCaller, how: str
) -> None:
    place = await estate(ready=1)
    admin = await new_caller("platform:admin")
    pending = await start_pending(client, pools_runtime, place)
    desktop_id = pending["id"]

    await take_away(client, admin, how, place)

    # The worker that brings it to ready hands it to nobody: it is the pool's again.
    await run_desktop_jobs(pools_runtime, desktop_id)
    row = await desktop_row(pools_runtime, desktop_id)
    assert (row["state"], row["assigned_user"]) == ("ready", None)
    # The start was cancelled: its logon says why.
    assert await starts_of(pools_runtime, desktop_id) == 0
    failed = await logon(pools_runtime, pending["starting"]["logon_id"])
    assert failed["failure_reason"] == "access_revoked"
    # An entitled user gets it (not a 503 while it waits for the one who lost access).
    other = await new_caller()
    await entitle(pools_runtime, place, other)
    opened = await client.post(f"/api/v1/me/pools/{place.pool.id}/desktop", headers=other.headers)
    body = await opened.json()
    assert opened.status == 200, body
    assert body["id"] == desktop_id
    async with pools_runtime.db.acquire() as connection:
        cancelled = await connection.fetchrow(
            "SELECT actor, details FROM audit_events "
            "WHERE action = 'desktop.start_cancel' AND resource_id = $1",
            desktop_id,
        )
    assert cancelled is not None
    assert cancelled["actor"] == admin.id


async def test_a_persistent_owner_losing_access_keeps_his_desktop_but_is_not_handed_it(
    client: Any, estate: MakeEstate, pools_runtime: Runtime, new_caller: NewCaller
) -> None:
    place = await estate(ready=2, kind=PoolKind.PERSISTENT)
    admin = await new_caller("platform:admin")
    mine = place.desktops[0]
    async with pools_runtime.db.acquire() as connection:
        await connection.execute(
            "UPDATE desktops SET state = 'powered_off', assigned_user = $2::uuid, "
            "used_since_refresh = true WHERE id = $1",
            mine,
            place.user.id,
        )
    response = await client.post(
        f"/api/v1/me/desktops/{mine}/connection", headers=place.user.headers
    )
    assert response.status == 202, await response.text()

    await take_away(client, admin, "entitlement_removed", place)

    await run_desktop_jobs(pools_runtime, str(mine))
    row = await desktop_row(pools_runtime, mine)
    # The pool's rule: his desktop (his data) stays his, ready; it is not in use for him.
    assert (row["state"], str(row["assigned_user"])) == ("ready", place.user.id)
    assert await starts_of(pools_runtime, str(mine)) == 0


async def test_logging_off_during_a_pending_start_cancels_it(
    client: Any, estate: MakeEstate, pools_runtime: Runtime, new_caller: NewCaller
) -> None:
    place = await estate(ready=1)
    pending = await start_pending(client, pools_runtime, place)
    desktop_id = pending["id"]

    answered = await client.post(
        f"/api/v1/me/desktops/{desktop_id}/logoff", headers=place.user.headers
    )
    assert answered.status == 202, await answered.text()

    await run_desktop_jobs(pools_runtime, desktop_id)
    row = await desktop_row(pools_runtime, desktop_id)
    assert (row["state"], row["assigned_user"]) == ("ready", None)
    assert await starts_of(pools_runtime, desktop_id) == 0
    failed = await logon(pools_runtime, pending["starting"]["logon_id"])
    assert failed["failure_reason"] == "user_logoff"
    # He no longer holds it; opening the pool again gives him a desktop as anyone else.
    again = await client.post(
        f"/api/v1/me/desktops/{desktop_id}/connection", headers=place.user.headers
    )
    assert again.status == 404


async def test_the_hand_over_reads_access_again_whatever_took_it_away(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate(ready=1)
    pending = await start_pending(client, pools_runtime, place)
    desktop_id = pending["id"]
    # Taken away by a path that does not revoke (a row changed behind the services' back).
    async with pools_runtime.db.acquire() as connection:
        await connection.execute(
            "DELETE FROM pool_entitlements WHERE pool_id = $1 AND subject_id = $2::uuid",
            place.pool.id,
            place.user.id,
        )

    await run_desktop_jobs(pools_runtime, desktop_id)
    row = await desktop_row(pools_runtime, desktop_id)
    assert (row["state"], row["assigned_user"]) == ("ready", None)
    failed = await logon(pools_runtime, pending["starting"]["logon_id"])
    assert failed["failure_reason"] == "access_revoked"
