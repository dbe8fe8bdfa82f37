"""The cluster use cases called directly, as the CLI or a plugin would: no HTTP in between."""

from __future__ import annotations

from typing import Any

import pytest

from deskpool.actor import Actor
from deskpool.clusters import service
from deskpool.clusters.commands import ChangeCluster, CreateCluster, TlsChange
from deskpool.errors import NotFound, ValidationFailed
from deskpool.runtime import Runtime

ACTOR = Actor.system("test:clusters")


def create_command(name: str, **changes: Any) -> CreateCluster:
    """A create command for a simulated cluster, with ``changes``."""
    members: dict[str, Any] = {
        "name": name,
        "driver": "simulator",
        "endpoint": "simulator://local",
        **changes,
    }
    return CreateCluster(**members)


async def audit_trail(runtime: Runtime, cluster_id: str) -> list[tuple[str, str]]:
    rows = await runtime.db.fetch(
        "SELECT action, actor FROM audit_events WHERE resource_type = 'clusters' "
        "AND resource_id = $1 ORDER BY id",
        cluster_id,
    )
    return [(row["action"], row["actor"]) for row in rows]


async def test_each_change_is_audited_as_its_actor(clusters_runtime: Runtime) -> None:
    created = await service.create_cluster(clusters_runtime, ACTOR, create_command("direct"))
    assert created.driver == "simulator"
    changed = await service.change_cluster(
        clusters_runtime,
        ACTOR,
        created.id,
        ChangeCluster(name="renamed", tls=TlsChange(verify=False)),
    )
    assert (changed.name, changed.settings.tls_verify) == ("renamed", False)
    assert changed.settings.endpoint == "simulator://local"
    checked = await service.check_cluster(clusters_runtime, ACTOR, created.id)
    assert checked.ok
    assert checked.error is None
    await service.delete_cluster(clusters_runtime, ACTOR, created.id)
    with pytest.raises(NotFound):
        await service.get_cluster(clusters_runtime, created.id)
    assert await audit_trail(clusters_runtime, str(created.id)) == [
        ("cluster.create", "test:clusters"),
        ("cluster.update", "test:clusters"),
        ("cluster.check", "test:clusters"),
        ("cluster.delete", "test:clusters"),
    ]


async def test_a_refused_change_leaves_nothing_behind(clusters_runtime: Runtime) -> None:
    count = "SELECT count(*) FROM audit_events WHERE resource_type = 'clusters'"
    audited = await clusters_runtime.db.fetchval(count)
    with pytest.raises(ValidationFailed) as refused:
        await service.create_cluster(
            clusters_runtime, ACTOR, create_command("nowhere", driver="no-such-driver")
        )
    assert "simulator" in refused.value.extra["installed"]
    assert await clusters_runtime.db.fetchval("SELECT count(*) FROM clusters") == 0
    assert await clusters_runtime.db.fetchval(count) == audited
