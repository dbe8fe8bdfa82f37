"""The pure planner of reconciliation: from a pool's recorded and observed state, decide.

:func:`plan_pool` is a pure function. It takes a pool, its desktop records, the VMs the
hypervisor driver listed on the pool's cluster and the time, and returns a plan: the pool's
health and counts and a list of *actions* (:mod:`deskpool.reconciliation.plan`: frozen dataclasses,
each with a human-readable ``reason`` for the audit trail). The reconciliation service
(:mod:`deskpool.reconciliation.reconciler`) applies them (through
:func:`~deskpool.reconciliation.plan.desktop_event` and the transitions of
:mod:`deskpool.desktops.states`,
or through the driver), and the next pass sees the result. :func:`plan_pools` plans a whole
batch of pools in one pass over the input.

The rules, in the order they are applied:

1. *Size.* An enabled pool wants ``max(min_size, busy + spare)`` desktops, never more than
   ``max_size``, where *busy* desktops are those a user holds (assigned, in use or in a
   session). Missing desktops are created with the next free names of the pool's naming
   pattern; a create never takes the pool's records (deleting ones included) beyond
   ``max_size``. Surplus desktops are deleted among the free ones: broken ones first (failed,
   stuck, VM gone), then the newest. A disabled pool is frozen: nothing is created, rebuilt or
   deleted. A draining pool creates nothing and deletes every desktop as it becomes free;
   it still repairs the desktops users hold, until they are unassigned.
2. *Timeouts.* A desktop that stays in a step longer than the step's timeout (plus a grace,
   so that the job enforcing the same timeout wins the race) is failed at that step.
3. *Drift.* A ready or in-use desktop whose VM vanished from the cluster is provisioned anew
   under the same name; if its user owns it (persistent pool) it is marked failed instead, so
   an administrator sees it, and retried like any failure. A VM tagged for the pool that
   belongs to none of its desktops is an orphan: reported once, and deleted only when the
   policy says so. VMs deskpool did not tag are never touched.
4. *Failures.* A failed desktop is retried in place when its backoff has passed: the backoff
   doubles with each consecutive failure, from ``failure_backoff_base`` up to
   ``failure_backoff_max``, so a broken template costs a few clones an hour, not a storm.
   Failed desktops keep their slot, so failures never make the pool create more desktops.
5. *Hygiene.* A free ready desktop that was used since its last refresh is refreshed (from
   the pool's template); a free ready desktop whose VM is stopped is powered on. A desktop
   built from a template the pool no longer uses is left alone: a change of template applies
   to desktops built from then on, and replacing the others is a rollout's work.
6. *Schedules.* A pool with a schedule is planned with the targets
   (:class:`~deskpool.schedules.model.Targets`) of the phase in force (the reconciler asks
   :func:`deskpool.schedules.model.phase_at`): it wants ``max(min_ready, busy + spare)``
   desktops powered on (never more than ``max_size``) and at least ``min_size`` desktops in
   all. Powered-off desktops are powered on first when it wants more, before new ones are
   created. Free desktops beyond what it wants are never deleted (only those beyond
   ``max_size`` are): the phase's ``idle`` policy keeps them running, or powers off the free,
   ready, clean ones (never one a user is logged on to); with ``power_off`` a persistent pool's
   ready desktops whose owner has no session are powered off too, and stay assigned (the
   owner's open powers his own on: start on connect). A pool without a schedule wants
   every desktop powered on: a desktop a former schedule powered off is powered on again.
7. *Rollouts.* When the pool has an active rollout, :func:`deskpool.rollouts.planner.plan_rollout`
   plans its part first (``rollouts`` of :func:`plan_pools`); the desktops it acts on get no
   other action this pass, the pool may grow by the rollout's ``extra`` desktops up to
   ``max_size + surge`` records, and it does not shrink while the rollout is under way.

Each desktop gets at most one action per pass, and the actions of one pass leave nothing for
the next pass to do at the same time (convergence; see the unit tests). When the cluster's VMs
could not be listed (``observed_vms`` is ``None``) only timeouts are acted on: the pass never
mistakes an unreachable cluster for vanished VMs.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from uuid import UUID

from deskpool.pools.model import (
    Desktop,
    DesktopState,
    ObservedVm,
    Pool,
    PoolState,
    PowerState,
)
from deskpool.pools.naming import InvalidNamingPattern, name_key, next_free_names
from deskpool.reconciliation.failures import FailureCode, PlanFailed
from deskpool.reconciliation.plan import (
    Action,
    CreateDesktop,
    DeleteDesktop,
    DeleteOrphanVm,
    MarkVmMissing,
    PoolPlan,
    PowerOn,
    ReconcilePolicy,
    RefreshDesktop,
    ReplaceDesktop,
    ReportOrphan,
    RetryFailed,
    TimeOutStep,
    retry_due_at,
    summarize,
)
from deskpool.reconciliation.planner_rules import (
    Look,
    duration,
    pool_health,
    power_actions,
    powered_target,
    serving_problems,
)
from deskpool.rollouts.plan import RolloutPlan
from deskpool.rollouts.planner import RolloutView, plan_rollout, waiting_for
from deskpool.schedules.model import Targets

S = DesktopState

#: States in which the desktop's job owns every VM tagged with the desktop's id: it may be
#: cloning, rebuilding or destroying one whose id is not recorded yet.
_OWNS_TAGGED_VMS = frozenset({S.PROVISIONING, S.REFRESHING, S.DELETING, S.FAILED})

#: Power states a spare is powered on from.
_POWER_ON_FROM = frozenset({PowerState.STOPPED, PowerState.PAUSED})


# --------------------------------------------------------------------------- planning


def plan_pool(
    pool: Pool,
    desktops: Iterable[Desktop],
    observed_vms: Iterable[ObservedVm] | None,
    now: datetime,
    policy: ReconcilePolicy,
    *,
    taken_names: Iterable[str] = (),
    known_orphans: Collection[str] = frozenset(),
    rollout: RolloutView | None = None,
    targets: Targets | None = None,
) -> PoolPlan:
    """What to do to converge ``pool``, with its health and counts (rules: module docstring).

    :param desktops: the pool's desktop records (records of other pools are ignored).
    :param observed_vms: the VMs listed on the pool's cluster, or ``None`` when they could not
        be listed. VMs of other pools and untagged VMs may be included; their names count as
        taken.
    :param now: the time of the pass (timezone-aware, like the desktops' times).
    :param taken_names: further names present on the cluster (other pools' desktop records),
        never given to a new desktop.
    :param known_orphans: ids of orphan VMs already reported, so they are not reported again.
    :param rollout: the pool's active rollout, if it has one.
    :param targets: the targets of the phase in force of the pool's schedule, if it has one.
    """
    mine = [desktop for desktop in desktops if desktop.pool_id == pool.id]
    vms = None if observed_vms is None else list(observed_vms)
    taken = {name_key(desktop.name) for desktop in mine}
    taken.update(name_key(vm.name) for vm in vms or ())
    taken.update(name_key(name) for name in taken_names)
    return _plan(pool, mine, vms, now, policy, taken, known_orphans, rollout, targets)


def plan_pools(
    pools: Iterable[Pool],
    desktops: Iterable[Desktop],
    observed_vms: Mapping[UUID, Iterable[ObservedVm]],
    now: datetime,
    policy: ReconcilePolicy,
    *,
    taken_names: Mapping[UUID, Iterable[str]] | None = None,
    known_orphans: Collection[str] = frozenset(),
    rollouts: Mapping[UUID, RolloutView] | None = None,
    targets: Mapping[UUID, Targets] | None = None,
    failures: dict[UUID, Exception] | None = None,
) -> list[PoolPlan]:
    """Plan a batch of pools in time linear in the number of pools, desktops and VMs.

    :param desktops: the desktops of the pools, in any order (others are ignored).
    :param observed_vms: cluster id -> the VMs listed on it; a cluster that is missing could
        not be listed, and its pools are planned as with ``observed_vms=None``.
    :param taken_names: cluster id -> further names present on it (desktop records of pools
        outside the batch). Names given to new desktops of one pool are taken for the next.
    :param known_orphans: ids of orphan VMs already reported.
    :param rollouts: pool id -> the pool's active rollout (pools without one are missing).
    :param targets: pool id -> the targets of its schedule's phase in force (pools without a
        schedule are missing).
    :param failures: each pool's error boundary: a pool whose planning raises is left out of
        the plans and its error put here (a :class:`PlanFailed` naming the part that failed,
        or the error itself), and the other pools are planned as if it did not exist. Without
        it, the error propagates.
    :returns: one plan per pool (but those that failed), in the order of ``pools``.
    """
    batch = list(pools)
    pool_by_id = {pool.id: pool for pool in batch}
    desktops_of: dict[UUID, list[Desktop]] = {pool.id: [] for pool in batch}
    pool_of_desktop: dict[UUID, Pool] = {}
    owner_of_vm: dict[UUID, dict[str, UUID]] = {}
    taken: dict[UUID, set[str]] = {}
    for pool in batch:
        taken.setdefault(pool.cluster_id, set())
        owner_of_vm.setdefault(pool.cluster_id, {})
    for desktop in desktops:
        owner = pool_by_id.get(desktop.pool_id)
        if owner is None:
            continue
        desktops_of[owner.id].append(desktop)
        pool_of_desktop[desktop.id] = owner
        taken[owner.cluster_id].add(name_key(desktop.name))
        if desktop.vm_id is not None:
            owner_of_vm[owner.cluster_id][desktop.vm_id] = owner.id
    for cluster_id, extra in (taken_names or {}).items():
        if cluster_id in taken:
            taken[cluster_id].update(name_key(name) for name in extra)

    vms_of: dict[UUID, list[ObservedVm]] = {}
    for cluster_id, vms in observed_vms.items():
        if cluster_id not in taken:
            continue
        present = taken[cluster_id]
        owners = owner_of_vm[cluster_id]
        for vm in vms:
            present.add(name_key(vm.name))
            pool_id = owners.get(vm.vm_id)
            if pool_id is None and vm.desktop_id is not None:
                tagged = pool_of_desktop.get(vm.desktop_id)
                if tagged is not None and tagged.cluster_id == cluster_id:
                    pool_id = tagged.id
            if pool_id is None and vm.pool_id is not None:
                tagged = pool_by_id.get(vm.pool_id)
                if tagged is not None and tagged.cluster_id == cluster_id:
                    pool_id = tagged.id
            if pool_id is not None:
                vms_of.setdefault(pool_id, []).append(vm)

    plans: list[PoolPlan] = []
    for pool in batch:
        try:
            plans.append(
                _plan(
                    pool,
                    desktops_of[pool.id],
                    vms_of.get(pool.id, []) if pool.cluster_id in observed_vms else None,
                    now,
                    policy,
                    taken[pool.cluster_id],
                    known_orphans,
                    (rollouts or {}).get(pool.id),
                    (targets or {}).get(pool.id),
                )
            )
        except Exception as error:
            if failures is None:
                raise
            failures[pool.id] = error
    return plans


def find_unowned_vms(
    observed_vms: Iterable[ObservedVm],
    *,
    pool_ids: Collection[UUID],
    desktop_ids: Collection[UUID],
) -> list[ObservedVm]:
    """Return the tagged VMs of a cluster whose tags name no known pool and no known desktop.

    Pool reconciliation reports the orphans tagged for a pool it knows; this finds the rest
    (VMs of a deleted pool) for a cluster-wide pass, given every pool and desktop id.
    """
    return [
        vm
        for vm in observed_vms
        if vm.is_tagged
        and (vm.pool_id is None or vm.pool_id not in pool_ids)
        and (vm.desktop_id is None or vm.desktop_id not in desktop_ids)
    ]


def _plan(
    pool: Pool,
    mine: Sequence[Desktop],
    vms: Sequence[ObservedVm] | None,
    now: datetime,
    policy: ReconcilePolicy,
    taken: set[str],
    known_orphans: Collection[str],
    rollout: RolloutView | None = None,
    targets: Targets | None = None,
) -> PoolPlan:
    """Plan one pool; ``taken`` holds the name keys present on the cluster and is extended."""
    observed = vms is not None
    by_id = {desktop.id: desktop for desktop in mine}
    owner_of_vm = {desktop.vm_id: desktop for desktop in mine if desktop.vm_id is not None}
    vm_by_id: dict[str, ObservedVm] = {}
    orphans: list[ObservedVm] = []
    for vm in vms or ():
        if vm.vm_id in owner_of_vm:
            vm_by_id[vm.vm_id] = vm
            continue
        tagged = by_id.get(vm.desktop_id) if vm.desktop_id is not None else None
        if tagged is not None and (tagged.vm_id is None or tagged.state in _OWNS_TAGGED_VMS):
            continue
        if tagged is not None or vm.pool_id == pool.id:
            orphans.append(vm)

    # Look at every desktop once: is it stuck, has its VM vanished, who will hold it after
    # this pass, and may it be deleted to shrink the pool?
    looks: list[Look] = []
    live = busy = 0
    removable: list[Look] = []
    for desktop in mine:
        timeout = policy.step_timeout(desktop.state)
        stuck = (
            timeout
            if timeout is not None
            and now - desktop.state_changed_at > timeout + policy.timeout_grace
            else None
        )
        vanished = (
            observed
            and desktop.state in (S.READY, S.IN_USE)
            and desktop.vm_id is not None
            and desktop.vm_id not in vm_by_id
        )
        is_live = not (
            desktop.state is S.DELETING
            or (desktop.state is S.FAILED and desktop.failed_step is S.DELETING)
        )
        owned = pool.is_persistent and desktop.assigned_user is not None
        # A stuck or vanished desktop loses its session; only an owner keeps holding it.
        holds = owned if (stuck or vanished) else desktop.is_busy
        look = Look(desktop, is_live, holds, stuck, vanished)
        looks.append(look)
        if not is_live:
            continue
        live += 1
        if holds:
            busy += 1
        elif stuck or vanished or desktop.state in (S.READY, S.FAILED, S.POWERED_OFF):
            removable.append(look)

    actions: list[Action] = []
    handled: set[UUID] = set()
    deleted: set[UUID] = set()
    powered_wanted = powered_target(pool, targets, busy)
    target = min(pool.max_size, max(pool.min_size, powered_wanted))
    record_cap = pool.max_size
    acting = observed and pool.state is not PoolState.DISABLED

    # 6. The rollout's part, first: the desktops it acts on are left alone below.
    rollout_plan: RolloutPlan | None = None
    if rollout is not None and acting and pool.state is PoolState.ENABLED:
        try:
            rollout_plan = plan_rollout(pool, mine, rollout, now, floor=target)
        except Exception as error:
            raise PlanFailed(FailureCode.ROLLOUT_UNUSABLE, error) from error
        handled.update(rollout_plan.touched)
        record_cap = max(pool.max_size, rollout_plan.record_cap)
        target = min(record_cap, max(pool.min_size, busy + pool.spare) + rollout_plan.extra)
        target = max(target, min(pool.max_size, max(pool.min_size, busy + pool.spare)))

    # 1. Shrink: surplus desktops of an enabled pool, every free desktop of a draining one.
    if acting and not (rollout_plan is not None and rollout_plan.hold_size):
        if pool.state is PoolState.DRAINING:
            doomed = _removal_order(removable)
            why = f"pool {pool.name} is draining and the desktop is free"
        elif rollout_plan is not None and rollout_plan.shrink_to is not None:
            # The rollout is done but for its surge: the pool returns to its size first.
            keep = rollout_plan.shrink_to
            doomed = _removal_order(removable)[: max(0, live - keep)]
            why = f"the rollout ends with pool {pool.name} at {keep} desktops; it has {live}"
        else:
            # Under a schedule, desktops beyond the phase's targets are kept or powered off.
            keep = target if targets is None else max(target, min(live, pool.max_size))
            doomed = _removal_order(removable)[: max(0, live - keep)]
            why = f"pool {pool.name} has {live} desktops and needs {target}"
        for look in doomed:
            desktop = look.desktop
            actions.append(DeleteDesktop(desktop.id, f"{desktop.name}: {why}{_state_note(look)}"))
            handled.add(desktop.id)
            deleted.add(desktop.id)

    # 6. Power, before hygiene (a free desktop powered off is not powered on): wake the
    # powered-off desktops the pool wants, power off the idle ones it does not.
    if acting:
        powering = power_actions(
            pool,
            looks,
            handled,
            deleted,
            powered_wanted,
            targets if pool.state is PoolState.ENABLED else None,
            hold=rollout_plan is not None,
            busy=busy,
        )
        actions.extend(powering)
        handled.update(action.desktop_id for action in powering)

    # 2-5. Timeouts, drift, failures and hygiene, one action per desktop at most.
    for look in looks:
        desktop = look.desktop
        if desktop.id in handled:
            continue
        action = _repair(pool, look, vm_by_id, now, policy, acting)
        if action is not None:
            actions.append(action)

    # 1. Grow, never beyond max_size records (desktops being deleted still hold a VM).
    naming_problem = None
    if acting and pool.state is PoolState.ENABLED:
        count = min(target - live, record_cap - len(mine))
        if count > 0:
            try:
                names = next_free_names(pool.naming_pattern, count, taken)
            except InvalidNamingPattern as exc:
                naming_problem = f"no desktop can be created: {exc.detail}"
                names = []
            why = _size_note(pool, live, target, busy)
            for name in names:
                taken.add(name_key(name))
                actions.append(CreateDesktop(name, f"{name}: {why}"))

    # 3. Orphans.
    for vm in orphans:
        where = f"VM {vm.vm_id} ({vm.name}) is tagged for pool {pool.name}"
        if policy.delete_orphans and acting:
            actions.append(
                DeleteOrphanVm(vm.vm_id, vm.name, f"{where} but belongs to none of its desktops")
            )
        elif vm.vm_id not in known_orphans:
            actions.append(
                ReportOrphan(
                    vm.vm_id, vm.name, f"{where} but belongs to none of its desktops; left as is"
                )
            )

    creating = any(isinstance(action, CreateDesktop) for action in actions)
    serving = serving_problems(pool, looks, vm_by_id, live, creating, targets) if observed else []
    if serving and rollout is not None:
        # Why users get no desktop includes what the pool's rollout waits for (issue 37).
        waits = waiting_for(pool, mine, rollout)
        if waits is not None:
            serving.append(
                f"the rollout to template {rollout.rollout.to_template} waits for {waits}"
            )
    health = pool_health(pool, looks, orphans, observed, live, naming_problem, serving)
    return PoolPlan(pool.id, pool.generation, tuple(actions), health, summarize(mine), rollout_plan)


def _removal_order(removable: list[Look]) -> list[Look]:
    """Broken desktops first (failed, stuck, VM gone), then the newest."""
    newest = sorted(
        removable, key=lambda look: (look.desktop.created_at, look.desktop.name), reverse=True
    )
    return sorted(
        newest,
        key=lambda look: 0 if look.stuck or look.vanished or look.desktop.state is S.FAILED else 1,
    )


def _state_note(look: Look) -> str:
    desktop = look.desktop
    if look.vanished:
        return f"; its VM {desktop.vm_id} vanished from the cluster"
    if look.stuck:
        return f"; it is stuck in {desktop.state}"
    if desktop.state is S.FAILED:
        return f"; it failed at {desktop.failed_step}: {desktop.last_error}"
    return ""


def _size_note(pool: Pool, live: int, target: int, busy: int) -> str:
    if target == pool.max_size and busy + pool.spare > pool.max_size:
        wanted = f"{busy} busy + {pool.spare} spare, capped at max_size {pool.max_size}"
    elif pool.min_size >= busy + pool.spare:
        wanted = f"min_size {pool.min_size}"
    else:
        wanted = f"{busy} busy + {pool.spare} spare"
    return f"pool {pool.name} has {live} desktops and needs {target} ({wanted})"


def _repair(
    pool: Pool,
    look: Look,
    vm_by_id: Mapping[str, ObservedVm],
    now: datetime,
    policy: ReconcilePolicy,
    acting: bool,
) -> Action | None:
    """Return the timeout, drift, failure or hygiene action for one desktop, if any."""
    desktop = look.desktop
    if look.stuck is not None:
        spent = duration(now - desktop.state_changed_at)
        limit = duration(look.stuck)
        return TimeOutStep(
            desktop.id,
            desktop.state,
            f"timed out after {limit}",
            f"{desktop.name} has been in {desktop.state} for {spent}, over its {limit} timeout",
        )
    if look.vanished and desktop.vm_id is not None:
        lost = f"VM {desktop.vm_id} of {desktop.name} vanished from the cluster"
        if look.busy or not acting or pool.state is not PoolState.ENABLED:
            owner = f" while assigned to {desktop.assigned_user}" if look.busy else ""
            return MarkVmMissing(
                desktop.id, desktop.vm_id, "VM missing from the cluster", f"{lost}{owner}"
            )
        return ReplaceDesktop(desktop.id, f"{lost}; provisioning a new one")
    if not acting:
        return None
    if desktop.state is S.FAILED:
        due = retry_due_at(desktop, policy)
        # A draining pool still repairs what users hold, and finishes failed deletions.
        may_retry = pool.state is PoolState.ENABLED or look.busy or not look.live
        if may_retry and due is not None and due <= now:
            again = "deletion" if not look.live else "provisioning"
            return RetryFailed(
                desktop.id,
                f"{desktop.name} failed at {desktop.failed_step}: {desktop.last_error}; "
                f"retrying {again} (failure {desktop.failure_count}, waited "
                f"{duration(policy.backoff(desktop.failure_count))})",
            )
        return None
    vm = vm_by_id.get(desktop.vm_id) if desktop.vm_id is not None else None
    if vm is not None and _left_in_the_dark(pool, desktop, vm):
        return PowerOn(
            desktop.id,
            vm.vm_id,
            f"{desktop.name} is ready for {desktop.assigned_user}, who has no session, but its "
            f"VM is {vm.power_state}: his desktop is started again",
        )
    if pool.state is not PoolState.ENABLED or desktop.state is not S.READY or desktop.is_busy:
        return None
    if desktop.used_since_refresh:
        return RefreshDesktop(
            desktop.id, f"{desktop.name} was used since its last refresh and is free"
        )
    if vm is not None and vm.power_state in _POWER_ON_FROM:
        return PowerOn(
            desktop.id,
            vm.vm_id,
            f"{desktop.name} is a free ready desktop but its VM is {vm.power_state}",
        )
    return None


def _left_in_the_dark(pool: Pool, desktop: Desktop, vm: ObservedVm) -> bool:
    """A persistent desktop its owner left, ready, whose VM is off (issue 37).

    An administrator powered it off while he was on it: his session ended with the VM and his
    log-off left it his and ``ready``. Unless a schedule's ``idle: power_off`` lets it rest
    powered off (:func:`~deskpool.reconciliation.planner_rules.power_actions`, which comes
    first), its VM is started again, as the pool starts a free one: his open finds it running.
    """
    return (
        pool.is_persistent
        and desktop.state is S.READY
        and desktop.assigned_user is not None
        and not desktop.in_session
        and vm.power_state in _POWER_ON_FROM
    )
