"""SQL of the orphans reconciliation reports: VMs tagged as deskpool's that no desktop owns.

An orphan is recorded once per cluster and VM (:func:`record_orphans` answers only the new
ones, so each is reported once), listed for the administrator, locked while its deletion is
requested, and forgotten once its VM is deleted or adopted.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.db.rows import Db, fetch_record, record_from_row
from deskpool.pools.model import ObservedVm


@dataclass(frozen=True, slots=True)
class OrphanRecord:
    """A VM tagged by deskpool that belongs to no desktop, as reconciliation reported it."""

    cluster_id: uuid.UUID
    vm_id: str
    name: str
    pool_id: uuid.UUID | None
    desktop_id: uuid.UUID | None
    reported_at: datetime


def _orphan(row: Mapping[str, Any]) -> OrphanRecord:
    return record_from_row(OrphanRecord, row)


async def record_orphans(
    connection: asyncpg.Connection, cluster_id: uuid.UUID, vms: Iterable[ObservedVm]
) -> list[OrphanRecord]:
    """Record orphan VMs of a cluster; return those not recorded before (report them once)."""
    listed = list(vms)
    if not listed:
        return []
    rows = await connection.fetch(
        """
        INSERT INTO pool_orphans (cluster_id, vm_id, name, pool_id, desktop_id)
        SELECT $1, vm_id, name, pool_id, desktop_id
          FROM unnest($2::text[], $3::text[], $4::uuid[], $5::uuid[])
               AS o (vm_id, name, pool_id, desktop_id)
        ON CONFLICT (cluster_id, vm_id) DO NOTHING
        RETURNING *
        """,
        cluster_id,
        [vm.vm_id for vm in listed],
        [vm.name for vm in listed],
        [vm.pool_id for vm in listed],
        [vm.desktop_id for vm in listed],
    )
    return [_orphan(row) for row in rows]


async def list_orphans(
    db: Db, *, cluster_id: uuid.UUID | None = None, pool_id: uuid.UUID | None = None
) -> list[OrphanRecord]:
    """The recorded orphans, of one cluster or pool if given, oldest report first."""
    rows = await db.fetch(
        """
        SELECT * FROM pool_orphans
         WHERE ($1::uuid IS NULL OR cluster_id = $1) AND ($2::uuid IS NULL OR pool_id = $2)
         ORDER BY reported_at, cluster_id, vm_id
        """,
        cluster_id,
        pool_id,
    )
    return [_orphan(row) for row in rows]


async def known_orphan_ids(db: Db, cluster_ids: Collection[uuid.UUID]) -> set[str]:
    """The VM ids of orphans already recorded on the clusters (reconcile's ``known_orphans``)."""
    rows = await db.fetch(
        "SELECT vm_id FROM pool_orphans WHERE cluster_id = ANY($1::uuid[])", list(cluster_ids)
    )
    return {row["vm_id"] for row in rows}


async def forget_orphans(
    connection: asyncpg.Connection, cluster_id: uuid.UUID, vm_ids: Iterable[str]
) -> int:
    """Drop orphan records (their VMs were deleted or adopted); return how many went."""
    result = await connection.execute(
        "DELETE FROM pool_orphans WHERE cluster_id = $1 AND vm_id = ANY($2::text[])",
        cluster_id,
        list(vm_ids),
    )
    return int(result.split()[-1])


async def lock_orphan(
    connection: asyncpg.Connection, cluster_id: uuid.UUID, vm_id: str
) -> OrphanRecord | None:
    """The orphan ``vm_id`` of the cluster, locked until the transaction ends, if recorded."""
    query = "SELECT * FROM pool_orphans WHERE cluster_id = $1 AND vm_id = $2 FOR UPDATE"
    return await fetch_record(connection, _orphan, query, cluster_id, vm_id)
