"""Pool reconciliation: plan a batch of pools, then apply each pool's plan, each pool alone.

:class:`PoolReconcilerService` implements the
:class:`~deskpool.reconciliation.periodic.PoolReconciler` protocol that the worker's
``pool_reconcile`` periodic task runs every ``POOL_RECONCILE_INTERVAL``, and also reconciles
one pool on demand (the ``pool.reconcile`` job, payload ``{"pool_id": ...}``, which a pool's
change and a VM event enqueue).

A run works in two phases:

1. *Plan the batch at once* (:class:`~deskpool.reconciliation.planning.BatchPlanner`): the
   pools the run takes (those attempted longest ago first), their desktops, one VM listing
   per cluster however many of its pools are in the batch, each pool's schedule and rollout,
   and the pure :func:`~deskpool.reconciliation.planner.plan_pools`.
2. *Apply each pool's plan* (:class:`~deskpool.reconciliation.applying.PlanApplier`) in one
   transaction fenced by the run's lease (or the job's), under the pool's reconciliation lock,
   with the pool read again under it: two reconciliations of one pool never apply at once, and
   a pool never has more desktops than its ``max_size``, not even for a pass.

*Each pool fails alone.* Whatever one pool's schedule, rollout, plan or the application of its
plan raises, the other pools of the pass are planned and applied as if it did not exist. The
failing pool records a ``reconcile_error`` (:mod:`deskpool.reconciliation.failures`: a code,
the reason in words, since when), shown by the API's pool and the console's pool page, counted
in ``deskpool_pool_reconcile_failing`` and ``deskpool_reconcile_failures_total``, and cleared by
the next pass that succeeds; :meth:`PoolReconcilerService.reconcile_pool` then raises
:class:`~deskpool.reconciliation.failures.PoolReconcileFailed`, which the batch logs as one
warning line (no traceback) before going on. A failed pass counts as an attempt: the pool goes
to the back of the queue.

*Cluster-wide orphans.* A pool's plan reports the orphans tagged for that pool's desktops; a
VM tagged as deskpool's whose tags name no existing pool and no existing desktop, and that no
desktop records, belongs to no pool's plan. Planning finds them in each listed cluster's VMs
(:func:`~deskpool.reconciliation.cluster_vms.unowned_vms`) and the first pool of that cluster
applied records them (``pool_orphans`` with no pool), audited once each as
``reconcile.report_orphan``; :meth:`PoolReconcilerService.report_orphans_on_idle_clusters` does
the same for clusters no pool uses. They are never deleted unless an administrator asks.

*Metrics* (:class:`~deskpool.reconciliation.metrics.PoolReconcileMetrics`, when given): each
applied action counts in ``deskpool_reconcile_actions_total{kind}``, each cycle (a periodic
run's batch, or one pool reconciled now) in ``deskpool_reconcile_cycle_seconds``.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING

import asyncpg

from deskpool.audit import record_audit_event
from deskpool.clusters.repository import get_cluster
from deskpool.jobs.model import LeaseLost
from deskpool.jobs.periodic import PeriodicContext, hold_periodic_run
from deskpool.pools.model import Pool
from deskpool.pools.store import get_pool
from deskpool.reconciliation.applying import MARK_BATCH, AppliedPlan, Fence, PlanApplier
from deskpool.reconciliation.cluster_vms import list_clusters, unowned_vms
from deskpool.reconciliation.events import failure_event, unowned_event
from deskpool.reconciliation.failures import (
    PoolFailure,
    PoolReconcileFailed,
    ReconcileBusy,
    apply_failure,
    error_text,
)
from deskpool.reconciliation.metrics import PoolReconcileMetrics
from deskpool.reconciliation.plan import ReconcilePolicy, ReportOrphan
from deskpool.reconciliation.planning import BatchPlanner, PlannedPool
from deskpool.reconciliation.store import (
    owners_on_clusters,
    pools_to_reconcile,
    record_reconcile_failure,
)
from deskpool.reconciliation.store_orphans import known_orphan_ids, record_orphans

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

__all__ = ["MARK_BATCH", "AppliedPlan", "Fence", "PlannedPool", "PoolReconcilerService"]

log = logging.getLogger(__name__)


class PoolReconcilerService:
    """Reconciles stored pools against their clusters.

    Made once per reconciliation run (the periodic task's factory) or per ``pool.reconcile``
    job. :meth:`pools_to_reconcile` remembers the batch; the first :meth:`reconcile_pool` call
    plans the whole batch (one VM listing per cluster), and each call applies one pool's plan.

    :param runtime: the worker's runtime (database, drivers).
    :param policy: backoffs, timeouts and orphan handling.
    :param metrics: where applied actions, failures and cycle durations are counted, if
        anywhere.
    """

    def __init__(
        self,
        runtime: Runtime,
        policy: ReconcilePolicy,
        metrics: PoolReconcileMetrics | None = None,
    ) -> None:
        self.runtime = runtime
        self.policy = policy
        self.metrics = metrics
        self.planner = BatchPlanner(runtime, policy, metrics)
        self.applier = PlanApplier(runtime, metrics)
        self._batch: list[Pool] = []
        self._planned: dict[uuid.UUID, PlannedPool] | None = None
        self._cycle_started = 0.0
        self._cycle_left = 0

    # ------------------------------------------------------------------ the PoolReconciler protocol

    async def pools_to_reconcile(self, connection: asyncpg.Connection, limit: int) -> list[str]:
        """Ids of at most ``limit`` pools, the one attempted longest ago (or never) first."""
        self._cycle_started = time.monotonic()
        self._batch = await pools_to_reconcile(connection, limit)
        self._planned = None
        self._cycle_left = len(self._batch)
        if not self._batch:
            self._end_cycle(self._cycle_started)
        return [str(pool.id) for pool in self._batch]

    async def reconcile_pool(self, pool_id: str, context: PeriodicContext) -> None:
        """Apply the plan of one pool of the batch (planning the batch on the first call).

        :raises PoolReconcileFailed: the pool's pass failed (and says so on the pool).
        """
        try:
            await self._reconcile_pool(uuid.UUID(pool_id), context)
        except ReconcileBusy as busy:
            log.info("%s", busy)
        finally:
            self._cycle_left -= 1
            if self.applier.marks_waiting >= MARK_BATCH or self._cycle_left <= 0:
                await self.applier.flush_marks()
            if self._cycle_left == 0:
                self._end_cycle(self._cycle_started)

    async def _reconcile_pool(self, pool_id: uuid.UUID, context: PeriodicContext) -> None:
        if self._planned is None:
            self._planned = await self.plan(self._batch)
        pool = next((pool for pool in self._batch if pool.id == pool_id), None)
        planned = self._planned.pop(pool_id, None)
        if planned is None and pool_id not in self.planner.failed:
            pool = await get_pool(self.runtime.db, pool_id)
            if pool is None:
                return
            planned = (await self.plan([pool])).get(pool_id)
        if pool is None:
            return

        async def fence(connection: asyncpg.Connection) -> None:
            await hold_periodic_run(connection, context.name, context.fence)

        await self._settle(pool, planned, fence, defer_mark=True)

    # ------------------------------------------------------------------ one pool now

    async def reconcile_now(self, pool_id: uuid.UUID, fence: Fence) -> AppliedPlan | None:
        """Plan and apply one pool now; ``None`` when it does not exist.

        :raises PoolReconcileFailed: the pool's pass failed (and says so on the pool).
        :raises ReconcileBusy: another reconciliation of the pool kept applying too long.
        """
        started = time.monotonic()
        pool = await get_pool(self.runtime.db, pool_id)
        if pool is None:
            return None
        try:
            planned = (await self.plan([pool])).get(pool.id)
            return await self._settle(pool, planned, fence, defer_mark=False)
        finally:
            self._end_cycle(started)

    async def plan(self, pools: list[Pool]) -> dict[uuid.UUID, PlannedPool]:
        """Plan ``pools`` together (:class:`BatchPlanner`); failed pools are left out."""
        return await self.planner.plan(pools)

    async def apply(self, planned: PlannedPool, fence: Fence) -> AppliedPlan:
        """Apply one pool's plan now (:meth:`PlanApplier.apply`)."""
        return await self.applier.apply(planned, fence)

    async def _settle(
        self, pool: Pool, planned: PlannedPool | None, fence: Fence, *, defer_mark: bool
    ) -> AppliedPlan:
        """Apply the pool's plan, or record why its pass failed and raise."""
        failure = self.planner.failed.pop(pool.id, None)
        if planned is not None and failure is None:
            try:
                return await self.applier.apply(planned, fence, defer_mark=defer_mark)
            except (LeaseLost, ReconcileBusy):
                raise
            except Exception as error:
                failure = apply_failure(error)
        if failure is None:  # the pool vanished while it was planned
            return AppliedPlan(pool.id, 0, 0)
        await self._record_failure(pool, failure)
        raise PoolReconcileFailed(pool.name, failure)

    async def _record_failure(self, pool: Pool, failure: PoolFailure) -> None:
        """Record the pool's ``reconcile_error`` and count it (best effort: it is raised anyway)."""
        if self.metrics is not None:
            self.metrics.observe_failure(str(pool.id), str(failure.code))
        try:
            async with self.runtime.db.acquire() as connection, connection.transaction():
                new = await record_reconcile_failure(
                    connection, pool.id, str(failure.code), failure.reason
                )
                if new:  # audited (and so sent to subscribers) when it starts or changes
                    await record_audit_event(connection, failure_event(pool, failure))
        except Exception as error:
            log.warning(
                "pool %s: recording why its reconciliation failed failed too (%s)",
                pool.name,
                error_text(error),
            )

    # ------------------------------------------------------------------ clusters without pools

    async def report_orphans_on_idle_clusters(self, fence: Fence) -> int:
        """Report the orphans of clusters no pool uses (their pools were all deleted, say).

        The pools' batches only list the clusters they use, so a cluster whose last pool went
        away would keep its leftover VMs unseen. Each such cluster is listed once; what no
        desktop owns is recorded and audited once, never deleted. A cluster that cannot be
        listed reports nothing, and one whose orphans cannot be recorded does not stop the
        others. Returns how many orphans were reported.
        """
        async with self.runtime.db.acquire() as connection:
            cluster_ids: list[uuid.UUID] = [
                row["id"]
                for row in await connection.fetch(
                    """SELECT c.id FROM clusters c
                        WHERE NOT EXISTS (SELECT 1 FROM pools p WHERE p.cluster_id = c.id)
                        ORDER BY c.id"""
                )
            ]
            if not cluster_ids:
                return 0
            known = await known_orphan_ids(connection, cluster_ids)
            owners = await owners_on_clusters(connection, cluster_ids)
            clusters = {
                cluster_id: await get_cluster(connection, cluster_id) for cluster_id in cluster_ids
            }
        listed = await list_clusters(self.runtime, clusters)
        reported_total = 0
        for cluster_id, vms in listed.items():
            if vms is None:
                continue
            try:
                unowned = await unowned_vms(
                    self.runtime.db, cluster_id, vms, owners[cluster_id], known
                )
                if not unowned:
                    continue
                async with self.runtime.db.acquire() as connection, connection.transaction():
                    await fence(connection)
                    reported = await record_orphans(connection, cluster_id, unowned)
                    for orphan in reported:
                        await record_audit_event(connection, unowned_event(orphan))
            except LeaseLost:
                raise
            except Exception as error:
                log.warning(
                    "reporting the orphans of cluster %s failed (%s); the other clusters go on",
                    cluster_id,
                    error_text(error),
                )
                continue
            if self.metrics is not None:
                for _ in reported:
                    self.metrics.count_action(ReportOrphan.kind)
            reported_total += len(reported)
        return reported_total

    def _end_cycle(self, started: float) -> None:
        if self.metrics is not None:
            self.metrics.observe_cycle(time.monotonic() - started)
