"""The desktops API over HTTP: listing, actions that enqueue jobs, and assignments."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tests.support.pools import (
    Caller,
    add_desktops,
    pool_model,
)

from deskpool.jobs import queue
from deskpool.pools import store as store_pools
from deskpool.pools.model import DesktopState, Pool, PoolKind
from deskpool.runtime import Runtime

DESKTOPS = "/api/v1/desktops"

NewCaller = Callable[..., Awaitable[Caller]]
NewCluster = Callable[..., Awaitable[str]]
MakeApiPool = Callable[..., Awaitable[Pool]]


@pytest.fixture
def api_pool(pools_runtime: Runtime, api_cluster: NewCluster) -> MakeApiPool:
    """``await api_pool(**fields)``: a stored pool on a new simulator cluster."""

    async def make(**overrides: Any) -> Pool:
        cluster_id = uuid.UUID(await api_cluster())
        async with pools_runtime.db.acquire() as connection:
            record = await store_pools.create_pool(connection, pool_model(cluster_id, **overrides))
        return record.pool

    return make


async def desktops_in(
    runtime: Runtime,
    pool: Pool,
    count: int,
    state: DesktopState = DesktopState.READY,
    **columns: Any,
) -> list[str]:
    async with runtime.db.acquire() as connection:
        ids = await add_desktops(connection, pool, count, state, **columns)
    return [str(desktop_id) for desktop_id in ids]


async def test_list_and_get(
    client: Any, new_caller: NewCaller, api_pool: MakeApiPool, pools_runtime: Runtime
) -> None:
    reader = await new_caller("desktops:read")
    pool, other = await api_pool(), await api_pool()
    ready = await desktops_in(pools_runtime, pool, 2)
    failed = await desktops_in(pools_runtime, pool, 1, DesktopState.FAILED, last_error="boom")
    await desktops_in(pools_runtime, other, 1)

    page = await (
        await client.get(f"{DESKTOPS}?pool_id={pool.id}&limit=2", headers=reader.headers)
    ).json()
    rest = await (
        await client.get(
            f"{DESKTOPS}?pool_id={pool.id}&limit=2&cursor={page['next']}", headers=reader.headers
        )
    ).json()
    listed = [item["id"] for item in page["items"] + rest["items"]]
    assert sorted(listed) == sorted(ready + failed)
    assert rest["next"] is None
    only_failed = await (
        await client.get(f"{DESKTOPS}?pool_id={pool.id}&state=failed", headers=reader.headers)
    ).json()
    assert [item["id"] for item in only_failed["items"]] == failed

    one = await (await client.get(f"{DESKTOPS}/{failed[0]}", headers=reader.headers)).json()
    assert one["state"] == "failed"
    assert one["last_error"] == "boom"
    assert one["pool_id"] == str(pool.id)
    assert one["allowed_actions"] == ["power_on", "power_off", "restart", "rebuild", "delete"]
    assert (await client.get(f"{DESKTOPS}/{uuid.uuid4()}", headers=reader.headers)).status == 404
    bad = await client.get(f"{DESKTOPS}?state=sleeping", headers=reader.headers)
    assert bad.status == 422


async def test_actions_enqueue_jobs(
    client: Any, new_caller: NewCaller, api_pool: MakeApiPool, pools_runtime: Runtime
) -> None:
    manager = await new_caller("desktops:manage")
    pool = await api_pool()
    (desktop_id,) = await desktops_in(pools_runtime, pool, 1)
    (off_id,) = await desktops_in(pools_runtime, pool, 1, DesktopState.POWERED_OFF)
    url = f"{DESKTOPS}/{desktop_id}/actions"
    running = await client.post(url, json={"action": "power_on"}, headers=manager.headers)
    assert running.status == 409, await running.text()
    assert (await running.json())["code"] == "desktop_action_not_allowed"
    powered_off = await client.post(
        f"{DESKTOPS}/{off_id}/actions", json={"action": "power_on"}, headers=manager.headers
    )
    assert powered_off.status == 202, await powered_off.text()
    assert (await powered_off.json())["kind"] == "desktop.power_on"
    for action in ("power_off", "restart", "rebuild", "delete"):
        response = await client.post(url, json={"action": action}, headers=manager.headers)
        assert response.status == 202, await response.text()
        job = await response.json()
        assert job["kind"] == f"desktop.{action}"
        assert job["payload"] == {"desktop_id": desktop_id}
        assert (job["resource_type"], job["resource_id"]) == ("desktops", desktop_id)
        assert job["state"] == "queued"
        again = await (
            await client.post(url, json={"action": action}, headers=manager.headers)
        ).json()
        assert again["id"] == job["id"]
    unknown = await client.post(url, json={"action": "explode"}, headers=manager.headers)
    assert unknown.status == 422
    async with pools_runtime.db.acquire() as connection:
        rows = await connection.fetch(
            "SELECT action FROM audit_events WHERE resource_id = $1 ORDER BY id", desktop_id
        )
    assert [row["action"] for row in rows] == ["desktop.action"] * 4


async def test_illegal_actions_are_409(
    client: Any, new_caller: NewCaller, api_pool: MakeApiPool, pools_runtime: Runtime
) -> None:
    manager = await new_caller("desktops:manage")
    pool = await api_pool()
    (provisioning,) = await desktops_in(pools_runtime, pool, 1, DesktopState.PROVISIONING)
    (deleting,) = await desktops_in(pools_runtime, pool, 1, DesktopState.DELETING)
    cases = [
        (provisioning, "rebuild", "illegal_transition"),
        (provisioning, "power_on", "desktop_action_not_allowed"),
        (deleting, "delete", "illegal_transition"),
        (deleting, "restart", "desktop_action_not_allowed"),
    ]
    for desktop_id, action, code in cases:
        response = await client.post(
            f"{DESKTOPS}/{desktop_id}/actions", json={"action": action}, headers=manager.headers
        )
        assert response.status == 409, (action, await response.text())
        assert (await response.json())["code"] == code
    allowed = await client.post(
        f"{DESKTOPS}/{provisioning}/actions", json={"action": "delete"}, headers=manager.headers
    )
    assert allowed.status == 202
    async with pools_runtime.db.acquire() as connection:
        queued = await connection.fetchval(
            "SELECT count(*) FROM jobs WHERE resource_type = 'desktops' AND resource_id = $1",
            provisioning,
        )
    assert queued == 1


async def test_assignment_in_a_persistent_pool(
    client: Any, new_caller: NewCaller, api_pool: MakeApiPool, pools_runtime: Runtime
) -> None:
    manager = await new_caller("desktops:manage")
    alice, bob = await new_caller(), await new_caller()
    pool = await api_pool(kind=PoolKind.PERSISTENT)
    await entitle(pools_runtime, pool, alice, bob)
    (desktop_id,) = await desktops_in(pools_runtime, pool, 1)
    url = f"{DESKTOPS}/{desktop_id}/assignment"

    assigned = await client.put(url, json={"user_id": alice.id}, headers=manager.headers)
    assert assigned.status == 200, await assigned.text()
    assert (await assigned.json())["assigned_user"] == alice.id
    again = await client.put(url, json={"user_id": alice.id}, headers=manager.headers)
    assert again.status == 200
    taken = await client.put(url, json={"user_id": bob.id}, headers=manager.headers)
    assert taken.status == 409
    assert (await taken.json())["code"] == "illegal_transition"
    unknown = await client.put(url, json={"user_id": str(uuid.uuid4())}, headers=manager.headers)
    assert unknown.status == 422

    unassigned = await client.delete(url, headers=manager.headers)
    assert unassigned.status == 200
    assert (await unassigned.json())["assigned_user"] is None
    async with pools_runtime.db.acquire() as connection:
        rows = await connection.fetch(
            "SELECT action FROM audit_events WHERE resource_id = $1 ORDER BY id", desktop_id
        )
    assert [row["action"] for row in rows] == ["desktop.assign", "desktop.unassign"]


async def entitle(runtime: Runtime, pool: Pool, *users: Caller, group: str | None = None) -> None:
    """Entitle ``users`` (and ``group``) to ``pool``, as a holder of ``pools:manage`` would."""
    subjects = [("user", uuid.UUID(user.id)) for user in users]
    subjects += [("group", uuid.UUID(group))] if group else []
    async with runtime.db.acquire() as connection:
        for subject_type, subject_id in subjects:
            await connection.execute(
                "INSERT INTO pool_entitlements (pool_id, subject_type, subject_id) "
                "VALUES ($1, $2, $3)",
                pool.id,
                subject_type,
                subject_id,
            )


async def test_assigning_a_desktop_to_someone_not_entitled_needs_pools_manage(
    client: Any, new_caller: NewCaller, api_pool: MakeApiPool, pools_runtime: Runtime
) -> None:
    """A desktop assigned is a desktop handed out: only who may manage pools hands one out."""
    manager = await new_caller("desktops:manage")
    pool = await api_pool(kind=PoolKind.PERSISTENT)
    first, second = await desktops_in(pools_runtime, pool, 2)
    outsider = await new_caller()
    for who in (manager, outsider):  # herself included
        refused = await client.put(
            f"{DESKTOPS}/{first}/assignment", json={"user_id": who.id}, headers=manager.headers
        )
        assert refused.status == 403, await refused.text()
        problem = await refused.json()
        assert (problem["code"], problem["missing_permissions"]) == (
            "escalation_denied",
            ["pools:manage"],
        )
    async with pools_runtime.db.acquire() as connection:
        assert (
            await connection.fetchval(
                "SELECT assigned_user FROM desktops WHERE id = $1", uuid.UUID(first)
            )
            is None
        )
        denied = await connection.fetchval(
            "SELECT count(*) FROM audit_events WHERE action = 'access.escalation_denied' "
            "AND actor = $1 AND outcome = 'denied'",
            manager.id,
        )
    assert denied == 2

    # Entitled through a group she is a member of: the assignment is the manager's to make.
    async with pools_runtime.db.acquire() as connection:
        group = await connection.fetchval(
            "INSERT INTO groups (key, name) VALUES ($1, $1) RETURNING id::text",
            f"g-{uuid.uuid4().hex[:8]}",
        )
    await entitle(pools_runtime, pool, group=group)
    member = await new_caller(groups=[group])
    assigned = await client.put(
        f"{DESKTOPS}/{first}/assignment", json={"user_id": member.id}, headers=manager.headers
    )
    assert assigned.status == 200, await assigned.text()
    # Who may manage pools assigns anyone.
    both = await new_caller("desktops:manage", "pools:manage")
    assigned = await client.put(
        f"{DESKTOPS}/{second}/assignment", json={"user_id": outsider.id}, headers=both.headers
    )
    assert assigned.status == 200, await assigned.text()


async def test_assignment_is_refused_in_a_non_persistent_pool(
    client: Any, new_caller: NewCaller, api_pool: MakeApiPool, pools_runtime: Runtime
) -> None:
    manager, alice = await new_caller("desktops:manage"), await new_caller()
    pool = await api_pool()
    (desktop_id,) = await desktops_in(pools_runtime, pool, 1)
    url = f"{DESKTOPS}/{desktop_id}/assignment"
    for response in (
        await client.put(url, json={"user_id": alice.id}, headers=manager.headers),
        await client.delete(url, headers=manager.headers),
    ):
        assert response.status == 409
        assert (await response.json())["code"] == "pool_not_persistent"


async def test_pools_manage_cannot_list_desktops_and_desktops_read_cannot_act_on_one(
    client: Any, new_caller: NewCaller, api_pool: MakeApiPool, pools_runtime: Runtime
) -> None:
    reader, nobody = await new_caller("desktops:read"), await new_caller("pools:manage")
    pool = await api_pool()
    (desktop_id,) = await desktops_in(pools_runtime, pool, 1)
    assert (await client.get(DESKTOPS, headers=nobody.headers)).status == 403
    refused = await client.post(
        f"{DESKTOPS}/{desktop_id}/actions", json={"action": "restart"}, headers=reader.headers
    )
    assert refused.status == 403


async def test_jobs_name_their_resource_in_one_read(
    client: Any, new_caller: NewCaller, api_pool: MakeApiPool, pools_runtime: Runtime
) -> None:
    """Issue 37 ("no UUID where a name exists"): a job names its desktop, pool or cluster."""
    reader = await new_caller("jobs:read")
    pool = await api_pool()
    (desktop_id,) = await desktops_in(pools_runtime, pool, 1)
    async with pools_runtime.db.acquire() as connection:
        desktop_name = await connection.fetchval(
            "SELECT name FROM desktops WHERE id = $1", uuid.UUID(desktop_id)
        )
        cluster_name = await connection.fetchval(
            "SELECT name FROM clusters WHERE id = $1", pool.cluster_id
        )
        targets = [
            ("desktops", desktop_id, desktop_name),
            ("pools", str(pool.id), pool.name),
            ("clusters", str(pool.cluster_id), cluster_name),
            ("desktops", str(uuid.uuid4()), None),
            ("desktops", "not-a-uuid", None),
            ("sessions", str(uuid.uuid4()), None),
        ]
        ids = [
            (await queue.enqueue(connection, "names.test", resource_type=kind, resource_id=rid)).id
            for kind, rid, _ in targets
        ]
    listed = await client.get("/api/v1/jobs?kind=names.test&limit=50", headers=reader.headers)
    assert listed.status == 200, await listed.text()
    items = {item["id"]: item for item in (await listed.json())["items"]}
    for job_id, (kind, rid, name) in zip(ids, targets, strict=True):
        assert (items[job_id]["resource_type"], items[job_id]["resource_id"]) == (kind, rid)
        assert items[job_id]["resource_name"] == name, kind
    one = await (await client.get(f"/api/v1/jobs/{ids[0]}", headers=reader.headers)).json()
    assert one["resource_name"] == desktop_name
