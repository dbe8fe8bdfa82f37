"""Cluster connections through the real API, with the test identity provider and real drivers."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from tests.integration.seed import seed_user
from tests.support.clusters import (
    Callers,
)
from tests.support.pools import (
    pool_body,
)

from deskpool.clusters import driver_manager_for
from deskpool.runtime import Runtime
from deskpool.testing.certificates import self_signed

PROBLEM = "application/problem+json"
CLUSTERS = "/api/v1/clusters"
POOLS = "/api/v1/pools"


def simulator_cluster(name: str = "lab", **changes: Any) -> dict[str, Any]:
    return {"name": name, "driver": "simulator", "endpoint": "simulator://local", **changes}


async def create(client: Any, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(CLUSTERS, json=body, headers=headers)
    assert response.status == 201, await response.text()
    created: dict[str, Any] = await response.json()
    return created


def self_signed_pem() -> str:
    return self_signed().pem


async def audit_actions(runtime: Runtime, cluster_id: str) -> list[str]:
    rows = await runtime.db.fetch(
        "SELECT action FROM audit_events WHERE resource_type = 'clusters' AND resource_id = $1 "
        "ORDER BY id",
        cluster_id,
    )
    return [row["action"] for row in rows]


# ------------------------------------------------------------------------------- CRUD


async def test_create_read_change_and_delete(
    client: Any, callers: Callers, clusters_runtime: Runtime
) -> None:
    pem = self_signed_pem()
    body = simulator_cluster(
        credentials={"token": "not-checked-by-this-simulator"},
        tls={"ca_certificate": pem, "fingerprint": "ab" * 32},
        options={"cluster_name": "lab-sim"},
    )
    created = await create(client, callers.manager, body)
    cluster_id = created["id"]
    assert created["name"] == "lab"
    assert created["driver"] == "simulator"
    assert created["driver_status"] == "installed"
    assert created["endpoint"] == "simulator://local"
    assert created["tls"] == {
        "verify": True,
        "ca_certificate": pem.strip() + "\n",
        "fingerprint": ":".join(["AB"] * 32),
    }
    assert created["options"] == {"cluster_name": "lab-sim"}
    assert created["credentials"]["set"] is True
    first_change = created["credentials"]["changed_at"]
    assert first_change is not None
    assert created["last_check_at"] is None
    assert created["last_check_ok"] is None
    assert "not-checked-by-this-simulator" not in json.dumps(created)

    got = await client.get(f"{CLUSTERS}/{cluster_id}", headers=callers.reader)
    assert got.status == 200
    assert await got.json() == created

    listed = await client.get(CLUSTERS, headers=callers.reader)
    assert [item["id"] for item in (await listed.json())["items"]] == [cluster_id]

    renamed = await client.patch(
        f"{CLUSTERS}/{cluster_id}",
        json={"name": "Lab 2", "tls": {"fingerprint": None}, "options": {}},
        headers=callers.manager,
    )
    assert renamed.status == 200, await renamed.text()
    changed = await renamed.json()
    assert changed["name"] == "Lab 2"
    assert changed["tls"]["fingerprint"] is None
    assert changed["tls"]["ca_certificate"] == pem.strip() + "\n"
    assert changed["options"] == {}
    assert changed["credentials"]["changed_at"] == first_change
    assert changed["updated_at"] > created["updated_at"]

    rotated = await client.patch(
        f"{CLUSTERS}/{cluster_id}", json={"credentials": {"token": "t2"}}, headers=callers.manager
    )
    assert rotated.status == 200
    assert (await rotated.json())["credentials"]["changed_at"] > first_change

    removed = await client.patch(
        f"{CLUSTERS}/{cluster_id}", json={"credentials": None}, headers=callers.manager
    )
    assert (await removed.json())["credentials"] == {"set": False, "changed_at": None}

    deleted = await client.delete(f"{CLUSTERS}/{cluster_id}", headers=callers.manager)
    assert deleted.status == 204
    gone = await client.get(f"{CLUSTERS}/{cluster_id}", headers=callers.reader)
    assert gone.status == 404
    assert gone.content_type == PROBLEM
    assert await audit_actions(clusters_runtime, cluster_id) == [
        "cluster.create",
        "cluster.update",
        "cluster.update",
        "cluster.update",
        "cluster.delete",
    ]


async def test_deleting_a_cluster_deletes_its_credentials_and_driver_state(
    client: Any, callers: Callers, clusters_runtime: Runtime
) -> None:
    created = await create(client, callers.manager, simulator_cluster(credentials={"token": "x"}))
    manager = driver_manager_for(clusters_runtime)
    await manager.context_for(created["id"]).shared_state.set("cluster", b"{}")
    other = manager.context_for(uuid.uuid4()).shared_state
    await other.set("cluster", b"{}")
    prefix = manager.shared_state_prefix(created["id"])
    assert [key async for key in clusters_runtime.kv.scan_iter(match=prefix + "*")]

    deleted = await client.delete(f"{CLUSTERS}/{created['id']}", headers=callers.manager)
    assert deleted.status == 204
    assert await clusters_runtime.db.fetchval("SELECT count(*) FROM sealed_secrets") == 0
    assert [key async for key in clusters_runtime.kv.scan_iter(match=prefix + "*")] == []
    assert await other.get("cluster") == b"{}"


async def test_reading_needs_clusters_read_and_changing_needs_clusters_manage(
    client: Any, callers: Callers
) -> None:
    created = await create(client, callers.manager, simulator_cluster())
    one = f"{CLUSTERS}/{created['id']}"
    reads = [("GET", CLUSTERS), ("GET", one), ("GET", f"{one}/nodes"), ("GET", f"{one}/templates")]
    changes = [
        ("POST", CLUSTERS, simulator_cluster("other")),
        ("PATCH", one, {"name": "renamed"}),
        ("POST", f"{one}/check", None),
        ("DELETE", one, None),
    ]
    for method, path in reads:
        assert (await client.request(method, path)).status == 401, path
        assert (await client.request(method, path, headers=callers.nobody)).status == 403, path
        response = await client.request(method, path, headers=callers.reader)
        assert response.status == 200, f"{method} {path}: {await response.text()}"
    for method, path, body in changes:
        for headers in ({}, callers.nobody, callers.reader):
            response = await client.request(method, path, json=body, headers=headers)
            assert response.status == (401 if not headers else 403), f"{method} {path}"
            assert response.content_type == PROBLEM
    for method, path, body in changes:
        response = await client.request(method, path, json=body, headers=callers.manager)
        assert response.status in (200, 201, 204), f"{method} {path}: {await response.text()}"


async def test_list_pages_in_name_order_and_filters_by_driver(
    client: Any, callers: Callers, clusters_runtime: Runtime
) -> None:
    for name in ("charlie", "alpha", "bravo"):
        await create(client, callers.manager, simulator_cluster(name))
    await clusters_runtime.db.execute(
        "INSERT INTO clusters (name, driver, endpoint) VALUES ('delta', 'gone', 'x')"
    )
    first = await (await client.get(CLUSTERS, params={"limit": "2"}, headers=callers.reader)).json()
    assert [item["name"] for item in first["items"]] == ["alpha", "bravo"]
    second = await (
        await client.get(
            CLUSTERS, params={"limit": "2", "cursor": first["next"]}, headers=callers.reader
        )
    ).json()
    assert [item["name"] for item in second["items"]] == ["charlie", "delta"]
    assert second["next"] is None
    only = await (
        await client.get(CLUSTERS, params={"driver": "simulator"}, headers=callers.reader)
    ).json()
    assert [item["name"] for item in only["items"]] == ["alpha", "bravo", "charlie"]
    bad = await client.get(CLUSTERS, params={"cursor": "bm90IGpzb24"}, headers=callers.reader)
    assert bad.status == 400


# ------------------------------------------------------------------------------- validation


async def test_an_unknown_driver_is_422_listing_the_installed_drivers(
    client: Any, callers: Callers, clusters_runtime: Runtime
) -> None:
    response = await client.post(
        CLUSTERS, json=simulator_cluster(driver="vmware-esxi"), headers=callers.manager
    )
    assert response.status == 422
    assert response.content_type == PROBLEM
    problem = await response.json()
    assert problem["code"] == "validation_failed"
    installed = driver_manager_for(clusters_runtime).installed()
    assert "simulator" in installed
    assert problem["installed"] == installed
    assert [error["pointer"] for error in problem["errors"]] == ["/driver"]
    assert "simulator" in problem["errors"][0]["detail"]
    assert await clusters_runtime.db.fetchval("SELECT count(*) FROM clusters") == 0


@pytest.mark.parametrize(
    ("change", "pointer"),
    [
        ({"tls": {"fingerprint": "12:34"}}, "/tls/fingerprint"),
        ({"tls": {"ca_certificate": "-----BEGIN CERTIFICATE-----\nnope"}}, "/tls/ca_certificate"),
        ({"name": " padded "}, "/name"),
        ({"credentials": {"token": 42}}, "/credentials/token/value"),
        ({"driver": "simulator", "surprise": True}, "/surprise"),
    ],
)
async def test_invalid_fields_are_422_with_pointers(
    client: Any, callers: Callers, change: dict[str, Any], pointer: str
) -> None:
    response = await client.post(
        CLUSTERS, json=simulator_cluster(**change), headers=callers.manager
    )
    assert response.status == 422, await response.text()
    problem = await response.json()
    assert pointer in [error["pointer"] for error in problem["errors"]]


async def test_settings_the_driver_refuses_are_422_and_not_stored(
    client: Any, callers: Callers, clusters_runtime: Runtime
) -> None:
    # What the declaration cannot tell (a node that is not one of the nodes) the driver does.
    refused = await client.post(
        CLUSTERS,
        json=simulator_cluster(options={"offline_nodes": ["nowhere"]}),
        headers=callers.manager,
    )
    assert refused.status == 422
    problem = await refused.json()
    assert problem["code"] == "driver_configuration_invalid"
    assert "offline_nodes" in problem["detail"]
    assert await clusters_runtime.db.fetchval("SELECT count(*) FROM clusters") == 0

    created = await create(client, callers.manager, simulator_cluster())
    change = await client.patch(
        f"{CLUSTERS}/{created['id']}",
        json={"options": {"templates": "not a list"}},
        headers=callers.manager,
    )
    assert change.status == 422
    assert (await change.json())["code"] == "driver_configuration_invalid"
    unchanged = await client.get(f"{CLUSTERS}/{created['id']}", headers=callers.reader)
    assert (await unchanged.json())["options"] == {}


async def test_credentials_and_options_must_match_the_declared_fields(
    client: Any, callers: Callers, clusters_runtime: Runtime
) -> None:
    refused = await client.post(
        CLUSTERS,
        json=simulator_cluster(
            credentials={"password": "hunter2"},
            options={"boot_seconds": -1, "no_such_option": 1, "nodes": "sim-1"},
        ),
        headers=callers.manager,
    )
    assert refused.status == 422
    problem = await refused.json()
    assert problem["code"] == "validation_failed"
    assert [error["pointer"] for error in problem["errors"]] == [
        "/credentials/password",
        "/options/no_such_option",
        "/options/nodes",
        "/options/boot_seconds",
    ]
    assert "hunter2" not in json.dumps(problem)
    assert await clusters_runtime.db.fetchval("SELECT count(*) FROM clusters") == 0

    # A required credential is required: Proxmox VE's API token.
    proxmox = await client.post(
        CLUSTERS,
        json={
            "name": "pve",
            "driver": "proxmox",
            "endpoint": "pve.example.com",
            "credentials": {"token_id": "deskpool@pve!deskpool"},
            "options": {"request_timeout": "soon"},
        },
        headers=callers.manager,
    )
    assert proxmox.status == 422
    errors = (await proxmox.json())["errors"]
    assert [error["pointer"] for error in errors] == [
        "/credentials/token_secret",
        "/options/request_timeout",
    ]

    created = await create(client, callers.manager, simulator_cluster())
    change = await client.patch(
        f"{CLUSTERS}/{created['id']}",
        json={"options": {"clone_failure_rate": 2, "seed": 1.5}},
        headers=callers.manager,
    )
    assert change.status == 422
    changed = await change.json()
    assert changed["code"] == "validation_failed"
    assert [error["pointer"] for error in changed["errors"]] == [
        "/options/clone_failure_rate",
        "/options/seed",
    ]
    # Credentials alone are checked alone; the stored options stay as they are.
    token = await client.patch(
        f"{CLUSTERS}/{created['id']}", json={"credentials": {"token": "t"}}, headers=callers.manager
    )
    assert token.status == 200, await token.text()


async def test_drivers_list_their_declared_fields(
    client: Any, callers: Callers, clusters_runtime: Runtime
) -> None:
    assert (await client.get("/api/v1/drivers", headers=callers.reader)).status == 403
    response = await client.get("/api/v1/drivers", headers=callers.manager)
    assert response.status == 200, await response.text()
    page = await response.json()
    assert page["next"] is None
    names = [driver["name"] for driver in page["items"]]
    assert names == driver_manager_for(clusters_runtime).installed()
    proxmox = next(driver for driver in page["items"] if driver["name"] == "proxmox")
    assert proxmox["title"] == "Proxmox VE"
    assert proxmox["endpoint_help"]
    fields = {field["name"]: field for field in proxmox["fields"]}
    assert fields["token_secret"] == {
        "name": "token_secret",
        "label": "API token secret",
        "kind": "secret",
        "required": True,
        "default": None,
        "help": fields["token_secret"]["help"],
        "secret": True,
        "choices": [],
        "minimum": None,
        "maximum": None,
        "placeholder": "",
        "sealed": False,
        "sealed_keys": [],
    }
    assert fields["request_timeout"]["default"] == 30.0
    assert fields["request_timeout"]["secret"] is False
    simulator = next(driver for driver in page["items"] if driver["name"] == "simulator")
    nodes = next(field for field in simulator["fields"] if field["name"] == "nodes")
    assert (nodes["kind"], nodes["default"]) == ("list", ["sim-node-1", "sim-node-2"])
    by_name = {field["name"]: field for field in simulator["fields"]}
    assert (by_name["required_token"]["sealed"], by_name["required_token"]["secret"]) == (
        True,
        False,
    )
    assert by_name["desktop"]["sealed_keys"] == ["password"]

    first = await client.get("/api/v1/drivers?limit=1", headers=callers.manager)
    first_page = await first.json()
    assert [driver["name"] for driver in first_page["items"]] == names[:1]
    rest = await client.get(
        f"/api/v1/drivers?limit=1&cursor={first_page['next']}", headers=callers.manager
    )
    assert [driver["name"] for driver in (await rest.json())["items"]] == names[1:2]


async def test_names_are_unique_without_regard_to_case(client: Any, callers: Callers) -> None:
    first = await create(client, callers.manager, simulator_cluster("Lab"))
    again = await client.post(CLUSTERS, json=simulator_cluster("lab"), headers=callers.manager)
    assert again.status == 409
    assert (await again.json())["code"] == "cluster_name_taken"
    second = await create(client, callers.manager, simulator_cluster("other"))
    rename = await client.patch(
        f"{CLUSTERS}/{second['id']}", json={"name": "LAB"}, headers=callers.manager
    )
    assert rename.status == 409
    assert first["name"] == "Lab"


# ------------------------------------------------------------------------------- the driver


async def test_check_nodes_and_templates_through_the_driver(
    client: Any, callers: Callers, clusters_runtime: Runtime
) -> None:
    created = await create(
        client, callers.manager, simulator_cluster(options={"cluster_name": "lab-sim"})
    )
    one = f"{CLUSTERS}/{created['id']}"
    response = await client.post(f"{one}/check", headers=callers.manager)
    assert response.status == 200
    result = await response.json()
    assert result["ok"] is True
    assert result["error"] is None
    assert result["product"] == "deskpool simulator"
    assert result["version"]
    assert result["cluster_name"] == "lab-sim"
    record = await (await client.get(one, headers=callers.reader)).json()
    assert record["last_check_ok"] is True
    assert record["last_check_at"] == result["checked_at"]
    assert record["last_check_error"] is None

    nodes = await (await client.get(f"{one}/nodes", headers=callers.reader)).json()
    assert [node["name"] for node in nodes["items"]] == ["sim-node-1", "sim-node-2"]
    assert all(node["online"] for node in nodes["items"])
    page = await (await client.get(f"{one}/nodes?limit=1", headers=callers.reader)).json()
    assert [node["name"] for node in page["items"]] == ["sim-node-1"]
    rest = await (
        await client.get(f"{one}/nodes?limit=1&cursor={page['next']}", headers=callers.reader)
    ).json()
    assert [node["name"] for node in rest["items"]] == ["sim-node-2"]
    assert rest["next"] is None

    templates = await (await client.get(f"{one}/templates", headers=callers.reader)).json()
    assert {(t["name"], t["os_type"]) for t in templates["items"]} == {
        ("ubuntu-22.04", "linux"),
        ("windows-11", "windows"),
        ("ubuntu-24.04", "linux"),
    }
    assert await audit_actions(clusters_runtime, created["id"]) == [
        "cluster.create",
        "cluster.check",
    ]


async def test_a_failed_check_is_a_result_and_is_counted(
    client: Any, callers: Callers, clusters_runtime: Runtime
) -> None:
    created = await create(
        client,
        callers.manager,
        simulator_cluster(credentials={"token": "wrong"}, options={"required_token": "right"}),
    )
    one = f"{CLUSTERS}/{created['id']}"
    response = await client.post(f"{one}/check", headers=callers.manager)
    assert response.status == 200
    result = await response.json()
    assert result["ok"] is False
    assert result["error"]["code"] == "driver_authentication_failed"
    assert result["error"]["retryable"] is False
    assert result["product"] is None
    record = await (await client.get(one, headers=callers.reader)).json()
    assert record["last_check_ok"] is False
    assert record["last_check_error"].startswith("driver_authentication_failed: ")
    row = await clusters_runtime.db.fetchrow(
        "SELECT outcome, details FROM audit_events WHERE action = 'cluster.check' "
        "AND resource_id = $1",
        created["id"],
    )
    assert row["outcome"] == "failure"

    nodes = await client.get(f"{one}/nodes", headers=callers.reader)
    assert nodes.status == 502
    assert nodes.content_type == PROBLEM
    assert (await nodes.json())["code"] == "driver_authentication_failed"

    metrics = clusters_runtime.metrics
    labels = {"driver": "simulator", "operation": "check_connection"}
    outcome = "driver_authentication_failed"
    assert (
        metrics.get_sample_value("deskpool_driver_calls_total", {**labels, "outcome": outcome}) == 1
    )
    fixed = await client.patch(
        one, json={"credentials": {"token": "right"}}, headers=callers.manager
    )
    assert fixed.status == 200
    assert (await (await client.post(f"{one}/check", headers=callers.manager)).json())["ok"]
    assert metrics.get_sample_value("deskpool_driver_calls_total", {**labels, "outcome": "ok"}) == 1
    assert (
        metrics.get_sample_value(
            "deskpool_driver_call_duration_seconds_count", {**labels, "outcome": "ok"}
        )
        == 1
    )
    listed = metrics.get_sample_value(
        "deskpool_driver_calls_total",
        {"driver": "simulator", "operation": "list_nodes", "outcome": outcome},
    )
    assert listed == 1


async def test_a_cluster_whose_driver_is_not_installed(
    client: Any, callers: Callers, clusters_runtime: Runtime
) -> None:
    cluster_id = await clusters_runtime.db.fetchval(
        "INSERT INTO clusters (name, driver, endpoint) VALUES ('old', 'gone', 'https://old') "
        "RETURNING id::text"
    )
    listed = await (await client.get(CLUSTERS, headers=callers.reader)).json()
    assert [(c["name"], c["driver_status"]) for c in listed["items"]] == [("old", "not_installed")]
    one = f"{CLUSTERS}/{cluster_id}"
    assert (await (await client.get(one, headers=callers.reader)).json())["driver_status"] == (
        "not_installed"
    )
    installed = driver_manager_for(clusters_runtime).installed()
    for method, path, headers in [
        ("POST", f"{one}/check", callers.manager),
        ("GET", f"{one}/nodes", callers.reader),
        ("GET", f"{one}/templates", callers.reader),
    ]:
        response = await client.request(method, path, headers=headers)
        assert response.status == 503, path
        assert response.content_type == PROBLEM
        problem = await response.json()
        assert problem["code"] == "driver_not_installed"
        assert problem["driver"] == "gone"
        assert problem["installed"] == installed
    renamed = await client.patch(one, json={"name": "older"}, headers=callers.manager)
    assert renamed.status == 200
    assert (await client.delete(one, headers=callers.manager)).status == 204


async def test_a_cluster_in_use_by_pools_is_not_deleted(
    client: Any,
    callers: Callers,
    clusters_runtime: Runtime,
    identity_provider: Any,
    bearer: Callable[..., dict[str, str]],
) -> None:
    created = await create(client, callers.manager, simulator_cluster())
    cluster = f"{CLUSTERS}/{created['id']}"
    subject = f"pools-{uuid.uuid4().hex[:8]}"
    await seed_user(clusters_runtime, identity_provider.issuer_url, subject, "pools:manage")
    pools_manager = bearer(subject)
    pools = []
    for _ in range(2):
        made = await client.post(POOLS, json=pool_body(created["id"]), headers=pools_manager)
        assert made.status == 201, await made.text()
        pools.append((await made.json())["id"])

    refused = await client.delete(cluster, headers=callers.manager)
    assert refused.status == 409
    problem = await refused.json()
    assert problem["code"] == "cluster_in_use"
    assert problem["pools"] == 2
    assert (await client.get(cluster, headers=callers.reader)).status == 200

    # Once no pool provisions on it, the cluster is deleted.
    for pool_id in pools:
        assert (await client.delete(f"{POOLS}/{pool_id}", headers=pools_manager)).status == 204
    assert (await client.delete(cluster, headers=callers.manager)).status == 204
    assert (await client.get(cluster, headers=callers.reader)).status == 404


async def test_setup_says_whether_a_cluster_is_connected(
    client: Any, callers: Callers, clusters_runtime: Runtime
) -> None:
    assert (await client.get("/api/v1/setup")).status == 401
    before = await (await client.get("/api/v1/setup", headers=callers.nobody)).json()
    # A caller who is not an administrator learns only what the console needs.
    assert before == {
        "cluster_connected": False,
        "can_connect_cluster": False,
        "is_platform_admin": False,
    }
    reader_view = await (await client.get("/api/v1/setup", headers=callers.reader)).json()
    assert reader_view["cluster_count"] == 0
    assert "installed_drivers" not in reader_view
    manager_view = await (await client.get("/api/v1/setup", headers=callers.manager)).json()
    assert manager_view["can_connect_cluster"] is True
    assert manager_view["installed_drivers"] == driver_manager_for(clusters_runtime).installed()
    await clusters_runtime.db.execute(
        "INSERT INTO clusters (name, driver, endpoint) VALUES ('old', 'gone', 'x')"
    )
    orphaned = await (await client.get("/api/v1/setup", headers=callers.reader)).json()
    assert (orphaned["cluster_connected"], orphaned["cluster_count"]) == (False, 1)
    await create(client, callers.manager, simulator_cluster())
    after = await (await client.get("/api/v1/setup", headers=callers.reader)).json()
    assert (after["cluster_connected"], after["cluster_count"]) == (True, 2)
    assert after["can_connect_cluster"] is False
