"""The license through the API: state, install and its refusals, removal, enforcement of growth."""

from __future__ import annotations

import json
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from tests.support.pools import (
    pool_body,
)

from deskpool.licensing.document import sign_document
from deskpool.licensing.model import FREE_LIMITS
from deskpool.reconciliation.plan import ReconcilePolicy
from deskpool.reconciliation.reconciler import PoolReconcilerService
from deskpool.runtime import Runtime
from deskpool.testing.licensing import TestVendor

PROBLEM = "application/problem+json"


async def test_without_a_license_the_free_edition_is_shown(client: Any, new_caller: Any) -> None:
    reader = await new_caller("license:read")
    response = await client.get("/api/v1/license", headers=reader)
    assert response.status == 200
    state = await response.json()
    assert state["status"] == "free"
    assert state["edition"] == "free"
    assert state["licensed"] is False
    assert state["limits"] == FREE_LIMITS.as_dict()
    assert state["license"] is None
    assert state["build"]["state"] == "unsigned"
    assert state["reporting"]["sent"] == 0
    # Reading is not managing.
    refused = await client.put("/api/v1/license", json={"document": "{}"}, headers=reader)
    assert refused.status == 403


async def test_each_bad_document_is_refused_with_its_own_problem(
    client: Any, new_caller: Any, license_vendor: TestVendor, db: asyncpg.Connection
) -> None:
    manager = await new_caller("license:manage", "license:read")
    tampered = json.loads(license_vendor.issue())
    tampered["license"]["limits"]["desktops"] = 100000
    now = datetime.now(UTC)
    documents = {
        "license_modified": json.dumps(tampered),
        "license_forged": sign_document(Ed25519PrivateKey.generate(), license_vendor.claims()),
        "license_other_product": license_vendor.issue(product="another-product"),
        "license_expired": license_vendor.issue(
            issued_at=now - timedelta(days=400), expires_at=now - timedelta(days=35)
        ),
        "license_malformed": "this is not a license",
    }
    # A lone surrogate (a 500 from the canonical form before) and a document over 16 KiB (a
    # `validation_failed` before) are malformed licenses too.
    unreadable = license_vendor.unreadable()
    sent = [*documents.items(), *(("license_malformed", d) for d in unreadable.values())]
    for code, document in sent:
        response = await client.put("/api/v1/license", json={"document": document}, headers=manager)
        assert response.status == 422, code
        assert response.content_type == PROBLEM
        assert (await response.json())["code"] == code
    state = await (await client.get("/api/v1/license", headers=manager)).json()
    assert state["status"] == "free"
    refusals = await db.fetch(
        "SELECT details->>'code' AS code FROM audit_events "
        "WHERE action = 'license.install' AND outcome = 'failure' ORDER BY id"
    )
    assert [row["code"] for row in refusals] == [code for code, _ in sent]


async def test_install_show_and_remove_are_audited(
    client: Any, new_caller: Any, license_vendor: TestVendor, db: asyncpg.Connection
) -> None:
    manager = await new_caller("license:manage", "license:read")
    document = license_vendor.issue(edition="enterprise", limits={"desktops": 5})
    response = await client.put("/api/v1/license", json={"document": document}, headers=manager)
    assert response.status == 200, await response.text()
    state = await response.json()
    assert state["status"] == "valid"
    assert state["edition"] == "enterprise"
    assert state["limits"] == {"desktops": 5, "pools": None, "sessions": None}
    license_id = state["license"]["id"]
    assert state["license"]["key_id"] == license_vendor.key_id
    shown = await (await client.get("/api/v1/license", headers=manager)).json()
    assert shown["license"]["id"] == license_id
    removed = await client.delete("/api/v1/license", headers=manager)
    assert removed.status == 200
    assert (await removed.json())["status"] == "free"
    actions = [
        (row["action"], row["resource_id"])
        for row in await db.fetch(
            "SELECT action, resource_id FROM audit_events WHERE resource_type = 'license' "
            "AND outcome = 'success' ORDER BY id"
        )
    ]
    assert actions == [("license.install", license_id), ("license.remove", license_id)]
    again = await client.delete("/api/v1/license", headers=manager)
    assert again.status == 200


