"""Start on connect: opening a pool whose desktops rest powered off starts one for the user.

Through the API of an api runtime and the desktop jobs' handlers run in place (as a worker
runs them): the open answers 202 with a pending connection and reserves the desktop to the
user in the same transaction as its power-on job; the job that makes it ready hands it to the
user, and the connection that follows carries on the same logon (asked, allocated, powered on,
guest ready, token issued). A start whose desktop fails ends its logon with the reason and
keeps the phases it reached.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.provisioning import (
    claim,
    job_context,
)
from tests.support.sessions import (
    Estate,
    desktop_row,
)

from deskpool.jobs import queue
from deskpool.pools.model import PoolKind
from deskpool.provisioning.handlers import desktop_job_kinds
from deskpool.provisioning.starts import START_FAILED, end_stale_starts
from deskpool.runtime import Runtime

MakeEstate = Callable[..., Awaitable[Estate]]
NewCaller = Callable[..., Awaitable[Any]]


async def rest_powered_off(runtime: Runtime, desktop_ids: list[uuid.UUID]) -> None:
    """The desktops rest powered off, as a schedule's off-peak phase leaves them."""
    async with runtime.db.acquire() as connection:
        await connection.execute(
            "UPDATE desktops SET state = 'powered_off' WHERE id = ANY($1::uuid[])", desktop_ids
        )


async def run_desktop_jobs(runtime: Runtime, desktop_id: str) -> list[str]:
    """Run the queued jobs of a desktop once each, as a worker would; return their kinds."""
    kinds = desktop_job_kinds()
    ran = []
    async with runtime.db.acquire() as connection:
        rows = await connection.fetch(
            "SELECT id, kind FROM jobs WHERE resource_id = $1 AND state = 'queued' ORDER BY id",
            desktop_id,
        )
        for row in rows:
            job = await claim(connection, row["id"])
            await kinds[job.kind].handler(job_context(runtime, job))
            await queue.complete(connection, [job.lease])
            ran.append(str(row["kind"]))
    return ran


async def logon(runtime: Runtime, logon_id: str) -> dict[str, Any]:
    async with runtime.db.acquire() as connection:
        row = await connection.fetchrow("SELECT * FROM logons WHERE id = $1", uuid.UUID(logon_id))
    assert row is not None
    return dict(row)


