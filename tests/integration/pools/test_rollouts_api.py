"""The rollouts API over HTTP, the image history and the notices in ``/me/desktops``.

Start, one active rollout per pool, pause, resume, cancel, the 409 on a direct template
change, the desktops counted by template; everything audited.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.pools import (
    Caller,
    add_desktops,
    pool_body,
)

from deskpool.notices import service as notices
from deskpool.pools import store as store_pools
from deskpool.pools.model import DesktopState
from deskpool.runtime import Runtime

POOLS = "/api/v1/pools"
TEMPLATES = [{"name": "ubuntu-22.04"}, {"name": "ubuntu-24.04"}, {"name": "w11", "os": "windows"}]

NewCaller = Callable[..., Awaitable[Caller]]
NewCluster = Callable[..., Awaitable[str]]


async def send(client: Any, method: str, path: str, caller: Caller, status: int, **kw: Any) -> Any:
    response = await client.request(method, path, headers=caller.headers, **kw)
    assert response.status == status, await response.text()
    return await response.json() if response.status != 204 else None


async def audit_actions(runtime: Runtime, resource_id: str) -> list[str]:
    async with runtime.db.acquire() as connection:
        rows = await connection.fetch(
            "SELECT action FROM audit_events WHERE resource_id = $1 ORDER BY id", resource_id
        )
    return [row["action"] for row in rows]


async def test_a_rollout_is_started_followed_paused_resumed_and_cancelled(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster, pools_runtime: Runtime
) -> None:
    manager, reader = await new_caller("pools:manage"), await new_caller("pools:read")
    cluster_id = await api_cluster(templates=TEMPLATES)
    pool = await send(client, "POST", POOLS, manager, 201, json=pool_body(cluster_id, spare=2))
    pool_id = pool["id"]
    assert pool["template"] == "9000"
    rollouts = f"{POOLS}/{pool_id}/rollouts"

    # The strategy is validated; an unknown template is a field error.
    bad = await send(
        client, "POST", rollouts, manager, 422, json={"template": "ubuntu-22.04", "batch_size": 0}
    )
    assert {e["pointer"] for e in bad["errors"]} == {"/batch_size"}
    bad = await send(client, "POST", rollouts, manager, 422, json={"template": "no-such"})
    assert {e["pointer"] for e in bad["errors"]} == {"/template"}
    # A template of another OS than the pool's is the template's error (the rollout has no OS).
    bad = await send(client, "POST", rollouts, manager, 422, json={"template": "w11"})
    assert [(e["pointer"], e["detail"]) for e in bad["errors"]] == [
        ("/template", "The template 'w11' is a windows template, not linux.")
    ]
    await send(client, "POST", rollouts, reader, 403, json={"template": "ubuntu-24.04"})

    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    started = await send(
        client,
        "POST",
        rollouts,
        manager,
        201,
        json={"template": "ubuntu-24.04", "in_use": "force_logoff", "start_at": later},
    )
    assert (started["state"], started["from_template"], started["to_template"]) == (
        "scheduled",
        "9000",
        "9001",
    )
    assert (started["canary"], started["batch_size"], started["min_ready"]) == (1, 1, 2)
    assert started["counts"]["percent"] == 100  # no desktops yet
    one = f"{rollouts}/{started['id']}"

    # One active rollout per pool; the pool's template cannot change under it.
    again = await send(client, "POST", rollouts, manager, 409, json={"template": "ubuntu-24.04"})
    assert again["code"] == "rollout_conflict"
    patched = await send(
        client, "PATCH", f"{POOLS}/{pool_id}", manager, 409, json={"template": "ubuntu-24.04"}
    )
    assert patched["code"] == "rollout_conflict"

    listed = await send(client, "GET", rollouts, reader, 200)
    assert [item["id"] for item in listed["items"]] == [started["id"]]
    assert (await send(client, "GET", one, reader, 200))["state"] == "scheduled"
    await send(client, "GET", f"{rollouts}/{uuid.uuid4()}", reader, 404)

    paused = await send(client, "POST", f"{one}/pause", manager, 200)
    assert paused["state"] == "paused"
    await send(client, "POST", f"{one}/pause", manager, 409)
    resumed = await send(client, "POST", f"{one}/resume", manager, 200)
    assert resumed["state"] == "scheduled"
    cancelled = await send(client, "POST", f"{one}/cancel", manager, 200)
    assert cancelled["state"] == "cancelled"
    assert cancelled["finished_at"] is not None
    await send(client, "POST", f"{one}/resume", manager, 409)

    # Now the template may change directly; the history lists every template.
    await send(client, "PATCH", f"{POOLS}/{pool_id}", manager, 200, json={"template": "9001"})
    images = await send(client, "GET", f"{POOLS}/{pool_id}/images", reader, 200)
    assert [(i["template"], i["how"]) for i in images["items"]] == [
        ("9001", "changed"),
        ("9000", "created"),
    ]
    assert await audit_actions(pools_runtime, pool_id) == [
        "pool.create",
        "rollout.create",
        "rollout.paused",
        "rollout.pause",
        "rollout.scheduled",
        "rollout.resume",
        "rollout.cancelled",
        "rollout.cancel",
        "pool.update",
    ]


async def test_the_pool_counts_desktops_by_template(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster, pools_runtime: Runtime
) -> None:
    manager = await new_caller("pools:manage")
    pool = await send(client, "POST", POOLS, manager, 201, json=pool_body(await api_cluster()))
    record = await store_pools.get_pool(pools_runtime.db, uuid.UUID(pool["id"]))
    assert record is not None
    async with pools_runtime.db.acquire() as connection:
        await add_desktops(connection, record, 2)
        [newer] = await add_desktops(connection, record, 1)
        await connection.execute("UPDATE desktops SET template = '9001' WHERE id = $1", newer)
    shown = await send(client, "GET", f"{POOLS}/{pool['id']}", manager, 200)
    assert shown["counts"]["by_template"] == {"9001": 1, "tpl-ubuntu": 2}


async def test_a_notice_reaches_the_user_in_me_desktops(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster, pools_runtime: Runtime
) -> None:
    manager, user = await new_caller("pools:manage"), await new_caller()
    pool = await send(client, "POST", POOLS, manager, 201, json=pool_body(await api_cluster()))
    record = await store_pools.get_pool(pools_runtime.db, uuid.UUID(pool["id"]))
    assert record is not None
    ends_at = datetime.now(UTC) + timedelta(minutes=5)
    async with pools_runtime.db.acquire() as connection:
        [desktop_id] = await add_desktops(
            connection, record, 1, DesktopState.IN_USE, assigned_user=uuid.UUID(user.id)
        )
        async with connection.transaction():
            await notices.warn(
                connection,
                desktop_id=desktop_id,
                pool_id=record.id,
                user_id=user.id,
                ends_at=ends_at,
                reason="image_rollout",
                message="A new image is coming",
                source="test",
            )
    mine = await send(client, "GET", "/api/v1/me/desktops", user, 200)
    [item] = mine["items"]
    assert item["id"] == str(desktop_id)
    assert item["notice"]["reason"] == "image_rollout"
    assert item["notice"]["message"] == "A new image is coming"
    assert datetime.fromisoformat(item["notice"]["ends_at"]) == ends_at
    others = await send(client, "GET", "/api/v1/me/desktops", manager, 200)
    assert others["items"] == []
    async with pools_runtime.db.acquire() as connection:
        await notices.clear(connection, source="test")
    mine = await send(client, "GET", "/api/v1/me/desktops", user, 200)
    assert mine["items"][0]["notice"] is None


async def test_pausing_withdraws_the_warnings_given(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster, pools_runtime: Runtime
) -> None:
    manager, user = await new_caller("pools:manage"), await new_caller()
    cluster_id = await api_cluster(templates=TEMPLATES)
    pool = await send(client, "POST", POOLS, manager, 201, json=pool_body(cluster_id))
    record = await store_pools.get_pool(pools_runtime.db, uuid.UUID(pool["id"]))
    assert record is not None
    rollouts = f"{POOLS}/{pool['id']}/rollouts"
    started = await send(
        client,
        "POST",
        rollouts,
        manager,
        201,
        json={"template": "ubuntu-24.04", "in_use": "force_logoff", "warning_seconds": 60},
    )
    ends_at = datetime.now(UTC) + timedelta(seconds=60)
    async with pools_runtime.db.acquire() as connection:
        [desktop_id] = await add_desktops(
            connection, record, 1, DesktopState.IN_USE, assigned_user=uuid.UUID(user.id)
        )
        # As a rolling pass leaves it: the user of the desktop in use was warned.
        await connection.execute(
            "UPDATE rollouts SET state = 'rolling' WHERE id = $1", uuid.UUID(started["id"])
        )
        await connection.execute(
            """INSERT INTO rollout_desktops (rollout_id, desktop_id, desktop_name, role, state,
                      warned_at, logoff_at)
               VALUES ($1, $2, 'warned-one', 'batch', 'warned', now(), $3)""",
            uuid.UUID(started["id"]),
            desktop_id,
            ends_at,
        )
        await notices.warn(
            connection,
            desktop_id=desktop_id,
            pool_id=record.id,
            user_id=user.id,
            ends_at=ends_at,
            reason="image_rollout",
            message="",
            source=f"rollout:{started['id']}",
        )
    warned = await send(client, "GET", "/api/v1/me/desktops", user, 200)
    assert warned["items"][0]["notice"] is not None
    paused = await send(client, "POST", f"{rollouts}/{started['id']}/pause", manager, 200)
    assert paused["state"] == "paused"
    [entry] = paused["desktops"]
    assert (entry["state"], entry["warned_at"], entry["logoff_at"]) == (
        "waiting_for_logoff",
        None,
        None,
    )
    after = await send(client, "GET", "/api/v1/me/desktops", user, 200)
    assert after["items"][0]["notice"] is None
    resumed = await send(client, "POST", f"{rollouts}/{started['id']}/resume", manager, 200)
    assert resumed["state"] == "rolling"
