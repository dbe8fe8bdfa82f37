"""Applying one pool's plan: one fenced transaction under the pool's reconciliation lock.

:class:`PlanApplier` is the second phase of a reconciliation run
(:mod:`deskpool.reconciliation.reconciler`). Each pool's actions are applied in one
transaction, fenced by the run's lease (or the job's) and under the pool's reconciliation lock
(:func:`lock_pool`, waiting up to :data:`LOCK_WAIT` for it between tries that never block, so
no statement timeout cuts the wait short), so two reconciliations of one pool (the periodic
pass, a ``pool.reconcile`` job, a VM event's) never apply at once;
each action (every desktop of a create at once) runs in a savepoint of it.

*A plan made before the lock.* Plans are made before the lock is taken (a batch's together),
so another pass may have applied in between. Under the lock the pool's row and its desktops'
ids are read again (:func:`~deskpool.reconciliation.store.pool_now`): creates are cut to what
the pool still lacks (:func:`creates_allowed`: never more records than its ``max_size``, its
rollout's surge included, not even for a pass), an orphan that a desktop now owns is not
reported or deleted, and an action on a desktop is applied only to the desktop it was planned
from (:func:`apply_event_if_unchanged`): one that moved on since is rolled back alone and left
to the next pass. Every applied action writes its reason to the audit trail (actor
``system:reconciler``) and enqueues the job that carries it out. Last, in the same transaction,
the pool is marked reconciled with the plan's generation and health (which clears a
``reconcile_error``). A periodic run marks the pools that needed nothing :data:`MARK_BATCH` at
a time, in one statement.

*The growth lock.* Creates take the license's growth lock (in
:func:`~deskpool.licensing.service.cap_desktops`), held until the transaction commits, and
``POST /api/v1/pools`` waits for it under the api's statement timeout: a create's desktops are
inserted, given their provisioning jobs (:func:`~deskpool.desktops.jobs.enqueue_desktop_jobs`)
and audited (:func:`~deskpool.audit.record_audit_events`) in a statement each, however many.

*Contention.* A transaction PostgreSQL ends to break a deadlock, or for a serialization
failure, was rolled back whole: it is run again a bounded number of times
(:data:`~deskpool.outages.CONTENTION_ATTEMPTS` in all) before the pool's pass counts as failed.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import asyncpg

from deskpool.audit import record_audit_event, record_audit_events
from deskpool.desktops.jobs import (
    POWER_ON,
    PROVISION,
    enqueue_desktop_job,
    enqueue_desktop_jobs,
    enqueue_orphan_deletion,
    job_for_state,
)
from deskpool.desktops.states import IllegalTransition
from deskpool.desktops.store import apply_event_if_unchanged, insert_desktops
from deskpool.errors import NotFound
from deskpool.events import AuditEvent
from deskpool.licensing.service import cap_desktops
from deskpool.live.model import LiveEvent
from deskpool.live.publishers import desktop_event as live_desktop_event
from deskpool.live.publishers import publish
from deskpool.notices.service import Delivery, deliver
from deskpool.outages import CONTENTION_ATTEMPTS, contended, contention_pause
from deskpool.pools.errors import DesktopNameTaken
from deskpool.pools.model import Desktop, Pool, PoolState
from deskpool.reconciliation.events import action_event, unowned_event
from deskpool.reconciliation.failures import ReconcileBusy, error_text
from deskpool.reconciliation.metrics import PoolReconcileMetrics
from deskpool.reconciliation.plan import (
    Action,
    CreateDesktop,
    DeleteOrphanVm,
    HealthStatus,
    PoolHealth,
    PowerOn,
    ReportOrphan,
    desktop_event,
)
from deskpool.reconciliation.planning import PlannedPool
from deskpool.reconciliation.rollout_apply import apply_rollout_action
from deskpool.reconciliation.schedule_apply import apply_logoff_action
from deskpool.reconciliation.store import (
    PoolNow,
    mark_reconciled,
    mark_reconciled_many,
    pool_now,
    try_lock_pool_for_reconciliation,
)
from deskpool.reconciliation.store_orphans import record_orphans
from deskpool.rollouts.model import ENDED
from deskpool.rollouts.plan import ChangeRollout, RolloutAction
from deskpool.schedules.logoffs import LogoffAction

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: Passes over pools without actions a periodic run records in one statement (at most).
MARK_BATCH = 200

#: How long a pass waits for another reconciliation of the same pool to finish applying.
LOCK_WAIT = 60.0

#: Fences a transaction: raises :class:`~deskpool.jobs.LeaseLost` unless the caller's run or
#: job still holds its lease (``JobContext.hold_lease``, :func:`hold_periodic_run`).
Fence = Callable[[asyncpg.Connection], Awaitable[None]]


class _Skipped(Exception):
    """A rollout or schedule action whose subject moved on since the plan (rolled back)."""


class _Kinded(Protocol):
    """An action counted by its kind."""

    @property
    def kind(self) -> str: ...


@dataclass(frozen=True)
class AppliedPlan:
    """What applying one pool's plan did.

    :ivar applied: actions applied.
    :ivar skipped: actions left to the next pass (their desktop moved on since the plan).
    """

    pool_id: uuid.UUID
    applied: int
    skipped: int


async def lock_pool(connection: asyncpg.Connection, pool: Pool) -> None:
    """Take the pool's reconciliation lock, waiting up to :data:`LOCK_WAIT` for it.

    :raises ReconcileBusy: another reconciliation of the pool held it all that time.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LOCK_WAIT
    pause = 0.02
    while not await try_lock_pool_for_reconciliation(connection, pool.id):
        left = deadline - loop.time()
        if left <= 0:
            raise ReconcileBusy(
                f"pool {pool.name}: another reconciliation of it held its lock for "
                f"{LOCK_WAIT:g}s; left to the next pass"
            )
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, 0.5)


