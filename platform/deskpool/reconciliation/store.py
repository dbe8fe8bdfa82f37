"""SQL of reconciliation: which pools to pass over, what they hold, and what a pass saw.

A pass (:mod:`deskpool.reconciliation.reconciler`) reads a batch of pools with
:func:`pools_to_reconcile`, their desktops and the names taken on their clusters, plans them
(:mod:`deskpool.reconciliation.planner`), and records with :func:`mark_reconciled` (or
:func:`mark_reconciled_many`, many pools in one statement) the generation it saw and the
pool's health, or with :func:`record_reconcile_failure` why the pass failed.
:func:`try_lock_pool_for_reconciliation` serializes the passes over one pool (the
periodic task and a ``pool.reconcile`` job); :func:`owners_on_clusters` and
:func:`existing_owners` say which pools, desktops and recorded VMs exist, for the cluster-wide
orphan pass (:mod:`deskpool.reconciliation.cluster_vms`). The records themselves are
:mod:`deskpool.pools.store` and :mod:`deskpool.desktops.store`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

import asyncpg

from deskpool.db.rows import Db, group_rows

# Read by a rollout's administration too, so it is the desktops' store's (re-exported here).
from deskpool.desktops.store import desktops_of_pools as desktops_of_pools
from deskpool.pools.model import ObservedVm, Pool, PoolState
from deskpool.pools.naming import name_key
from deskpool.pools.store import growth_lock_key, health_to_json, pool_from_row
from deskpool.reconciliation.plan import PoolHealth

# ------------------------------------------------------------------------------ reconciliation


async def pools_to_reconcile(db: Db, limit: int) -> list[Pool]:
    """Up to ``limit`` pools, the one attempted longest ago first (never attempted before all).

    A pass that failed counts as an attempt, so failing pools go to the back of the queue and
    never crowd the others out of a batch.
    """
    rows = await db.fetch(
        "SELECT * FROM pools ORDER BY reconcile_attempted_at NULLS FIRST, id LIMIT $1", limit
    )
    return [pool_from_row(row) for row in rows]


async def record_reconcile_failure(
    db: Db, pool_id: uuid.UUID, code: str, reason: str
) -> bool | None:
    """Record that a pass over the pool failed: why, and since when (kept while it fails).

    The pool's health and reconciled generation stay what the last pass that succeeded saw.

    :returns: ``None`` when the pool is gone; else whether the failure is new (the pool was
        not failing, or failed with another code).
    """
    row = await db.fetchrow(
        """
        WITH before AS (
            SELECT reconcile_error_code AS code FROM pools WHERE id = $1 FOR UPDATE
        )
        UPDATE pools
           SET reconcile_error_code = $2,
               reconcile_error_reason = $3,
               reconcile_error_since = coalesce(reconcile_error_since, now()),
               reconcile_attempted_at = now()
          FROM before
         WHERE id = $1
        RETURNING before.code IS DISTINCT FROM $2 AS new
        """,
        pool_id,
        code,
        reason,
    )
    return None if row is None else bool(row["new"])


@dataclass(frozen=True)
class PoolNow:
    """What of a pool reconciliation reads again under the pool's lock, before applying."""

    max_size: int
    state: PoolState
    desktop_ids: frozenset[uuid.UUID]
    vm_ids: frozenset[str]


async def pool_now(db: Db, pool_id: uuid.UUID) -> PoolNow | None:
    """The pool's size, state and desktops now; ``None`` when it is gone."""
    row = await db.fetchrow("SELECT max_size, state FROM pools WHERE id = $1", pool_id)
    if row is None:
        return None
    desktops = await db.fetch("SELECT id, vm_id FROM desktops WHERE pool_id = $1", pool_id)
    return PoolNow(
        max_size=row["max_size"],
        state=PoolState(row["state"]),
        desktop_ids=frozenset(desktop["id"] for desktop in desktops),
        vm_ids=frozenset(desktop["vm_id"] for desktop in desktops if desktop["vm_id"]),
    )


async def mark_reconciled(db: Db, pool_id: uuid.UUID, generation: int, health: PoolHealth) -> bool:
    """Record a finished pass over the pool: the generation it saw, its health, the time.

    A ``reconcile_error`` the pool had is cleared.

    ``reconciled_generation`` never goes backwards nor beyond the pool's generation.

    :returns: ``False`` when the pool is gone.
    """
    return bool(await mark_reconciled_many(db, [(pool_id, generation, health)]))


async def mark_reconciled_many(db: Db, passes: Sequence[tuple[uuid.UUID, int, PoolHealth]]) -> int:
    """:func:`mark_reconciled` for many pools in one statement: ``(pool id, generation, health)``.

    :returns: how many of the pools still exist.
    """
    if not passes:
        return 0
    marked: int = await db.fetchval(
        """
        WITH marked AS (
            UPDATE pools
               SET reconciled_generation = greatest(pools.reconciled_generation,
                                                    least(pass.generation, pools.generation)),
                   reconciled_at = now(),
                   reconcile_attempted_at = now(),
                   reconcile_error_code = NULL,
                   reconcile_error_reason = NULL,
                   reconcile_error_since = NULL,
                   health = pass.health::jsonb
              FROM unnest($1::uuid[], $2::bigint[], $3::text[]) AS pass (id, generation, health)
             WHERE pools.id = pass.id
            RETURNING 1
        )
        SELECT count(*) FROM marked
        """,
        [pool_id for pool_id, _, _ in passes],
        [generation for _, generation, _ in passes],
        [json.dumps(health_to_json(health)) for _, _, health in passes],
    )
    return marked


async def desktop_names_on_clusters(
    db: Db, cluster_ids: Collection[uuid.UUID]
) -> dict[uuid.UUID, set[str]]:
    """The :func:`~deskpool.pools.naming.name_key` of every desktop name on each cluster."""
    rows = await db.fetch(
        "SELECT cluster_id, name FROM desktops WHERE cluster_id = ANY($1::uuid[])",
        list(cluster_ids),
    )
    grouped = group_rows(rows, "cluster_id", cluster_ids, lambda row: name_key(row["name"]))
    return {cluster_id: set(names) for cluster_id, names in grouped.items()}


async def try_lock_pool_for_reconciliation(
    connection: asyncpg.Connection, pool_id: uuid.UUID
) -> bool:
    """Take the pool's reconciliation lock until the caller's transaction ends, if it is free.

    It is a transaction-level advisory lock; trying never waits, so no statement timeout can
    cut a wait short (the caller waits between tries).
    """
    taken: bool = await connection.fetchval(
        "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))",
        growth_lock_key(pool_id),
    )
    return taken


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
    db: Db, cluster_ids: Collection[uuid.UUID]
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
    db: Db, cluster_id: uuid.UUID, vms: Iterable[ObservedVm]
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