async def test_a_pool_beyond_the_limit_is_refused_and_nothing_is_touched(
    client: Any, new_caller: Any, license_vendor: TestVendor, lic_runtime: Runtime
) -> None:
    admin = await new_caller("platform:admin")
    document = license_vendor.issue(limits={"pools": 1})
    installed = await client.put("/api/v1/license", json={"document": document}, headers=admin)
    assert installed.status == 200
    cluster = await client.post(
        "/api/v1/clusters",
        json={
            "name": f"sim-{secrets.token_hex(3)}",
            "driver": "simulator",
            "endpoint": "simulator://local",
        },
        headers=admin,
    )
    assert cluster.status == 201, await cluster.text()
    cluster_id = (await cluster.json())["id"]

    def pool(name: str) -> dict[str, Any]:
        pattern = f"{name}-{{n:02}}"
        return pool_body(cluster_id, name=name, naming_pattern=pattern, min_size=0, max_size=2)

    first = await client.post("/api/v1/pools", json=pool("lic-a"), headers=admin)
    assert first.status == 201, await first.text()
    second = await client.post("/api/v1/pools", json=pool("lic-b"), headers=admin)
    assert second.status == 409
    problem = await second.json()
    assert problem["code"] == "license_limit_reached"
    assert problem["resource"] == "pools"
    assert problem["limit"] == 1
    assert "nothing existing is changed" in problem["detail"]
    listed = await (await client.get("/api/v1/pools", headers=admin)).json()
    assert [item["name"] for item in listed["items"]] == ["lic-a"]
    state = await (await client.get("/api/v1/license", headers=admin)).json()
    assert state["usage"]["pools"] == 1


async def reconcile(runtime: Runtime, pool_id: str) -> None:
    async def fence(connection: asyncpg.Connection) -> None:
        return None

    reconciler = PoolReconcilerService(runtime, ReconcilePolicy())
    await reconciler.reconcile_now(uuid.UUID(pool_id), fence)


async def test_reconciliation_stops_at_the_desktop_limit_and_says_why_on_the_pool(
    client: Any,
    new_caller: Any,
    license_vendor: TestVendor,
    lic_runtime: Runtime,
    db: asyncpg.Connection,
) -> None:
    admin = await new_caller("platform:admin")
    await client.put(
        "/api/v1/license",
        json={"document": license_vendor.issue(limits={"desktops": 2})},
        headers=admin,
    )
    cluster_id = await db.fetchval(
        "INSERT INTO clusters (name, driver, endpoint, options) VALUES "
        "($1, 'simulator', 'simulator://local', '{\"clone_seconds\": 0.01}'::jsonb) RETURNING id",
        f"sim-{secrets.token_hex(3)}",
    )
    created = await client.post(
        "/api/v1/pools",
        json={
            "name": "held",
            "cluster_id": str(cluster_id),
            "template": "ubuntu-22.04",
            "kind": "non_persistent",
            "os_type": "linux",
            "min_size": 4,
            "max_size": 4,
            "naming_pattern": "held-{n:02}",
        },
        headers=admin,
    )
    assert created.status == 201, await created.text()
    pool_id = (await created.json())["id"]
    await reconcile(lic_runtime, pool_id)
    assert (
        await db.fetchval("SELECT count(*) FROM desktops WHERE pool_id = $1", uuid.UUID(pool_id))
        == 2
    )
    pool = await (await client.get(f"/api/v1/pools/{pool_id}", headers=admin)).json()
    assert pool["health"]["status"] == "degraded"
    assert any("2 desktop(s) not created" in reason for reason in pool["health"]["reasons"])
    # A lower limit later: what exists stays as it is, nothing more is made.
    before = await db.fetch("SELECT id, state FROM desktops ORDER BY id")
    await client.put(
        "/api/v1/license",
        json={"document": license_vendor.issue(limits={"desktops": 1})},
        headers=admin,
    )
    await reconcile(lic_runtime, pool_id)
    assert await db.fetch("SELECT id, state FROM desktops ORDER BY id") == before
    # Without the license the free edition's limit allows the rest.
    await client.delete("/api/v1/license", headers=admin)
    await reconcile(lic_runtime, pool_id)
    assert (
        await db.fetchval("SELECT count(*) FROM desktops WHERE pool_id = $1", uuid.UUID(pool_id))
        == 4
    )
