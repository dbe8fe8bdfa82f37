"""SQL the worker side of pools needs besides the stores of its aggregates.

- *Guarded events.* A job or a reconciliation pass decides from a desktop it read earlier;
  by the time it writes, an administrator or another job may have moved the desktop on.
  :func:`apply_event_if_unchanged` and :func:`apply_event_in_state` lock the row, check that
  the desktop is still what the decision was made from, and only then apply the event to the
  row they locked (:func:`deskpool.pools.store_desktops.apply_event_to_locked`, the pure state
  machine). ``None`` means "changed meanwhile: decide again", never an error.
- *Fencing of periodic runs.* :func:`hold_periodic_run` is to a reconciliation run what
  :meth:`deskpool.jobs.JobContext.hold_lease` is to a job: called inside a transaction, it
  lets the transaction commit only while the run still holds its lease.
- *One pass per pool at a time.* :func:`lock_pool_for_reconciliation` serializes the
  reconciliation passes of one pool (the periodic task and a ``pool.reconcile`` job).
- *Jobs of a resource.* :func:`unfinished_job` finds a queued or running job of a kind for a
  resource, so work without a natural generation (powering on) is not enqueued twice.
- *Owners on a cluster.* :func:`owners_on_clusters` and :func:`existing_owners` say which
  pools, desktops and recorded VMs exist, for the cluster-wide orphan pass
  (:func:`deskpool.pools.planner.find_unowned_vms`).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from deskpool.jobs.model import Job, JobState, LeaseLost
from deskpool.jobs.queue import get_job
from deskpool.pools.model import Desktop, DesktopState, ObservedVm, Pool
from deskpool.pools.states import DesktopEvent
from deskpool.pools.store_desktops import apply_event_to_locked, get_desktop


async def apply_event_if_unchanged(
    connection: asyncpg.Connection,
    expected: Desktop,
    event: DesktopEvent,
    now: datetime,
    *,
    pool: Pool,
) -> Desktop | None:
    """Apply ``event`` to the desktop only if its record still equals ``expected``.

    Runs in a transaction of its own (a savepoint inside the caller's).

    :returns: the desktop after the event, or ``None`` when it is gone or changed since
        ``expected`` was read (the caller decides again on its next pass).
    :raises IllegalTransition: the event is not legal in the desktop's (unchanged) state.
    """
    async with connection.transaction():
        current = await get_desktop(connection, expected.id, for_update=True)
        if current is None or current != expected:
            return None
        return await apply_event_to_locked(connection, current, event, now, pool=pool)


async def apply_event_in_state(
    connection: asyncpg.Connection,
    desktop_id: uuid.UUID,
    event: DesktopEvent,
    now: datetime,
    *,
    states: Collection[DesktopState],
    pool: Pool,
) -> Desktop | None:
    """Apply ``event`` to the desktop only if it is in one of ``states``.

    A job working on a step applies the step's outcome this way: if an administrator or the
    reconciler moved the desktop meanwhile (deleted it, failed it), the outcome is dropped.

    :returns: the desktop after the event, or ``None`` when it is gone or in another state.
    """
    async with connection.transaction():
        current = await get_desktop(connection, desktop_id, for_update=True)
        if current is None or current.state not in states:
            return None
        return await apply_event_to_locked(connection, current, event, now, pool=pool)


async def hold_periodic_run(connection: asyncpg.Connection, name: str, fence: int) -> None:
    """Fence the caller's open transaction with the lease of the periodic run ``fence``.

    The task's row is share-locked until the transaction ends, so another worker cannot take
    the task over (its claim updates the row) before the transaction's effects are committed.

    :raises LeaseLost: the run no longer holds the task; the transaction must not commit.
    """
    if not connection.is_in_transaction():
        raise RuntimeError("hold_periodic_run must run inside the transaction it protects")
    held = await connection.fetchval(
        """
        SELECT true FROM periodic_tasks
         WHERE name = $1 AND fence = $2 AND lease_expires_at IS NOT NULL
           FOR SHARE
        """,
        name,
        fence,
    )
    if not held:
        raise LeaseLost(f"periodic task {name} is no longer held by run {fence}")


async def lock_pool_for_reconciliation(connection: asyncpg.Connection, pool_id: uuid.UUID) -> None:
    """Take the pool's reconciliation lock until the caller's transaction ends."""
    await connection.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        f"deskpool.reconcile:{pool_id}",
    )


async def unfinished_job(
    connection: asyncpg.Connection,
    kind: str,
    resource_type: str,
    resource_id: str,
    *,
    states: Collection[JobState] = (JobState.QUEUED, JobState.RUNNING),
) -> Job | None:
    """The newest job of ``kind`` for the resource in one of ``states``, if there is one."""
    job_id = await connection.fetchval(
        """
        SELECT id FROM jobs
         WHERE resource_type = $1 AND resource_id = $2 AND kind = $3
           AND state = ANY($4::text[])
         ORDER BY id DESC
         LIMIT 1
        """,
        resource_type,
        resource_id,
        kind,
        [str(state) for state in states],
    )
    return None if job_id is None else await get_job(connection, job_id)


async def vm_is_recorded(connection: asyncpg.Connection, cluster_id: uuid.UUID, vm_id: str) -> bool:
    """Whether a desktop of the cluster records ``vm_id`` as its VM."""
    found = await connection.fetchval(
        "SELECT true FROM desktops WHERE cluster_id = $1 AND vm_id = $2 LIMIT 1",
        cluster_id,
        vm_id,
    )
    return bool(found)


async def desktop_exists(connection: asyncpg.Connection, desktop_id: uuid.UUID) -> bool:
    """Whether the desktop record exists."""
    return bool(await connection.fetchval("SELECT true FROM desktops WHERE id = $1", desktop_id))


@dataclass
class ClusterOwners:
    """What may own a VM listed on a cluster: pools, desktops, VMs recorded by desktops.

    A VM is taken for unowned only when its tags name none of these and no desktop records it.
    """

    pool_ids: set[uuid.UUID] = field(default_factory=set)
    desktop_ids: set[uuid.UUID] = field(default_factory=set)
    vm_ids: set[str] = field(default_factory=set)

    def update(self, other: ClusterOwners) -> None:
        """Add ``other``'s owners to these."""
        self.pool_ids |= other.pool_ids
        self.desktop_ids |= other.desktop_ids
        self.vm_ids |= other.vm_ids


async def owners_on_clusters(
    db: asyncpg.Connection | asyncpg.Pool, cluster_ids: Collection[uuid.UUID]
) -> dict[uuid.UUID, ClusterOwners]:
    """The pools, desktops and recorded VM ids of each cluster."""
    owners = {cluster_id: ClusterOwners() for cluster_id in cluster_ids}
    for row in await db.fetch(
        "SELECT id, cluster_id FROM pools WHERE cluster_id = ANY($1::uuid[])", list(cluster_ids)
    ):
        owners[row["cluster_id"]].pool_ids.add(row["id"])
    for row in await db.fetch(
        "SELECT id, cluster_id, vm_id FROM desktops WHERE cluster_id = ANY($1::uuid[])",
        list(cluster_ids),
    ):
        found = owners[row["cluster_id"]]
        found.desktop_ids.add(row["id"])
        if row["vm_id"] is not None:
            found.vm_ids.add(row["vm_id"])
    return owners


async def existing_owners(
    db: asyncpg.Connection | asyncpg.Pool, cluster_id: uuid.UUID, vms: Iterable[ObservedVm]
) -> ClusterOwners:
    """Of what ``vms`` name (pools, desktops on any cluster, their own ids), what exists now."""
    listed = list(vms)
    pool_ids = list({vm.pool_id for vm in listed if vm.pool_id is not None})
    desktop_ids = list({vm.desktop_id for vm in listed if vm.desktop_id is not None})
    vm_ids = list({vm.vm_id for vm in listed})
    found = ClusterOwners()
    if pool_ids:
        rows = await db.fetch("SELECT id FROM pools WHERE id = ANY($1::uuid[])", pool_ids)
        found.pool_ids = {row["id"] for row in rows}
    if desktop_ids:
        rows = await db.fetch("SELECT id FROM desktops WHERE id = ANY($1::uuid[])", desktop_ids)
        found.desktop_ids = {row["id"] for row in rows}
    if vm_ids:
        rows = await db.fetch(
            "SELECT vm_id FROM desktops WHERE cluster_id = $1 AND vm_id = ANY($2::text[])",
            cluster_id,
            vm_ids,
        )
        found.vm_ids = {row["vm_id"] for row in rows}
    return found
