"""Pool reconciliation applied: plan a batch of pools, then apply each plan's actions.

:class:`PoolReconcilerService` implements the
:class:`~deskpool.reconciliation.periodic.PoolReconciler` protocol that the worker's
``pool_reconcile`` periodic task runs every ``POOL_RECONCILE_INTERVAL``, and also reconciles
one pool on demand (the ``pool.reconcile`` job, payload ``{"pool_id": ...}``).

A run works in two phases:

1. *Plan the batch at once.* For the pools the run takes (those reconciled longest ago
   first), load their desktops, then list each cluster's deskpool VMs through its driver,
   **once per cluster** however many of its pools are in the batch, and call the pure
   :func:`~deskpool.reconciliation.planner.plan_pools`. Desktops are read *before* the VMs are
   listed, so a VM a job records in the meantime is in the listing: a desktop is never
   taken for one whose VM vanished because of the order of two reads. A cluster whose VMs
   cannot be listed (unreachable, driver not installed, credentials that do not open) is
   planned with ``observed_vms=None``: only timeouts are acted on, never "every VM vanished".
2. *Apply each pool's actions* in one transaction, fenced by the run's lease (or the job's)
   and under the pool's reconciliation lock, so the periodic task and a ``pool.reconcile`` job
   never interleave on a pool; each action (every desktop of a create at once) runs in a
   savepoint of it. An action is applied only to the desktop it was planned from
   (:func:`apply_event_if_unchanged`): a desktop that moved on since the plan (a user took it,
   a job failed it) is rolled back alone and left to the next pass. Every applied action
   writes its reason to the audit trail (actor ``system:reconciler``) and enqueues the job
   that carries it out. Last, in the same transaction, the pool is marked reconciled with the
   plan's generation and health. A periodic run marks the pools that needed nothing
   :data:`MARK_BATCH` at a time, in one statement (one commit, not one per pool); if the run
   stops before it records them, they are only reconciled again first.

*Cluster-wide orphans.* A pool's plan reports the orphans tagged for that pool's desktops; a
VM tagged as deskpool's whose tags name no existing pool and no existing desktop (left behind
by a deleted pool, say), and that no desktop records, belongs to no pool's plan. Planning finds
them in each listed cluster's VMs (:func:`~deskpool.reconciliation.cluster_vms.unowned_vms`, with
the
owners read both before and after the listing, so a desktop created or deleted meanwhile is
never taken for missing) and the first pool of that cluster applied records them
(``pool_orphans`` with no pool), audited once each as ``reconcile.report_orphan``. They are
never deleted unless an administrator asks (``DELETE /api/v1/clusters/{id}/orphans/{vm_id}``).
A cluster that cannot be listed yields none.

*Metrics* (:class:`~deskpool.reconciliation.metrics.PoolReconcileMetrics`, when given): each
applied action counts in ``deskpool_reconcile_actions_total{kind}``, each cycle (a periodic
run's batch, or one pool reconciled now) in ``deskpool_reconcile_cycle_seconds``.

The clusters' VMs are listed by :mod:`deskpool.reconciliation.cluster_vms`, the audit events are
built
by :mod:`deskpool.reconciliation.events`, and the ``pool.reconcile`` job and the cluster orphan
scan are :mod:`deskpool.reconciliation.jobs`.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import asyncpg

from deskpool.audit import record_audit_event
from deskpool.clusters.repository import get_cluster
from deskpool.desktops.jobs import (
    POWER_ON,
    PROVISION,
    enqueue_desktop_job,
    enqueue_orphan_deletion,
    job_for_state,
)
from deskpool.desktops.states import IllegalTransition
from deskpool.desktops.store import insert_desktops
from deskpool.errors import NotFound
from deskpool.events import AuditEvent
from deskpool.jobs.periodic import PeriodicContext, hold_periodic_run
from deskpool.licensing.service import cap_desktops
from deskpool.live.model import LiveEvent
from deskpool.live.publishers import publish
from deskpool.notices import store as notice_store
from deskpool.notices.service import Delivery, deliver
from deskpool.pools.errors import DesktopNameTaken
from deskpool.pools.model import Desktop, ObservedVm, Pool, PoolState
from deskpool.pools.store import get_pool
from deskpool.provisioning.store import apply_event_if_unchanged
from deskpool.reconciliation.cluster_vms import list_clusters, unowned_vms
from deskpool.reconciliation.events import action_event, unowned_event
from deskpool.reconciliation.metrics import PoolReconcileMetrics
from deskpool.reconciliation.plan import (
    Action,
    CreateDesktop,
    DeleteOrphanVm,
    HealthStatus,
    PoolHealth,
    PoolPlan,
    PowerOn,
    ReconcilePolicy,
    ReportOrphan,
    desktop_event,
)
from deskpool.reconciliation.planner import plan_pools
from deskpool.reconciliation.rollout_apply import apply_rollout_action
from deskpool.reconciliation.schedule_apply import apply_logoff_action
from deskpool.reconciliation.store import (
    desktop_names_on_clusters,
    desktops_of_pools,
    lock_pool_for_reconciliation,
    mark_reconciled,
    mark_reconciled_many,
    owners_on_clusters,
    pools_to_reconcile,
)
from deskpool.reconciliation.store_orphans import known_orphan_ids, record_orphans
from deskpool.rollouts import store as rollout_store
from deskpool.rollouts.model import ENDED
from deskpool.rollouts.plan import ChangeRollout, RolloutAction
from deskpool.rollouts.planner import RolloutView
from deskpool.schedules import store as schedule_store
from deskpool.schedules.logoffs import NOTICE_REASON, LogoffAction, notice_source, plan_logoffs
from deskpool.schedules.model import InForce, LogoffScope, phase_at, targets_of
from deskpool.schedules.samples import SAMPLE_MINUTES, SAMPLE_RETENTION, capacity_sample
from deskpool.sessions.store import last_input_of_pools

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: Passes over pools without actions a periodic run records in one statement (at most).
MARK_BATCH = 200

#: Fences a transaction: raises :class:`~deskpool.jobs.LeaseLost` unless the caller's run or
#: job still holds its lease (``JobContext.hold_lease``, :func:`hold_periodic_run`).
Fence = Callable[[asyncpg.Connection], Awaitable[None]]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a batch is planned.

    Planning keeps every desktop record and listed VM of the batch alive until it returns, so
    the collections their allocations trigger free nothing, yet each full one walks the whole
    heap: with 1,000 pools they were a third of the planning's CPU time, and grew faster than
    the batch (bench/performance-notes.md). Reference counting still frees what dies; the
    collector runs again afterwards (unless something else had turned it off).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _Skipped(Exception):
    """A rollout or schedule action whose subject moved on since the plan (rolled back)."""


class _Kinded(Protocol):
    """An action counted by its kind."""

    @property
    def kind(self) -> str: ...


@dataclass(frozen=True)
class PlannedPool:
    """A pool's plan, with what it was made from (to apply it to those exact records).

    :ivar desktops: the pool's desktops as the plan saw them, by id.
    :ivar vms: the VMs listed on the pool's cluster, by id (empty when not listed).
    :ivar observed: whether the cluster's VMs could be listed.
    :ivar unowned: VMs of the cluster that no pool or desktop owns, to record with this pool's
        actions (given to one pool of the cluster per plan).
    :ivar rollout: the pool's active rollout as the plan saw it, if it has one.
    :ivar logoffs: the warnings and log-offs of the phase in force
        (:mod:`deskpool.schedules.logoffs`).
    """

    pool: Pool
    plan: PoolPlan
    desktops: Mapping[uuid.UUID, Desktop]
    vms: Mapping[str, ObservedVm]
    observed: bool
    unowned: tuple[ObservedVm, ...] = ()
    rollout: RolloutView | None = None
    logoffs: tuple[LogoffAction, ...] = ()


@dataclass(frozen=True)
class AppliedPlan:
    """What applying one pool's plan did.

    :ivar applied: actions applied.
    :ivar skipped: actions left to the next pass (their desktop moved on since the plan).
    """

    pool_id: uuid.UUID
    applied: int
    skipped: int


class PoolReconcilerService:
    """Reconciles stored pools against their clusters.

    Made once per reconciliation run (the periodic task's factory) or per ``pool.reconcile``
    job. :meth:`pools_to_reconcile` remembers the batch; the first :meth:`reconcile_pool` call
    plans the whole batch (one VM listing per cluster), and each call applies one pool's plan.

    :param runtime: the worker's runtime (database, drivers).
    :param policy: backoffs, timeouts and orphan handling.
    :param metrics: where applied actions and cycle durations are counted, if anywhere.
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
        self._batch: list[Pool] = []
        self._planned: dict[uuid.UUID, PlannedPool] | None = None
        self._cycle_started = 0.0
        self._cycle_left = 0
        #: Why desktops a pool's plan wanted were not created (a license limit), by pool.
        self._held: dict[uuid.UUID, str] = {}
        #: Passes over pools without actions, not recorded yet (:meth:`flush_marks`).
        self._marks: list[tuple[uuid.UUID, int, PoolHealth]] = []

    # ------------------------------------------------------------------ the PoolReconciler protocol

    async def pools_to_reconcile(self, connection: asyncpg.Connection, limit: int) -> list[str]:
        """Ids of at most ``limit`` pools, the one reconciled longest ago (or never) first."""
        self._cycle_started = time.monotonic()
        self._batch = await pools_to_reconcile(connection, limit)
        self._planned = None
        self._cycle_left = len(self._batch)
        if not self._batch:
            self._end_cycle(self._cycle_started)
        return [str(pool.id) for pool in self._batch]

    async def reconcile_pool(self, pool_id: str, context: PeriodicContext) -> None:
        """Apply the plan of one pool of the batch (planning the batch on the first call)."""
        try:
            await self._reconcile_pool(pool_id, context)
        finally:
            self._cycle_left -= 1
            if len(self._marks) >= MARK_BATCH or self._cycle_left <= 0:
                await self.flush_marks()
            if self._cycle_left == 0:
                self._end_cycle(self._cycle_started)

    async def _reconcile_pool(self, pool_id: str, context: PeriodicContext) -> None:
        if self._planned is None:
            self._planned = await self.plan(self._batch)
        planned = self._planned.pop(uuid.UUID(pool_id), None)
        if planned is None:
            pool = await get_pool(self.runtime.db, uuid.UUID(pool_id))
            if pool is None:
                return
            planned = (await self.plan([pool]))[pool.id]

        async def fence(connection: asyncpg.Connection) -> None:
            await hold_periodic_run(connection, context.name, context.fence)

        await self.apply(planned, fence, defer_mark=True)

    # ------------------------------------------------------------------ one pool now

    async def reconcile_now(self, pool_id: uuid.UUID, fence: Fence) -> AppliedPlan | None:
        """Plan and apply one pool now; ``None`` when it does not exist."""
        started = time.monotonic()
        pool = await get_pool(self.runtime.db, pool_id)
        if pool is None:
            return None
        try:
            return await self.apply((await self.plan([pool]))[pool.id], fence)
        finally:
            self._end_cycle(started)

    # ------------------------------------------------------------------ clusters without pools

    async def report_orphans_on_idle_clusters(self, fence: Fence) -> int:
        """Report the orphans of clusters no pool uses (their pools were all deleted, say).

        The pools' batches only list the clusters they use, so a cluster whose last pool went
        away would keep its leftover VMs unseen. Each such cluster is listed once; what no
        desktop owns is recorded and audited once, never deleted. A cluster that cannot be
        listed reports nothing. Returns how many orphans were reported.
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
            unowned = await unowned_vms(self.runtime.db, cluster_id, vms, owners[cluster_id], known)
            if not unowned:
                continue
            async with self.runtime.db.acquire() as connection, connection.transaction():
                await fence(connection)
                reported = await record_orphans(connection, cluster_id, unowned)
                for orphan in reported:
                    await record_audit_event(connection, unowned_event(orphan))
            for _ in reported:
                self._count(ReportOrphan.kind)
            reported_total += len(reported)
        return reported_total

    def _end_cycle(self, started: float) -> None:
        if self.metrics is not None:
            self.metrics.observe_cycle(time.monotonic() - started)

    # ------------------------------------------------------------------ planning

    async def plan(self, pools: Sequence[Pool]) -> dict[uuid.UUID, PlannedPool]:
        """Plan ``pools`` together: their desktops, one VM listing per cluster, the plans."""
        if not pools:
            return {}
        with collector_paused():
            return await self._plan(pools)

    async def _phases(
        self, pools: Sequence[Pool], now: datetime
    ) -> dict[uuid.UUID, InForce | None]:
        """The phase in force now of each pool that has a schedule (``None``: none in force)."""
        wanted = {pool.schedule_id for pool in pools if pool.schedule_id is not None}
        if not wanted:
            return {}
        schedules = await schedule_store.get_schedules(self.runtime.db, wanted)
        return {
            pool.id: phase_at(schedules[pool.schedule_id].schedule, now)
            for pool in pools
            if pool.schedule_id is not None and pool.schedule_id in schedules
        }

    async def _sample(
        self,
        pools: Sequence[Pool],
        desktops: Mapping[uuid.UUID, Sequence[Desktop]],
        in_force: Mapping[uuid.UUID, InForce | None],
        now: datetime,
    ) -> None:
        """Record what each pool has (one sample per pool and 5 minutes), and the metrics."""
        bucket = now - timedelta(
            minutes=now.minute % SAMPLE_MINUTES, seconds=now.second, microseconds=now.microsecond
        )
        samples = []
        for pool in pools:
            found = in_force.get(pool.id)
            targets = None if found is None else targets_of(found.settings, pool.max_size)
            sample = capacity_sample(desktops.get(pool.id, ()), bucket, found, targets)
            samples.append((pool.id, sample))
            if self.metrics is not None:
                phase = "" if found is None else found.phase
                self.metrics.observe_schedule(str(pool.id), phase, sample.powered_off)
        try:
            async with self.runtime.db.acquire() as connection, connection.transaction():
                for pool_id, sample in samples:
                    await schedule_store.record_sample(connection, pool_id, sample)
                await schedule_store.prune_samples(
                    connection, now - SAMPLE_RETENTION, [pool.id for pool in pools]
                )
        except asyncpg.PostgresError:
            log.exception("recording the capacity samples of %d pool(s) failed", len(pools))

    async def _plan(self, pools: Sequence[Pool]) -> dict[uuid.UUID, PlannedPool]:
        pool_ids = [pool.id for pool in pools]
        by_id = {pool.id: pool for pool in pools}
        cluster_ids = sorted({pool.cluster_id for pool in pools})
        async with self.runtime.db.acquire() as connection:
            now: datetime = await connection.fetchval("SELECT now()")
            desktops = await desktops_of_pools(connection, pool_ids)
            names = await desktop_names_on_clusters(connection, cluster_ids)
            known = await known_orphan_ids(connection, cluster_ids)
            owners = await owners_on_clusters(connection, cluster_ids)
            rollouts = await rollout_store.active_rollouts(connection, pool_ids)
            clusters = {
                cluster_id: await get_cluster(connection, cluster_id) for cluster_id in cluster_ids
            }
        listed = await list_clusters(self.runtime, clusters)
        observed = {cluster_id: vms for cluster_id, vms in listed.items() if vms is not None}
        unowned = {
            cluster_id: await unowned_vms(
                self.runtime.db, cluster_id, vms, owners[cluster_id], known
            )
            for cluster_id, vms in observed.items()
        }
        in_force = await self._phases(pools, now)
        plans = plan_pools(
            pools,
            [desktop for pool_desktops in desktops.values() for desktop in pool_desktops],
            observed,
            now,
            self.policy,
            taken_names=names,
            known_orphans=known,
            rollouts=rollouts,
            targets={
                pool_id: targets_of(found.settings, by_id[pool_id].max_size)
                for pool_id, found in in_force.items()
                if found is not None
            },
        )
        await self._sample(pools, desktops, in_force, now)
        logoffs = await self._logoffs(pools, desktops, in_force, now)
        vms_by_cluster = {
            cluster_id: {vm.vm_id: vm for vm in vms} for cluster_id, vms in observed.items()
        }
        planned: dict[uuid.UUID, PlannedPool] = {}
        for pool, plan in zip(pools, plans, strict=True):
            planned[pool.id] = PlannedPool(
                pool=pool,
                plan=plan,
                desktops={desktop.id: desktop for desktop in desktops.get(pool.id, ())},
                vms=vms_by_cluster.get(pool.cluster_id, {}),
                observed=pool.cluster_id in observed,
                unowned=tuple(unowned.pop(pool.cluster_id, ())),
                rollout=rollouts.get(pool.id),
                logoffs=logoffs.get(pool.id, ()),
            )
        return planned

    async def _logoffs(
        self,
        pools: Sequence[Pool],
        desktops: Mapping[uuid.UUID, Sequence[Desktop]],
        in_force: Mapping[uuid.UUID, InForce | None],
        now: datetime,
    ) -> dict[uuid.UUID, tuple[LogoffAction, ...]]:
        """Each pool's warnings and log-offs of its phase in force, and stale warnings cleared."""
        pool_ids = [pool.id for pool in pools]
        found = await notice_store.open_notices_of_pools(self.runtime.db, pool_ids, NOTICE_REASON)
        idle = [
            pool_id
            for pool_id, phase in in_force.items()
            if phase is not None
            and phase.settings.logoff is not None
            and phase.settings.logoff.scope is LogoffScope.IDLE
        ]
        last_input = await last_input_of_pools(self.runtime.db, idle)
        out: dict[uuid.UUID, tuple[LogoffAction, ...]] = {}
        for pool in pools:
            phase = in_force.get(pool.id)
            logoff = None if phase is None else phase.settings.logoff
            if logoff is None and pool.id not in found:
                continue
            out[pool.id] = plan_logoffs(
                desktops.get(pool.id, ()),
                found.get(pool.id, ()),
                logoff if pool.state is PoolState.ENABLED else None,
                source=None if pool.schedule_id is None else notice_source(pool.schedule_id),
                last_input=last_input,
                now=now,
            )
        return out

    # ------------------------------------------------------------------ applying

    async def apply(
        self, planned: PlannedPool, fence: Fence, *, defer_mark: bool = False
    ) -> AppliedPlan:
        """Apply one pool's actions in one fenced transaction, and mark the pool reconciled.

        Each action runs in a savepoint of that transaction: one whose desktop moved on since
        the plan is rolled back alone and left to the next pass. The pool is marked in the same
        transaction; a pool without actions is marked at once, or, with ``defer_mark``, with
        other pools of the run (:meth:`flush_marks`).
        """
        pool, plan = planned.pool, planned.plan
        applied = skipped = 0
        rollout_actions = plan.rollout.actions if plan.rollout is not None else ()
        delivery = Delivery()
        acting = bool(plan.actions or rollout_actions or planned.logoffs)
        if defer_mark and not (planned.unowned or acting):
            self._marks.append(self._mark(planned))
            return AppliedPlan(pool.id, 0, 0)
        async with self.runtime.db.acquire() as connection:
            if planned.unowned:
                await self._report_unowned(connection, planned, fence)
            if acting:
                async with connection.transaction():
                    await fence(connection)
                    await lock_pool_for_reconciliation(connection, pool.id)
                    applied, skipped = await self._apply_actions(connection, planned)
                    done, left = await self._apply_rollout(connection, planned, delivery)
                    applied += done
                    skipped += left
                    done, left = await self._apply_logoffs(connection, planned, delivery)
                    applied += done
                    skipped += left
                    mark = self._mark(planned)
                    health = mark[2]
                    await mark_reconciled(connection, *mark)
            else:
                mark = self._mark(planned)
                health = mark[2]
                await mark_reconciled(connection, *mark)
        await deliver(self.runtime, delivery)
        if plan.rollout is not None and self.metrics is not None:
            ended = any(
                isinstance(action, ChangeRollout) and action.state in ENDED
                for action in plan.rollout.actions
            )
            self.metrics.observe_rollout(
                str(pool.id), str(plan.rollout.rollout_id), plan.rollout.counts, ended=ended
            )
        if applied:
            await publish(
                self.runtime,
                LiveEvent(
                    "pool.reconciled",
                    str(pool.id),
                    {"health": str(health.status), "applied": applied},
                ),
            )
        if applied or skipped:
            log.info(
                "pool %s reconciled: %d action(s) applied, %d left to the next pass",
                pool.name,
                applied,
                skipped,
            )
        return AppliedPlan(pool.id, applied, skipped)

    async def _report_unowned(
        self, connection: asyncpg.Connection, planned: PlannedPool, fence: Fence
    ) -> None:
        """Record the cluster's VMs no pool or desktop owns (given to this pool's plan)."""
        async with connection.transaction():
            await fence(connection)
            reported = await record_orphans(connection, planned.pool.cluster_id, planned.unowned)
            for orphan in reported:
                await record_audit_event(connection, unowned_event(orphan))
        for _ in reported:
            self._count(ReportOrphan.kind)
        if reported:
            log.info(
                "%d VM(s) tagged as deskpool's but owned by no pool or desktop reported "
                "as orphans on cluster %s",
                len(reported),
                planned.pool.cluster_id,
            )

    async def _apply_actions(
        self, connection: asyncpg.Connection, planned: PlannedPool
    ) -> tuple[int, int]:
        """Apply the plan's actions, each in a savepoint of the caller's fenced transaction.

        Every create is one action. Returns how many were applied, and how many were left to
        the next pass.
        """
        pool, plan = planned.pool, planned.plan
        applied = skipped = 0
        creates: list[Action] = [a for a in plan.actions if isinstance(a, CreateDesktop)]
        batches = [creates] if creates else []
        batches += [[action] for action in plan.actions if not isinstance(action, CreateDesktop)]
        for batch in batches:
            try:
                async with connection.transaction():
                    events = await self._apply(connection, planned, batch)
                    for event in events:
                        await record_audit_event(connection, event)
            except (IllegalTransition, DesktopNameTaken, NotFound) as error:
                log.info("pool %s: %s left to the next pass (%s)", pool.name, batch, error)
                events = []
            applied += len(events)
            skipped += len(batch) - len(events)
            for _ in events:
                self._count(batch[0].kind)
        return applied, skipped

    async def _apply_rollout(
        self, connection: asyncpg.Connection, planned: PlannedPool, delivery: Delivery
    ) -> tuple[int, int]:
        """Apply the rollout's actions, each in a savepoint; how many applied and skipped.

        A rollout paused, resumed or cancelled since the plan, or a desktop that moved on,
        leaves the action to the next pass.
        """
        part, view = planned.plan.rollout, planned.rollout
        if part is None or view is None:
            return 0, 0
        desktops = dict(planned.desktops)

        def one(action: RolloutAction, now: datetime) -> Awaitable[Delivery | None]:
            return apply_rollout_action(connection, planned.pool, part, view, desktops, action, now)

        return await self._each(connection, planned, part.actions, one, delivery)

    async def _apply_logoffs(
        self, connection: asyncpg.Connection, planned: PlannedPool, delivery: Delivery
    ) -> tuple[int, int]:
        """Apply the phase's warnings and log-offs, each in a savepoint; applied and skipped.

        One whose desktop or warning moved on since the plan is left to the next pass.
        """

        def one(action: LogoffAction, now: datetime) -> Awaitable[Delivery | None]:
            return apply_logoff_action(connection, planned.pool, planned.desktops, action, now)

        return await self._each(connection, planned, planned.logoffs, one, delivery)

    async def _each(
        self,
        connection: asyncpg.Connection,
        planned: PlannedPool,
        actions: Sequence[_Kinded],
        apply_one: Callable[[Any, datetime], Awaitable[Delivery | None]],
        delivery: Delivery,
    ) -> tuple[int, int]:
        """Apply ``actions`` with ``apply_one``, each in a savepoint (``None``: skipped)."""
        applied = skipped = 0
        now = datetime.now(UTC)
        for action in actions:
            try:
                async with connection.transaction():
                    done = await apply_one(action, now)
                    if done is None:
                        raise _Skipped()
            except (_Skipped, IllegalTransition, NotFound) as error:
                log.info("pool %s: %s left to the next pass (%s)", planned.pool.name, action, error)
                skipped += 1
                continue
            delivery.extend(done)
            applied += 1
            self._count(action.kind)
        return applied, skipped

    def _mark(self, planned: PlannedPool) -> tuple[uuid.UUID, int, PoolHealth]:
        """What marking the pool reconciled records: its id, the generation seen, its health."""
        pool, plan = planned.pool, planned.plan
        generation = plan.generation if planned.observed else pool.reconciled_generation
        health = plan.health
        held = self._held.pop(pool.id, None)
        if held is not None:
            status = HealthStatus.DEGRADED if health.status is HealthStatus.HEALTHY else None
            health = PoolHealth(status or health.status, (*health.reasons, held))
            log.warning("pool %s: %s", pool.name, held)
        return pool.id, generation, health

    async def flush_marks(self) -> None:
        """Mark the pools whose marks :meth:`apply` deferred reconciled, in one statement.

        Losing them is harmless (the pools are only reconciled again first), so a failure is
        logged, not raised: it must not count against the pool whose pass triggered it.
        """
        marks, self._marks = self._marks, []
        if not marks:
            return
        try:
            await mark_reconciled_many(self.runtime.db, marks)
        except Exception:
            log.exception(
                "recording the passes over %d pool(s) failed; they are reconciled again first",
                len(marks),
            )

    async def _apply(
        self, connection: asyncpg.Connection, planned: PlannedPool, actions: list[Action]
    ) -> list[AuditEvent]:
        """Apply ``actions`` (all creates, or one other action); return their audit events."""
        pool = planned.pool
        now = datetime.now(UTC)
        first = actions[0]
        if isinstance(first, CreateDesktop):
            names = [action.name for action in actions if isinstance(action, CreateDesktop)]
            # A license limit stops growth here, never destroys: the rest waits, and says why.
            allowed, held = await cap_desktops(connection, self.runtime.licensing, len(names))
            if held is not None:
                self._held[pool.id] = held
                names, actions = names[:allowed], actions[:allowed]
            events = []
            for action, desktop in zip(
                actions, await insert_desktops(connection, pool, names), strict=True
            ):
                job = await enqueue_desktop_job(connection, PROVISION, desktop)
                events.append(action_event(planned, action, desktop, job, now))
            return events
        if isinstance(first, PowerOn):
            desktop = planned.desktops[first.desktop_id]
            job = await enqueue_desktop_job(connection, POWER_ON, desktop)
            return [action_event(planned, first, desktop, job, now)]
        if isinstance(first, ReportOrphan):
            vm = planned.vms.get(first.vm_id)
            if vm is None:
                return []
            if not await record_orphans(
                connection, pool.cluster_id, [replace(vm, pool_id=pool.id)]
            ):
                return []
            return [action_event(planned, first, None, None, now)]
        if isinstance(first, DeleteOrphanVm):
            deletion = await enqueue_orphan_deletion(connection, pool.cluster_id, first.vm_id)
            return [action_event(planned, first, None, deletion, now)]
        event = desktop_event(first)
        desktop_id = getattr(first, "desktop_id", None)
        expected = planned.desktops.get(desktop_id) if desktop_id is not None else None
        if event is None or expected is None:
            raise ValueError(f"reconciliation cannot apply {first!r}")
        after = await apply_event_if_unchanged(connection, expected, event, now, pool=pool)
        if after is None:
            return []
        kind = job_for_state(after)
        follow_up = None if kind is None else await enqueue_desktop_job(connection, kind, after)
        return [action_event(planned, first, after, follow_up, now)]

    def _count(self, kind: str) -> None:
        if self.metrics is not None:
            self.metrics.count_action(kind)
