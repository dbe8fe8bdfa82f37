"""Use cases of the pool aggregate, one function each: what the API, the CLI and plugins call.

Each change validates, changes, records its audit event through the :class:`Actor` and
enqueues its jobs in one transaction, so a request either happens whole or not at all.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from deskpool.actor import Actor
from deskpool.clusters.repository import get_cluster
from deskpool.errors import NotFound
from deskpool.jobs.model import Job
from deskpool.pools.provisioning import CLUSTERS, enqueue_orphan_deletion
from deskpool.pools.store_orphans import OrphanRecord, list_orphans, lock_orphan

if TYPE_CHECKING:
    from deskpool.runtime import Runtime


async def cluster_orphans(runtime: Runtime, cluster_id: uuid.UUID) -> list[OrphanRecord]:
    """The orphans reported on a cluster, oldest report first; 404 for an unknown cluster."""
    async with runtime.db.acquire() as connection:
        if await get_cluster(connection, cluster_id) is None:
            raise NotFound(f"No cluster has the id {cluster_id}.")
        return await list_orphans(connection, cluster_id=cluster_id)


async def request_orphan_deletion(
    runtime: Runtime, actor: Actor, cluster_id: uuid.UUID, vm_id: str
) -> Job:
    """Enqueue the deletion of a reported orphan VM (or answer the one already queued).

    404 for an unknown cluster or a VM not reported as an orphan on it. The request is
    audited (``cluster.orphan_delete``) in the transaction that enqueues the job.
    """
    async with runtime.db.acquire() as connection, connection.transaction():
        if await get_cluster(connection, cluster_id) is None:
            raise NotFound(f"No cluster has the id {cluster_id}.")
        orphan = await lock_orphan(connection, cluster_id, vm_id)
        if orphan is None:
            raise NotFound(f"No orphan VM {vm_id!r} is reported on the cluster.")
        job = await enqueue_orphan_deletion(connection, cluster_id, vm_id)
        details: dict[str, Any] = {"vm_id": vm_id, "name": orphan.name, "job_id": job.id}
        if orphan.pool_id is not None:
            details["pool_id"] = str(orphan.pool_id)
        await actor.record(connection, "cluster.orphan_delete", CLUSTERS, str(cluster_id), details)
    return job