async def test_a_powered_off_desktop_is_started_for_the_user_and_handed_to_him(
    client: Any, estate: MakeEstate, pools_runtime: Runtime, new_caller: NewCaller
) -> None:
    place = await estate(ready=2, max_size=2)
    await rest_powered_off(pools_runtime, place.desktops)
    url = f"/api/v1/me/pools/{place.pool.id}/desktop"

    listed = await (await client.get("/api/v1/me/pools", headers=place.user.headers)).json()
    assert [item["availability"] for item in listed["items"]] == ["startable"]

    response = await client.post(url, headers=place.user.headers)
    pending = await response.json()
    assert response.status == 202, pending
    assert pending["state"] == "starting"
    assert "connection" not in pending
    desktop_id = pending["id"]
    row = await desktop_row(pools_runtime, desktop_id)
    assert row["state"] == "starting"
    assert str(row["assigned_user"]) == place.user.id  # reserved: nobody else gets it
    async with pools_runtime.db.acquire() as connection:
        job = await connection.fetchval(
            "SELECT kind FROM jobs WHERE resource_id = $1 AND state = 'queued'", desktop_id
        )
    assert job == "desktop.provision"
    asked = await logon(pools_runtime, pending["starting"]["logon_id"])
    assert asked["allocated_at"] is not None
    assert str(asked["desktop_id"]) == desktop_id
    assert asked["powered_on_at"] is None
    assert asked["failed_at"] is None

    # Asking again waits for the same desktop; another user gets the other one.
    again = await client.post(url, headers=place.user.headers)
    assert again.status == 202
    assert (await again.json())["id"] == desktop_id
    other = await new_caller()
    async with pools_runtime.db.acquire() as connection:
        await connection.execute(
            "INSERT INTO pool_entitlements (pool_id, subject_type, subject_id) "
            "VALUES ($1, 'user', $2::uuid)",
            place.pool.id,
            other.id,
        )
    theirs = await client.post(url, headers=other.headers)
    assert theirs.status == 202
    assert (await theirs.json())["id"] not in (desktop_id, None)
    # A third open finds nothing left to start, and the pool at its maximum: 503.
    third = await new_caller("pools:manage")
    assert (await client.post(url, headers=third.headers)).status == 503

    # Early: still starting, the connection is pending again (same logon carried on).
    early = await client.post(
        f"/api/v1/me/desktops/{desktop_id}/connection", headers=place.user.headers
    )
    assert early.status == 202
    waiting = (await early.json())["starting"]["logon_id"]

    assert await run_desktop_jobs(pools_runtime, desktop_id) == ["desktop.provision"]
    row = await desktop_row(pools_runtime, desktop_id)
    assert row["state"] == "in_use"
    assert str(row["assigned_user"]) == place.user.id
    assert (await logon(pools_runtime, waiting))["powered_on_at"] is not None

    opened = await client.post(
        f"/api/v1/me/desktops/{desktop_id}/connection", headers=place.user.headers
    )
    body = await opened.json()
    assert opened.status == 200, body
    assert body["connection"]["token"]
    timed = await logon(pools_runtime, waiting)
    for phase in ("asked", "allocated", "powered_on", "guest_ready", "token_issued"):
        assert timed[f"{phase}_at"] is not None, phase
    assert timed["failed_at"] is None
    async with pools_runtime.db.acquire() as connection:
        assert (
            await connection.fetchval(
                "SELECT count(*) FROM desktop_starts WHERE desktop_id = $1", uuid.UUID(desktop_id)
            )
            == 0
        )
        actions = await connection.fetch(
            "SELECT action, actor FROM audit_events WHERE resource_id = $1 ORDER BY id",
            desktop_id,
        )
    recorded = [(r["action"], r["actor"]) for r in actions]
    assert [action for action, _ in recorded][:1] == ["desktop.start_on_connect"]
    assert ("desktop.allocate", "system:starts") in recorded


async def test_a_failed_start_ends_the_logon_with_its_reason_and_keeps_its_phases(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate(ready=1)
    await rest_powered_off(pools_runtime, place.desktops)
    response = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    assert response.status == 202
    pending = await response.json()
    async with pools_runtime.db.acquire() as connection:
        # The desktop fails on its way (its step timed out, as the reconciler records it).
        await connection.execute(
            "UPDATE desktops SET state = 'failed', failed_step = 'starting', assigned_user = NULL "
            "WHERE id = $1",
            uuid.UUID(pending["id"]),
        )
    assert await end_stale_starts(pools_runtime) >= 1  # starts of earlier tests may end too
    failed = await logon(pools_runtime, pending["starting"]["logon_id"])
    assert failed["failure_reason"] == START_FAILED
    assert failed["allocated_at"] is not None  # the phases reached are kept
    assert failed["powered_on_at"] is None
    assert await end_stale_starts(pools_runtime) == 0


async def test_a_persistent_owner_powers_his_own_desktop_on_by_connecting_to_it(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate(ready=2, kind=PoolKind.PERSISTENT)
    mine, spare = place.desktops
    async with pools_runtime.db.acquire() as connection:
        await connection.execute(
            "UPDATE desktops SET state = 'powered_off', assigned_user = $2::uuid, "
            "used_since_refresh = true WHERE id = $1",
            mine,
            place.user.id,
        )
    listed = await (await client.get("/api/v1/me/pools", headers=place.user.headers)).json()
    assert [item["availability"] for item in listed["items"]] == ["startable"]

    response = await client.post(
        f"/api/v1/me/desktops/{mine}/connection", headers=place.user.headers
    )
    assert response.status == 202, await response.text()
    assert (await response.json())["id"] == str(mine)  # his own, not the free ready one
    assert (await desktop_row(pools_runtime, spare))["assigned_user"] is None
    await run_desktop_jobs(pools_runtime, str(mine))
    row = await desktop_row(pools_runtime, mine)
    assert (row["state"], str(row["assigned_user"])) == ("in_use", place.user.id)
    opened = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    assert opened.status == 200
    assert (await opened.json())["id"] == str(mine)
