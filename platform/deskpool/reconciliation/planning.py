"""Planning a batch of pools: their records read once, each cluster listed once, each pool alone.

:class:`BatchPlanner` is the first phase of a reconciliation run
(:mod:`deskpool.reconciliation.reconciler`). For the pools it is given it loads their desktops,
then lists each cluster's deskpool VMs through its driver, **once per cluster** however many of
its pools are in the batch, asks each pool's schedule for its phase in force, and calls the
pure :func:`~deskpool.reconciliation.planner.plan_pools`. Desktops are read *before* the VMs are
listed, so a VM a job records in the meantime is in the listing: a desktop is never taken for
one whose VM vanished because of the order of two reads. A cluster whose VMs cannot be listed
is planned with ``observed_vms=None``: only timeouts are acted on.

*Each pool fails alone.* The phase in force of each pool's schedule, each pool's plan (its
rollout's included), its capacity sample and its warnings and log-offs are computed inside the
pool's own error boundary: one that raises makes that pool a
:class:`~deskpool.reconciliation.failures.PoolFailure` (in :attr:`BatchPlanner.failed`), and
the others are planned as if it did not exist. Should anything of the batch's shared work raise
(a record that cannot be read, say), each pool is planned again on its own, so the fault stays
with the pool it belongs to.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import asyncpg

from deskpool.clusters.repository import get_cluster
from deskpool.notices import store as notice_store
from deskpool.pools.model import Desktop, ObservedVm, Pool, PoolState
from deskpool.reconciliation.cluster_vms import list_clusters, unowned_vms
from deskpool.reconciliation.failures import (
    PoolFailure,
    error_text,
    logoff_failure,
    plan_failure,
    schedule_failure,
)
from deskpool.reconciliation.metrics import PoolReconcileMetrics
from deskpool.reconciliation.plan import PoolPlan, ReconcilePolicy
from deskpool.reconciliation.planner import plan_pools
from deskpool.reconciliation.store import (
    desktop_names_on_clusters,
    desktops_of_pools,
    owners_on_clusters,
)
from deskpool.reconciliation.store_orphans import known_orphan_ids
from deskpool.rollouts import store as rollout_store
from deskpool.rollouts.planner import RolloutView
from deskpool.schedules import store as schedule_store
from deskpool.schedules.logoffs import NOTICE_REASON, LogoffAction, notice_source, plan_logoffs
from deskpool.schedules.model import InForce, LogoffScope, phase_at, targets_of
from deskpool.schedules.samples import SAMPLE_MINUTES, SAMPLE_RETENTION, capacity_sample
from deskpool.sessions.store import last_input_of_pools

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)


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


class BatchPlanner:
    """Plans batches of pools; remembers the pools whose planning failed (:attr:`failed`).

    :param runtime: the worker's runtime (database, drivers).
    :param policy: backoffs, timeouts and orphan handling.
    :param metrics: where each pool's phase in force is recorded, if anywhere.
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
        #: The pools whose planning failed, with why (taken by whoever reports them).
        self.failed: dict[uuid.UUID, PoolFailure] = {}

    async def plan(self, pools: Sequence[Pool]) -> dict[uuid.UUID, PlannedPool]:
        """Plan ``pools`` together: their desktops, one VM listing per cluster, the plans.

        A pool whose planning fails is missing from the answer and is in :attr:`failed`.
        """
        if not pools:
            return {}
        with collector_paused():
            try:
                return await self._plan(pools)
            except asyncpg.PostgresError:
                raise
            except Exception as error:
                if len(pools) == 1:
                    self.failed[pools[0].id] = plan_failure(error)
                    return {}
                log.warning(
                    "planning a batch of %d pools failed (%s); planning each on its own",
                    len(pools),
                    error_text(error),
                )
        planned: dict[uuid.UUID, PlannedPool] = {}
        for pool in pools:
            planned.update(await self.plan([pool]))
        return planned

    def _fail(self, pool: Pool, failure: PoolFailure) -> None:
        self.failed[pool.id] = failure
        # The pass reports it (one warning line): here it is only traced.
        log.debug("pool %s cannot be reconciled: %s", pool.name, failure.reason)

    async def _phases(
        self, pools: Sequence[Pool], now: datetime
    ) -> dict[uuid.UUID, InForce | None]:
        """The phase in force now of each pool that has a schedule (``None``: none in force).

        A pool whose schedule's phase cannot be computed fails (:attr:`failed`).
        """
        wanted = {pool.schedule_id for pool in pools if pool.schedule_id is not None}
        if not wanted:
            return {}
        schedules = await schedule_store.get_schedules(self.runtime.db, wanted)
        phases: dict[uuid.UUID, InForce | None] = {}
        for pool in pools:
            if pool.schedule_id is None or pool.schedule_id not in schedules:
                continue
            schedule = schedules[pool.schedule_id].schedule
            try:
                phases[pool.id] = phase_at(schedule, now)
            except Exception as error:
                self._fail(pool, schedule_failure(repr(schedule.name), error))
        return phases

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
            try:
                targets = None if found is None else targets_of(found.settings, pool.max_size)
                sample = capacity_sample(desktops.get(pool.id, ()), bucket, found, targets)
            except Exception as error:
                self._fail(pool, plan_failure(error))
                continue
            samples.append((pool.id, sample))
            if self.metrics is not None:
                phase = "" if found is None else found.phase
                self.metrics.observe_schedule(str(pool.id), phase, sample)
        try:
            async with self.runtime.db.acquire() as connection, connection.transaction():
                for pool_id, sample in samples:
                    await schedule_store.record_sample(connection, pool_id, sample)
                await schedule_store.prune_samples(
                    connection, now - SAMPLE_RETENTION, [pool.id for pool in pools]
                )
        except asyncpg.PostgresError as error:
            log.warning(
                "recording the capacity samples of %d pool(s) failed (%s)", len(pools), error
            )

    async def _plan(self, pools: Sequence[Pool]) -> dict[uuid.UUID, PlannedPool]:
        pool_ids = [pool.id for pool in pools]
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
        await self._sample(pools, desktops, in_force, now)
        pools = [pool for pool in pools if pool.id not in self.failed]
        failures: dict[uuid.UUID, Exception] = {}
        plans = plan_pools(
            pools,
            [desktop for pool in pools for desktop in desktops.get(pool.id, ())],
            observed,
            now,
            self.policy,
            taken_names=names,
            known_orphans=known,
            rollouts=rollouts,
            targets={
                pool.id: targets_of(found.settings, pool.max_size)
                for pool in pools
                if (found := in_force.get(pool.id)) is not None
            },
            failures=failures,
        )
        for pool in pools:
            if pool.id in failures:
                view = rollouts.get(pool.id)
                rollout = None if view is None else f"to {view.rollout.to_template!r}"
                self._fail(pool, plan_failure(failures[pool.id], rollout))
        logoffs = await self._logoffs(pools, desktops, in_force, now)
        vms_by_cluster = {
            cluster_id: {vm.vm_id: vm for vm in vms} for cluster_id, vms in observed.items()
        }
        by_id = {plan.pool_id: plan for plan in plans}
        planned: dict[uuid.UUID, PlannedPool] = {}
        for pool in pools:
            plan = by_id.get(pool.id)
            if plan is None or pool.id in self.failed:
                continue
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
        # A cluster's unowned VMs go with one of its pools; if all of them failed, they wait.
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
            if pool.id in self.failed:
                continue
            phase = in_force.get(pool.id)
            logoff = None if phase is None else phase.settings.logoff
            if logoff is None and pool.id not in found:
                continue
            try:
                out[pool.id] = plan_logoffs(
                    desktops.get(pool.id, ()),
                    found.get(pool.id, ()),
                    logoff if pool.state is PoolState.ENABLED else None,
                    source=None if pool.schedule_id is None else notice_source(pool.schedule_id),
                    last_input=last_input,
                    now=now,
                )
            except Exception as error:
                self._fail(pool, logoff_failure(error))
        return out
