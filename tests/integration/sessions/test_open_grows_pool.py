"""No 503 while a pool may grow: an open with nothing ready reserves a desktop being built.

Through the API of an api runtime, and the desktop jobs' handlers run in place (as a worker
runs them): a pool below its ``max_size`` with nothing ready answers the open 202 with the
pending connection, the desktop being built reserved to the caller (a free one already on its
way, else a new one inserted with its provisioning job) in the open's transaction; the job that
makes it ready hands it to him. Many callers at once each get their own, never the same one,
and the pool never goes beyond its maximum; at the maximum the open is 503 with
``Retry-After``. Taking the caller's access away ends the pending reservation, as any start's.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from tests.integration.sessions.test_start_on_connect import logon, run_desktop_jobs
from tests.integration.sessions.test_start_revocation import entitle, starts_of, take_away
from tests.support.pools import Caller
from tests.support.sessions import Estate, desktop_row

from deskpool.runtime import Runtime

MakeEstate = Callable[..., Awaitable[Estate]]
NewCaller = Callable[..., Awaitable[Caller]]


async def pool_desktops(runtime: Runtime, pool_id: uuid.UUID) -> list[dict[str, Any]]:
    async with runtime.db.acquire() as connection:
        rows = await connection.fetch("SELECT * FROM desktops WHERE pool_id = $1", pool_id)
    return [dict(row) for row in rows]


async def test_an_open_with_nothing_ready_builds_a_desktop_for_the_caller(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate(ready=0, max_size=3)
    listed = await (await client.get("/api/v1/me/pools", headers=place.user.headers)).json()
    assert [item["availability"] for item in listed["items"]] == ["startable"]

    response = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    pending = await response.json()
    assert response.status == 202, pending
    assert pending["state"] == "provisioning"
    assert pending["starting"]["building"] is True
    desktop_id = pending["id"]
    row = await desktop_row(pools_runtime, desktop_id)
    assert (row["state"], str(row["assigned_user"])) == ("provisioning", place.user.id)
    assert await starts_of(pools_runtime, desktop_id) == 1
    asked = await logon(pools_runtime, pending["starting"]["logon_id"])
    assert str(asked["desktop_id"]) == desktop_id
    assert asked["allocated_at"] is not None

    # Asking again waits for the same desktop: the pool does not grow twice for one caller.
    again = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    assert again.status == 202
    waiting = await again.json()
    assert waiting["id"] == desktop_id
    assert len(await pool_desktops(pools_runtime, place.pool.id)) == 1

    assert await run_desktop_jobs(pools_runtime, desktop_id) == ["desktop.provision"]
    row = await desktop_row(pools_runtime, desktop_id)
    assert (row["state"], str(row["assigned_user"])) == ("in_use", place.user.id)
    opened = await client.post(
        f"/api/v1/me/desktops/{desktop_id}/connection", headers=place.user.headers
    )
    body = await opened.json()
    assert opened.status == 200, body
    assert body["connection"]["token"]
    timed = await logon(pools_runtime, waiting["starting"]["logon_id"])  # the latest waits
    for phase in ("asked", "allocated", "powered_on", "guest_ready", "token_issued"):
        assert timed[f"{phase}_at"] is not None, phase


async def test_a_desktop_already_being_built_is_reserved_before_another_is_made(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    place = await estate(ready=1, max_size=3)
    async with pools_runtime.db.acquire() as connection:
        await connection.execute(
            "UPDATE desktops SET state = 'waiting_for_agent' WHERE id = $1", place.desktops[0]
        )
    response = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    pending = await response.json()
    assert response.status == 202, pending
    assert pending["id"] == str(place.desktops[0])
    assert pending["state"] == "waiting_for_agent"
    assert len(await pool_desktops(pools_runtime, place.pool.id)) == 1


async def test_a_desktop_being_built_that_the_worker_locks_a_moment_is_waited_for(
    client: Any, estate: MakeEstate, pools_runtime: Runtime
) -> None:
    """The only desktop of a pool at its maximum, being built, locked by a provisioning step.

    Passed over (``SKIP LOCKED``), it left the open nothing to reserve and no room to build:
    503 "at its maximum of 1 desktops and none is free" while the desktop was on its way
    (seen in ``tests/e2e/test_vnc_console.py`` on a loaded machine). The open holds the growth
    lock alone there, so no other open can hold the desktop: the lock is the worker's, a
    moment long, and is waited for.
    """
    place = await estate(ready=1, max_size=1)
    worker = await pools_runtime.db.acquire()
    try:
        await worker.execute(
            "UPDATE desktops SET state = 'provisioning' WHERE id = $1", place.desktops[0]
        )
        step = worker.transaction()
        await step.start()
        await worker.execute("SELECT 1 FROM desktops WHERE id = $1 FOR UPDATE", place.desktops[0])
        opening = asyncio.ensure_future(
            client.post(f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers)
        )
        await asyncio.sleep(0.3)
        assert not opening.done()
        await step.commit()
        response = await opening
    finally:
        await pools_runtime.db.release(worker)
    pending = await response.json()
    assert response.status == 202, pending
    assert pending["id"] == str(place.desktops[0])
    assert pending["state"] == "provisioning"
    assert len(await pool_desktops(pools_runtime, place.pool.id)) == 1


async def test_at_its_maximum_the_pool_answers_503_with_how_long_to_wait(
    client: Any, estate: MakeEstate, pools_runtime: Runtime, new_caller: NewCaller
) -> None:
    place = await estate(ready=1, max_size=1)
    first = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    assert first.status == 200, await first.text()
    other = await new_caller()
    await entitle(pools_runtime, place, other)
    refused = await client.post(f"/api/v1/me/pools/{place.pool.id}/desktop", headers=other.headers)
    problem = await refused.json()
    assert refused.status == 503, problem
    assert problem["code"] == "no_desktop_available"
    assert "maximum" in problem["detail"]
    assert int(refused.headers["Retry-After"]) >= 1
    assert len(await pool_desktops(pools_runtime, place.pool.id)) == 1


async def test_concurrent_opens_each_get_their_own_desktop_up_to_the_maximum(
    client: Any, estate: MakeEstate, pools_runtime: Runtime, new_caller: NewCaller
) -> None:
    place = await estate(ready=0, max_size=6)
    callers = [await new_caller() for _ in range(9)]
    for caller in callers:
        await entitle(pools_runtime, place, caller)

    async def open_as(caller: Caller) -> tuple[int, dict[str, Any]]:
        answer = await client.post(
            f"/api/v1/me/pools/{place.pool.id}/desktop", headers=caller.headers
        )
        return answer.status, await answer.json()

    answers = await asyncio.gather(*(open_as(caller) for caller in callers))
    statuses = sorted(status for status, _ in answers)
    assert statuses == [202] * 6 + [503] * 3, [body for status, body in answers if status != 202]
    reserved = {
        body["id"]: caller.id
        for (status, body), caller in zip(answers, callers, strict=True)
        if status == 202
    }
    assert len(reserved) == 6  # nobody's desktop is anyone else's
    rows = await pool_desktops(pools_runtime, place.pool.id)
    assert len(rows) == 6  # never beyond the maximum
    assert {str(row["id"]): str(row["assigned_user"]) for row in rows} == reserved


async def test_revocation_cancels_the_pending_reservation_of_a_desktop_being_built(
    client: Any, estate: MakeEstate, pools_runtime: Runtime, new_caller: NewCaller
) -> None:
    place = await estate(ready=0, max_size=2)
    admin = await new_caller("platform:admin")
    response = await client.post(
        f"/api/v1/me/pools/{place.pool.id}/desktop", headers=place.user.headers
    )
    pending = await response.json()
    assert response.status == 202, pending
    desktop_id = pending["id"]

    await take_away(client, admin, "entitlement_removed", place)

    # At once: the reservation is gone before the desktop is even built.
    assert await starts_of(pools_runtime, desktop_id) == 0
    row = await desktop_row(pools_runtime, desktop_id)
    assert row["assigned_user"] is None
    failed = await logon(pools_runtime, pending["starting"]["logon_id"])
    assert failed["failure_reason"] == "access_revoked"
    # Built, it is handed to nobody: an entitled user gets it.
    await run_desktop_jobs(pools_runtime, desktop_id)
    row = await desktop_row(pools_runtime, desktop_id)
    assert (row["state"], row["assigned_user"]) == ("ready", None)
    other = await new_caller()
    await entitle(pools_runtime, place, other)
    opened = await client.post(f"/api/v1/me/pools/{place.pool.id}/desktop", headers=other.headers)
    assert opened.status == 200, await opened.text()
    assert (await opened.json())["id"] == desktop_id
