"""The orphans API over HTTP: listing a cluster's reported orphans, asking for one's deletion."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.pools import (
    Caller,
)

from deskpool.runtime import Runtime

NewCaller = Callable[..., Awaitable[Caller]]
NewCluster = Callable[..., Awaitable[str]]


def orphans_url(cluster_id: str) -> str:
    return f"/api/v1/clusters/{cluster_id}/orphans"


async def report(
    runtime: Runtime, cluster_id: str, vm_id: str, *, pool_id: uuid.UUID | None = None
) -> None:
    """Record an orphan as reconciliation does, reported ``vm_id`` seconds after the epoch."""
    async with runtime.db.acquire() as connection:
        await connection.execute(
            "INSERT INTO pool_orphans (cluster_id, vm_id, name, pool_id, desktop_id, reported_at)"
            " VALUES ($1, $2, $3, $4, $5, to_timestamp($6))",
            uuid.UUID(cluster_id),
            vm_id,
            f"vm-{vm_id}",
            pool_id,
            uuid.uuid4(),
            int(vm_id),
        )


async def test_list_orders_by_report_time_and_pages(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster, pools_runtime: Runtime
) -> None:
    reader = await new_caller("clusters:read")
    cluster, other = await api_cluster(), await api_cluster()
    pool_id = uuid.uuid4()
    for vm_id in ("300", "100", "200"):
        await report(pools_runtime, cluster, vm_id, pool_id=pool_id if vm_id == "100" else None)
    await report(pools_runtime, other, "150")

    first = await client.get(f"{orphans_url(cluster)}?limit=2", headers=reader.headers)
    assert first.status == 200, await first.text()
    page = await first.json()
    rest = await (
        await client.get(
            f"{orphans_url(cluster)}?limit=2&cursor={page['next']}", headers=reader.headers
        )
    ).json()

    assert [item["vm_id"] for item in page["items"]] == ["100", "200"]
    assert [item["vm_id"] for item in rest["items"]] == ["300"]
    assert rest["next"] is None
    oldest = page["items"][0]
    assert (oldest["name"], oldest["pool_id"]) == ("vm-100", str(pool_id))
    assert page["items"][1]["pool_id"] is None
    assert oldest["reported_at"].startswith("1970-01-01T00:01:40")
    unknown = await client.get(orphans_url(str(uuid.uuid4())), headers=reader.headers)
    assert unknown.status == 404
    bad_cursor = await client.get(f"{orphans_url(cluster)}?cursor=abc", headers=reader.headers)
    assert bad_cursor.status == 400


async def test_delete_enqueues_the_deletion_job_once_and_audits_the_request(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster, pools_runtime: Runtime
) -> None:
    manager = await new_caller("clusters:manage")
    cluster = await api_cluster()
    await report(pools_runtime, cluster, "120")
    url = f"{orphans_url(cluster)}/120"

    response = await client.delete(url, headers=manager.headers)
    assert response.status == 202, await response.text()
    job = await response.json()
    again = await (await client.delete(url, headers=manager.headers)).json()

    assert job["kind"] == "vm.delete_orphan"
    assert job["payload"] == {"cluster_id": cluster, "vm_id": "120"}
    assert (job["resource_type"], job["resource_id"]) == ("clusters", f"{cluster}/120")
    assert job["state"] == "queued"
    assert again["id"] == job["id"]
    async with pools_runtime.db.acquire() as connection:
        events = await connection.fetch(
            "SELECT * FROM audit_events WHERE action = 'cluster.orphan_delete' "
            "AND resource_id = $1",
            cluster,
        )
    assert len(events) == 2
    details = json.loads(events[0]["details"])
    assert (details["vm_id"], details["job_id"]) == ("120", job["id"])
    assert str(events[0]["actor"]) == manager.id


async def test_delete_of_an_unknown_orphan_or_cluster_is_404(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster, pools_runtime: Runtime
) -> None:
    manager = await new_caller("clusters:manage")
    cluster = await api_cluster()
    for url in (
        f"{orphans_url(cluster)}/999",
        f"{orphans_url(cluster)}/{'9' * 300}",
        f"{orphans_url(str(uuid.uuid4()))}/999",
    ):
        response = await client.delete(url, headers=manager.headers)
        assert response.status == 404, url
    async with pools_runtime.db.acquire() as connection:
        assert await connection.fetchval("SELECT count(*) FROM jobs") == 0


async def test_orphans_need_a_signed_in_caller_and_a_reader_may_not_delete_one(
    client: Any, new_caller: NewCaller, api_cluster: NewCluster, pools_runtime: Runtime
) -> None:
    reader = await new_caller("clusters:read")
    cluster = await api_cluster()
    await report(pools_runtime, cluster, "130")

    assert (await client.get(orphans_url(cluster))).status == 401
    denied = await client.delete(f"{orphans_url(cluster)}/130", headers=reader.headers)
    assert denied.status == 403