def creates_allowed(planned: PlannedPool, current: PoolNow | None, wanted: int) -> int:
    """How many of the ``wanted`` creates the plan may still apply, the pool as it is now.

    The plan's creates counted the desktops it saw; those inserted since (by another
    reconciliation) are taken off, and the pool never gets more records than its cap (its
    ``max_size`` now, plus the surge of a rollout under way). A pool gone or no longer enabled
    gets none.
    """
    if current is None or current.state is not PoolState.ENABLED:
        return 0
    pool, plan = planned.pool, planned.plan
    cap = max(pool.max_size, plan.rollout.record_cap if plan.rollout is not None else 0)
    cap -= max(0, pool.max_size - current.max_size)
    inserted = len(current.desktop_ids - planned.desktops.keys())
    return max(0, min(wanted - inserted, cap - len(current.desktop_ids)))


def owned_now(planned: PlannedPool, current: PoolNow | None, vm_id: str) -> bool:
    """Whether a VM planned as an orphan is a desktop's now.

    A desktop records it since the plan, or it is tagged for a desktop inserted since (by
    another reconciliation, whose job is cloning it): the plan, made before, could not know.
    """
    if current is None:
        return False
    vm = planned.vms.get(vm_id)
    tagged = None if vm is None else vm.desktop_id
    new = tagged is not None and tagged in current.desktop_ids and tagged not in planned.desktops
    return vm_id in current.vm_ids or new


