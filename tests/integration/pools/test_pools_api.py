"""The pools API over HTTP: create, validate, change, delete, reconcile; permissions; audit."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.pools import (
    Caller,
    add_desktops,
    pool_body,
)

from deskpool.pools import store as store_pools
from deskpool.pools.model import DesktopState
from deskpool.runtime import Runtime

POOLS = "/api/v1/pools"

NewCaller = Callable[..., Awaitable[Caller]]
NewCluster = Callable[..., Awaitable[str]]


async def create(client: Any, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(POOLS, json=body, headers=caller.headers)
    assert response.status == 201, await response.text()
    created: dict[str, Any] = await response.json()
    return created


def pointers(problem: dict[str, Any]) -> set[str]:
    return {error["pointer"] for error in problem["errors"]}


async def audit_actions(runtime: Runtime, resource_id: str) -> list[str]:
    async with runtime.db.acquire() as connection:
        rows = await connection.fetch(
            "SELECT action FROM audit_events WHERE resource_id = $1 ORDER BY id", resource_id
        )
    return [row["action"] for row in rows]


async def test_create_get_and_list(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster, pools_runtime: Runtime
) -> None:
    manager, reader = await new_caller("pools:manage"), await new_caller("pools:read")
    cluster_id = await api_cluster()
    created = await create(client, manager, pool_body(cluster_id, min_size=1, spare=2))
    assert created["template_check"] == {"status": "verified", "detail": None}
    # The simulator's defaults: a unique name becomes the id.
    template_ids = {"9000", "9001", "9002"}
    assert created["template"] in template_ids
    assert created["generation"] == 1
    assert created["reconciled_generation"] == 0
    assert created["health"] is None
    assert created["counts"]["total"] == 0
    assert set(created["counts"]["by_state"]) == {state.value for state in DesktopState}
    assert created["state"] == "enabled"
    assert created["domain_join"] is None

    fetched = await (await client.get(f"{POOLS}/{created['id']}", headers=reader.headers)).json()
    assert "template_check" not in fetched
    assert fetched["name"] == created["name"]

    second = await create(client, manager, pool_body(cluster_id, state="disabled"))
    page = await (await client.get(f"{POOLS}?limit=1", headers=reader.headers)).json()
    assert len(page["items"]) == 1
    rest = await (
        await client.get(f"{POOLS}?limit=1&cursor={page['next']}", headers=reader.headers)
    ).json()
    assert {page["items"][0]["id"], rest["items"][0]["id"]} == {created["id"], second["id"]}
    assert rest["next"] is None
    disabled = await (await client.get(f"{POOLS}?state=disabled", headers=reader.headers)).json()
    assert [item["id"] for item in disabled["items"]] == [second["id"]]
    assert await audit_actions(pools_runtime, created["id"]) == ["pool.create"]


async def test_invalid_settings_are_field_errors(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster
) -> None:
    manager = await new_caller("pools:manage")
    cluster_id = await api_cluster()
    cases: list[tuple[dict[str, Any], set[str]]] = [
        ({"min_size": 5, "max_size": 2}, {"/min_size"}),
        ({"naming_pattern": "lab"}, {"/naming_pattern"}),
        ({"naming_pattern": "lab-{n:0999999999}"}, {"/naming_pattern"}),
        ({"naming_pattern": "{n}-lab-with-a-long-name", "os_type": "windows"}, {"/naming_pattern"}),
        ({"target_nodes": ["a", "a"]}, {"/target_nodes/1"}),
        ({"cluster_id": str(uuid.uuid4())}, {"/cluster_id"}),
        ({"template": "no-such-template"}, {"/template"}),
        ({"template": "windows-11"}, {"/os_type"}),
        ({"max_size": 0, "kind": "sometimes"}, {"/max_size", "/kind"}),
        ({"name": " padded "}, {"/name"}),
        (
            {"domain_join": {"domain": "corp.example", "username": "j", "password": "x"}},
            {"/domain_join"},
        ),
    ]
    for changes, expected in cases:
        response = await client.post(
            POOLS, json=pool_body(cluster_id, **changes), headers=manager.headers
        )
        assert response.status == 422, (changes, await response.text())
        assert pointers(await response.json()) == expected, changes
    # A NUL is refused for every operation by the API's input guard, before the pool's rules.
    nul = await client.post(
        POOLS, json=pool_body(cluster_id, template="bad\x00"), headers=manager.headers
    )
    assert nul.status == 400
    assert (await nul.json())["errors"][0]["pointer"] == "/template"
    body = pool_body(cluster_id)
    await create(client, manager, body)
    taken = await client.post(
        POOLS, json={**pool_body(cluster_id), "name": body["name"].upper()}, headers=manager.headers
    )
    assert taken.status == 409
    assert (await taken.json())["code"] == "pool_name_taken"


async def test_a_template_the_driver_cannot_check_is_not_fatal(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster
) -> None:
    manager = await new_caller("pools:manage")
    locked = await api_cluster(required_token="expected-token-value")
    created = await create(client, manager, pool_body(locked, template="anything"))
    assert created["template_check"]["status"] == "not_verified"
    assert created["template_check"]["detail"].startswith("driver_authentication_failed")
    assert created["template"] == "anything"
    gone = await api_cluster(driver="gone")
    created = await create(client, manager, pool_body(gone))
    assert created["template_check"]["status"] == "not_verified"
    assert created["template_check"]["detail"].startswith("driver_not_installed")


async def test_changes_bump_the_generation_and_respect_desktops(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster, pools_runtime: Runtime
) -> None:
    manager = await new_caller("pools:manage")
    created = await create(client, manager, pool_body(await api_cluster()))
    one = f"{POOLS}/{created['id']}"

    async def patch(body: dict[str, Any], status: int = 200) -> dict[str, Any]:
        response = await client.patch(one, json=body, headers=manager.headers)
        assert response.status == status, await response.text()
        result: dict[str, Any] = await response.json()
        return result

    renamed = await patch({"name": created["name"] + "-x", "description": "Lab"})
    assert renamed["generation"] == 1
    assert renamed["template_check"]["status"] == "not_checked"
    resized = await patch({"max_size": 4})
    assert resized["generation"] == 2
    assert pointers(await patch({"min_size": 9}, 422)) == {"/min_size"}
    assert pointers(await patch({"template": "nope"}, 422)) == {"/template"}
    windows = await patch({"template": "windows-11", "os_type": "windows"})
    assert windows["template_check"]["status"] == "verified"
    assert windows["generation"] == 3

    pool = await store_pools.get_pool(pools_runtime.db, uuid.UUID(created["id"]))
    assert pool is not None
    async with pools_runtime.db.acquire() as connection:
        await add_desktops(connection, pool, 2)
    assert pointers(await patch({"kind": "persistent"}, 422)) == {"/kind"}
    draining = await patch({"state": "draining"})
    assert draining["generation"] == 4
    assert draining["counts"]["by_state"]["ready"] == 2
    assert draining["counts"]["available"] == 2
    assert await audit_actions(pools_runtime, created["id"]) == [
        "pool.create",
        "pool.update",
        "pool.update",
        "pool.update",
        "pool.update",
    ]


async def test_domain_join_password_is_write_only(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster, leak_guard: Any
) -> None:
    manager = await new_caller("pools:manage")
    password = leak_guard.plaintext("domain-join")
    join = {"domain": "corp.example", "username": "joiner", "password": password}
    body = pool_body(
        await api_cluster(),
        template="windows-11",
        os_type="windows",
        naming_pattern="w{n:03}",
        domain_join=join,
    )
    created = await create(client, manager, body)
    assert created["domain_join"]["password"]["set"] is True
    assert created["domain_join"]["organizational_unit"] is None
    assert leak_guard.found_in(str(created)) == []
    one = f"{POOLS}/{created['id']}"
    without_password = {"domain": "corp.example", "username": "other"}
    kept = await client.patch(one, json={"domain_join": without_password}, headers=manager.headers)
    assert kept.status == 200
    kept_body = await kept.json()
    assert kept_body["domain_join"]["username"] == "other"
    assert kept_body["domain_join"]["password"]["set"] is True
    removed = await client.patch(one, json={"domain_join": None}, headers=manager.headers)
    assert (await removed.json())["domain_join"] is None
    missing = await client.patch(
        one, json={"domain_join": without_password}, headers=manager.headers
    )
    assert missing.status == 422
    assert pointers(await missing.json()) == {"/domain_join/password"}


async def test_only_an_empty_pool_is_deleted(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster, pools_runtime: Runtime
) -> None:
    manager = await new_caller("pools:manage")
    created = await create(client, manager, pool_body(await api_cluster()))
    one = f"{POOLS}/{created['id']}"
    pool = await store_pools.get_pool(pools_runtime.db, uuid.UUID(created["id"]))
    assert pool is not None
    async with pools_runtime.db.acquire() as connection:
        (desktop_id,) = await add_desktops(connection, pool, 1)
    refused = await client.delete(one, headers=manager.headers)
    assert refused.status == 409
    problem = await refused.json()
    assert problem["code"] == "pool_not_empty"
    assert problem["desktops"] == 1
    async with pools_runtime.db.acquire() as connection:
        await connection.execute("DELETE FROM desktops WHERE id = $1", desktop_id)
    assert (await client.delete(one, headers=manager.headers)).status == 204
    assert (await client.get(one, headers=manager.headers)).status == 404
    assert (await client.delete(one, headers=manager.headers)).status == 404
    assert (await audit_actions(pools_runtime, created["id"]))[-1] == "pool.delete"


async def test_creating_changing_and_asking_enqueue_a_reconciliation(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster, pools_runtime: Runtime
) -> None:
    manager = await new_caller("pools:manage")
    created = await create(client, manager, pool_body(await api_cluster()))
    url = f"{POOLS}/{created['id']}/reconcile"
    first = await client.post(url, headers=manager.headers)
    assert first.status == 202
    job = await first.json()
    assert job["kind"] == "pool.reconcile"
    assert job["payload"] == {"pool_id": created["id"]}
    assert (job["resource_type"], job["resource_id"]) == ("pools", created["id"])
    async with pools_runtime.db.acquire() as connection:
        jobs = await connection.fetch(
            "SELECT id FROM jobs WHERE kind = 'pool.reconcile' AND resource_id = $1",
            created["id"],
        )
    assert [row["id"] for row in jobs] == [job["id"]]  # the one creating the pool enqueued
    again = await (await client.post(url, headers=manager.headers)).json()
    assert again["id"] == job["id"]
    async with pools_runtime.db.acquire() as connection:  # a worker starts it
        await connection.execute("UPDATE jobs SET state = 'running' WHERE id = $1", job["id"])
    await client.patch(f"{POOLS}/{created['id']}", json={"max_size": 3}, headers=manager.headers)
    changed = await (await client.post(url, headers=manager.headers)).json()
    assert changed["id"] != job["id"]
    assert changed["state"] == "queued"


async def test_pools_read_reads_but_cannot_change_and_bad_ids_or_cursors_are_refused(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster
) -> None:
    manager, reader = await new_caller("pools:manage"), await new_caller("pools:read")
    nobody = await new_caller()
    created = await create(client, manager, pool_body(await api_cluster()))
    one = f"{POOLS}/{created['id']}"
    assert (await client.get(one, headers=reader.headers)).status == 200
    assert (await client.get(POOLS, headers=nobody.headers)).status == 403
    assert (await client.patch(one, json={}, headers=reader.headers)).status == 403
    assert (await client.delete(one, headers=reader.headers)).status == 403
    assert (await client.post(f"{one}/reconcile", headers=reader.headers)).status == 403
    assert (await client.get(f"{POOLS}/not-a-uuid", headers=reader.headers)).status == 404
    assert (await client.get(f"{POOLS}?cursor=AAAA", headers=reader.headers)).status == 400
