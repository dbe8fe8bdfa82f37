"""Entitlements and opening desktops over HTTP: who may open a pool, and who gets what."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tests.support.pools import (
    TUNNEL_URL,
    Caller,
    pool_model,
    ready_desktops,
)

from deskpool.pools import store as store_pools
from deskpool.pools.model import DesktopState, Pool, PoolKind, PoolState
from deskpool.runtime import Runtime

POOLS = "/api/v1/pools"
MY_POOLS = "/api/v1/me/pools"

NewCaller = Callable[..., Awaitable[Caller]]
NewCluster = Callable[..., Awaitable[str]]
MakeApiPool = Callable[..., Awaitable[Pool]]


@pytest.fixture
def api_pool(pools_runtime: Runtime, api_cluster: NewCluster) -> MakeApiPool:
    """``await api_pool(ready=0, **fields)``: a stored pool with ``ready`` desktops (real VMs)."""

    async def make(ready: int = 0, **overrides: Any) -> Pool:
        cluster_id = uuid.UUID(await api_cluster())
        pool = pool_model(cluster_id, template="ubuntu-22.04", **overrides)
        async with pools_runtime.db.acquire() as connection:
            record = await store_pools.create_pool(connection, pool)
        await ready_desktops(pools_runtime, record.pool, ready)
        return record.pool

    return make


async def new_group(runtime: Runtime) -> str:
    async with runtime.db.acquire() as connection:
        group_id = await connection.fetchval(
            "INSERT INTO groups (key, name) VALUES ($1, 'Lab users') RETURNING id",
            f"lab-{uuid.uuid4().hex[:8]}",
        )
    return str(group_id)


async def entitle(
    client: Any, manager: Caller, pool: Pool, subject_type: str, subject_id: str
) -> Any:
    return await client.post(
        f"{POOLS}/{pool.id}/entitlements",
        json={"subject_type": subject_type, "subject_id": subject_id},
        headers=manager.headers,
    )


async def test_grant_list_and_revoke(
    client: Any, new_caller: NewCaller, api_pool: MakeApiPool, pools_runtime: Runtime
) -> None:
    manager, reader = await new_caller("pools:manage"), await new_caller("pools:read")
    alice = await new_caller()
    group = await new_group(pools_runtime)
    pool = await api_pool()

    granted = await entitle(client, manager, pool, "user", alice.id)
    assert granted.status == 201
    assert (await granted.json())["subject_id"] == alice.id
    assert (await entitle(client, manager, pool, "user", alice.id)).status == 200
    assert (await entitle(client, manager, pool, "group", group)).status == 201
    unknown = await entitle(client, manager, pool, "group", str(uuid.uuid4()))
    assert unknown.status == 422
    assert (await entitle(client, reader, pool, "user", alice.id)).status == 403

    url = f"{POOLS}/{pool.id}/entitlements"
    first = await (await client.get(f"{url}?limit=1", headers=reader.headers)).json()
    rest = await (
        await client.get(f"{url}?limit=1&cursor={first['next']}", headers=reader.headers)
    ).json()
    listed = [(e["subject_type"], e["subject_id"]) for e in first["items"] + rest["items"]]
    assert listed == [("group", group), ("user", alice.id)]

    revoke = f"{url}/user/{alice.id}"
    assert (await client.delete(revoke, headers=manager.headers)).status == 204
    assert (await client.delete(revoke, headers=manager.headers)).status == 404
    assert (await client.delete(f"{url}/robot/{alice.id}", headers=manager.headers)).status == 404
    async with pools_runtime.db.acquire() as connection:
        rows = await connection.fetch(
            "SELECT action FROM audit_events WHERE resource_id = $1 ORDER BY id", str(pool.id)
        )
    assert [row["action"] for row in rows] == [
        "pool.entitlement.grant",
        "pool.entitlement.grant",
        "pool.entitlement.revoke",
    ]


async def test_my_pools_lists_entitled_pools_with_availability(
    client: Any, new_caller: NewCaller, api_pool: MakeApiPool, pools_runtime: Runtime
) -> None:
    manager = await new_caller("pools:manage")
    group = await new_group(pools_runtime)
    alice = await new_caller(groups=[group])
    direct = await api_pool(ready=1)
    through_group = await api_pool(max_size=0)  # nothing ready, and it may not grow
    grows = await api_pool()  # nothing ready, but opening it builds one
    disabled = await api_pool(ready=1, state=PoolState.DISABLED)
    hidden = await api_pool(ready=1)
    await entitle(client, manager, direct, "user", alice.id)
    await entitle(client, manager, disabled, "user", alice.id)
    await entitle(client, manager, through_group, "group", group)
    await entitle(client, manager, grows, "user", alice.id)

    page = await (await client.get(MY_POOLS, headers=alice.headers)).json()
    availability = {item["id"]: item["availability"] for item in page["items"]}
    assert availability == {
        str(direct.id): "available",
        str(through_group.id): "no_desktop_available",
        str(grows.id): "startable",
        str(disabled.id): "disabled",
    }
    assert str(hidden.id) not in availability

    opened = await client.post(f"{MY_POOLS}/{direct.id}/desktop", headers=alice.headers)
    assert opened.status == 200
    desktop = await opened.json()
    page = await (await client.get(MY_POOLS, headers=alice.headers)).json()
    mine = next(item for item in page["items"] if item["id"] == str(direct.id))
    assert mine["desktop"] == {"id": desktop["id"], "name": desktop["name"], "state": "in_use"}
    assert mine["availability"] == "available"  # a reconnect
    nobody = await new_caller()
    assert (await (await client.get(MY_POOLS, headers=nobody.headers)).json())["items"] == []


async def test_opening_a_desktop(
    client: Any, new_caller: NewCaller, api_pool: MakeApiPool, pools_runtime: Runtime
) -> None:
    manager = await new_caller("pools:manage")
    alice, stranger = await new_caller(), await new_caller("desktops:manage")
    pool = await api_pool(ready=1, max_size=1)
    await entitle(client, manager, pool, "user", alice.id)
    url = f"{MY_POOLS}/{pool.id}/desktop"

    # A pool the caller may not open and one that does not exist answer alike.
    missing = uuid.uuid4()
    refused = await client.post(url, headers=stranger.headers)
    absent = await client.post(f"{MY_POOLS}/{missing}/desktop", headers=stranger.headers)
    assert refused.status == absent.status == 404
    assert refused.headers["Content-Type"] == absent.headers["Content-Type"]
    bodies = [await refused.json(), await absent.json()]
    for body, pool_id in zip(bodies, (pool.id, missing), strict=True):
        del body["request_id"]
        body["detail"] = body["detail"].replace(str(pool_id), "<id>")
        body["instance"] = body["instance"].replace(str(pool_id), "<id>")
    assert bodies[0] == bodies[1]
    assert (
        await client.post(f"{MY_POOLS}/{uuid.uuid4()}/desktop", headers=alice.headers)
    ).status == 404
    opened = await client.post(url, headers=alice.headers)
    assert opened.status == 200
    desktop = await opened.json()
    assert desktop["state"] == "in_use"
    assert desktop["pool_id"] == str(pool.id)
    connection = desktop["connection"]
    assert connection["url"] == TUNNEL_URL
    assert connection["protocol"] == "vnc"
    assert len(connection["token"]) >= 40
    reconnect = await (await client.post(url, headers=alice.headers)).json()
    assert reconnect["id"] == desktop["id"]
    assert reconnect["connection"]["token"] != connection["token"]

    # The one desktop is taken and the pool is at its maximum: the pool's manager (not
    # entitled) gets a 503 with Retry-After.
    none_left = await client.post(url, headers=manager.headers)
    assert none_left.status == 503
    assert none_left.headers["Retry-After"] == "20"
    assert (await none_left.json())["code"] == "no_desktop_available"

    await client.patch(f"{POOLS}/{pool.id}", json={"state": "disabled"}, headers=manager.headers)
    unavailable = await client.post(url, headers=alice.headers)
    assert unavailable.status == 409
    assert (await unavailable.json())["code"] == "pool_unavailable"
    async with pools_runtime.db.acquire() as connection:
        actions = await connection.fetch(
            "SELECT action, details FROM audit_events WHERE resource_id = $1", desktop["id"]
        )
    assert [row["action"] for row in actions] == ["desktop.allocate", "desktop.allocate"]


async def test_a_persistent_pool_gives_the_same_desktop_back(
    client: Any, new_caller: NewCaller, api_pool: MakeApiPool, pools_runtime: Runtime
) -> None:
    manager, alice = await new_caller("pools:manage"), await new_caller()
    pool = await api_pool(ready=3, kind=PoolKind.PERSISTENT)
    await entitle(client, manager, pool, "user", alice.id)
    url = f"{MY_POOLS}/{pool.id}/desktop"
    first = await (await client.post(url, headers=alice.headers)).json()
    async with pools_runtime.db.acquire() as connection:  # the user logs off
        await connection.execute(
            "UPDATE desktops SET state = 'ready' WHERE id = $1::uuid", first["id"]
        )
    again = await (await client.post(url, headers=alice.headers)).json()
    assert again["id"] == first["id"]
    async with pools_runtime.db.acquire() as connection:  # the desktop is being rebuilt
        await connection.execute(
            "UPDATE desktops SET state = 'refreshing' WHERE id = $1::uuid", first["id"]
        )
    # On its way to ready: she waits for it (a pending connection), not for another one.
    waiting = await client.post(url, headers=alice.headers)
    assert waiting.status == 202
    assert (await waiting.json())["id"] == first["id"]
    async with pools_runtime.db.acquire() as connection:  # the rebuild failed
        await connection.execute(
            "UPDATE desktops SET state = 'failed' WHERE id = $1::uuid", first["id"]
        )
    not_ready = await client.post(url, headers=alice.headers)
    assert not_ready.status == 503
    assert (await not_ready.json())["code"] == "desktop_not_ready"
    assert "Retry-After" in not_ready.headers


async def test_concurrent_requests_never_share_a_desktop(
    client: Any, new_caller: NewCaller, api_pool: MakeApiPool, pools_runtime: Runtime
) -> None:
    ready = 4
    manager = await new_caller("pools:manage")
    group = await new_group(pools_runtime)
    pool = await api_pool(ready=ready, max_size=ready)  # at its maximum: it does not grow
    await entitle(client, manager, pool, "group", group)
    users = [await new_caller(groups=[group]) for _ in range(2 * ready)]
    url = f"{MY_POOLS}/{pool.id}/desktop"

    async def open_desktop(user: Caller) -> tuple[int, str | None]:
        response = await client.post(url, headers=user.headers)
        body = await response.json()
        return response.status, body.get("id") if response.status == 200 else None

    results = await asyncio.gather(*(open_desktop(user) for user in users))
    handed = [desktop_id for status, desktop_id in results if status == 200]
    assert len(handed) == ready
    assert len(set(handed)) == ready
    assert sorted(status for status, _ in results) == [200] * ready + [503] * ready
    async with pools_runtime.db.acquire() as connection:
        states = await connection.fetch(
            "SELECT state, assigned_user FROM desktops WHERE pool_id = $1", pool.id
        )
    assert {row["state"] for row in states} == {DesktopState.IN_USE.value}
    assert len({row["assigned_user"] for row in states}) == ready