class PlanApplier:
    """Applies pools' plans (:meth:`apply`) and records the passes over them.

    :param runtime: the worker's runtime (database, licensing, live events).
    :param metrics: where applied actions are counted, if anywhere.
    """

    def __init__(self, runtime: Runtime, metrics: PoolReconcileMetrics | None = None) -> None:
        self.runtime = runtime
        self.metrics = metrics
        #: Why desktops a pool's plan wanted were not created (a license limit), by pool.
        self._held: dict[uuid.UUID, str] = {}
        #: Passes over pools without actions, not recorded yet (:meth:`flush_marks`).
        self._marks: list[tuple[uuid.UUID, int, PoolHealth]] = []
        #: The kinds of the actions the transaction under way applied (counted once it commits).
        self._tallied: list[str] = []

    @property
    def marks_waiting(self) -> int:
        """How many passes wait for :meth:`flush_marks`."""
        return len(self._marks)

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
                applied, skipped, health, delivery = await self._apply_retried(
                    connection, planned, fence
                )
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

    async def _apply_retried(
        self, connection: asyncpg.Connection, planned: PlannedPool, fence: Fence
    ) -> tuple[int, int, PoolHealth, Delivery]:
        """Apply the pool's actions in one transaction, run again if contention ended it.

        PostgreSQL rolls back a transaction it ends for a deadlock or a serialization failure
        whole, and the same work run again normally succeeds: it is run again, after a short
        random pause, up to :data:`~deskpool.outages.CONTENTION_ATTEMPTS` times in all, before
        the error goes to the caller (the pool's ``reconcile_error``). What an attempt counted
        or would deliver is kept only from the attempt that committed.

        Returns the actions applied and skipped, the health marked and what to deliver.
        """
        pool = planned.pool
        attempt = 1
        while True:
            delivery = Delivery()
            self._tallied = []
            try:
                async with connection.transaction():
                    await fence(connection)
                    await lock_pool(connection, pool)
                    # Planned before the lock: what another pass applied since counts now.
                    current = await pool_now(connection, pool.id)
                    applied, skipped = await self._apply_actions(
                        connection, planned, current, delivery
                    )
                    done, left = await self._apply_rollout(connection, planned, delivery)
                    applied += done
                    skipped += left
                    done, left = await self._apply_logoffs(connection, planned, delivery)
                    applied += done
                    skipped += left
                    mark = self._mark(planned)
                    await mark_reconciled(connection, *mark)
            except Exception as error:
                if not contended(error) or attempt >= CONTENTION_ATTEMPTS:
                    raise
                attempt += 1
                log.info(
                    "pool %s: applying its plan was ended by the database (%s); "
                    "running it again (attempt %d of %d)",
                    pool.name,
                    type(error).__name__,
                    attempt,
                    CONTENTION_ATTEMPTS,
                )
                await asyncio.sleep(contention_pause(attempt))
                continue
            for kind in self._tallied:
                self._count(kind)
            self._tallied = []
            return applied, skipped, mark[2], delivery

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
        self,
        connection: asyncpg.Connection,
        planned: PlannedPool,
        current: PoolNow | None,
        delivery: Delivery,
    ) -> tuple[int, int]:
        """Apply the plan's actions, each in a savepoint of the caller's fenced transaction.

        Every create is one action. Returns how many were applied, and how many were left to
        the next pass. Each desktop made or changed is a ``desktop.state`` live event of
        ``delivery`` (what the console's desktop tables follow, as its counters follow
        ``pool.reconciled``).
        """
        pool, plan = planned.pool, planned.plan
        applied = skipped = 0
        creates: list[Action] = [a for a in plan.actions if isinstance(a, CreateDesktop)]
        batches = [creates] if creates else []
        batches += [[action] for action in plan.actions if not isinstance(action, CreateDesktop)]
        for batch in batches:
            changed: list[Desktop] = []
            try:
                async with connection.transaction():
                    events = await self._apply(connection, planned, batch, current, changed)
                    # One statement for a create's events: it may hold the growth lock.
                    await record_audit_events(connection, events)
            except (IllegalTransition, DesktopNameTaken, NotFound) as error:
                log.info("pool %s: %s left to the next pass (%s)", pool.name, batch, error)
                events, changed = [], []
            delivery.events.extend(live_desktop_event(desktop) for desktop in changed)
            applied += len(events)
            skipped += len(batch) - len(events)
            self._tallied += [batch[0].kind] * len(events)
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
            self._tallied.append(action.kind)
        return applied, skipped

    def _mark(self, planned: PlannedPool) -> tuple[uuid.UUID, int, PoolHealth]:
        """What marking the pool reconciled records: its id, the generation seen, its health."""
        pool, plan = planned.pool, planned.plan
        generation = plan.generation if planned.observed else pool.reconciled_generation
        health = plan.health
        if self.metrics is not None:
            self.metrics.observe_success(str(pool.id))
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
        except Exception as error:
            log.warning(
                "recording the passes over %d pool(s) failed (%s); they are reconciled again first",
                len(marks),
                error_text(error),
            )

    async def _apply(
        self,
        connection: asyncpg.Connection,
        planned: PlannedPool,
        actions: list[Action],
        current: PoolNow | None,
        changed: list[Desktop],
    ) -> list[AuditEvent]:
        """Apply ``actions`` (all creates, or one other action); return their audit events.

        The desktops made or moved are added to ``changed``.

        ``current`` is the pool as it is under the pool's reconciliation lock: creates beyond
        what it still needs, and orphans that a desktop now owns, are left to the next pass.
        """
        pool = planned.pool
        now = datetime.now(UTC)
        first = actions[0]
        if isinstance(first, CreateDesktop):
            allowed = creates_allowed(planned, current, len(actions))
            if allowed < len(actions):
                log.info(
                    "pool %s: %d of %d desktop creation(s) left to the next pass: another "
                    "reconciliation changed the pool since this one was planned",
                    pool.name,
                    len(actions) - allowed,
                    len(actions),
                )
                actions = actions[:allowed]
                if not actions:
                    return []
            names = [action.name for action in actions if isinstance(action, CreateDesktop)]
            # A license limit stops growth here, never destroys: the rest waits, and says why.
            allowed, held = await cap_desktops(connection, self.runtime.licensing, len(names))
            if held is not None:
                self._held[pool.id] = held
                names, actions = names[:allowed], actions[:allowed]
            # The growth lock is held until the commit, and ``POST /api/v1/pools`` waits for it
            # under the api's statement timeout: the jobs go in one statement, not one each.
            inserted = await insert_desktops(connection, pool, names)
            jobs = await enqueue_desktop_jobs(connection, PROVISION, inserted)
            changed.extend(inserted)
            return [
                action_event(planned, action, desktop, job, now)
                for action, desktop, job in zip(actions, inserted, jobs, strict=True)
            ]
        if isinstance(first, PowerOn):
            desktop = planned.desktops[first.desktop_id]
            job = await enqueue_desktop_job(connection, POWER_ON, desktop)
            return [action_event(planned, first, desktop, job, now)]
        if isinstance(first, (ReportOrphan, DeleteOrphanVm)) and owned_now(
            planned, current, first.vm_id
        ):
            return []
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
        changed.append(after)
        return [action_event(planned, first, after, follow_up, now)]

    def _count(self, kind: str) -> None:
        if self.metrics is not None:
            self.metrics.count_action(kind)
