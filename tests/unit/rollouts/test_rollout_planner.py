"""The pure rollout planner: rule by rule, then its invariants over random pool states."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.pool_builders import (
    NOW,
    build_pool,
    build_vm,
    desktop_builder,
)

from deskpool.desktops.states import Refresh, can_take, transition
from deskpool.pools.model import Desktop, DesktopState, Pool, PoolKind
from deskpool.reconciliation.plan import (
    CreateDesktop,
    DeleteDesktop,
    ReconcilePolicy,
    RefreshDesktop,
)
from deskpool.reconciliation.planner import plan_pool
from deskpool.rollouts.model import (
    EntryRole,
    EntryState,
    InUsePolicy,
    Rollout,
    RolloutDesktop,
    RolloutState,
)
from deskpool.rollouts.plan import (
    ChangeRollout,
    ForceLogoff,
    ReplaceForRollout,
    RolloutPlan,
    SettleEntry,
    WaitForLogoff,
    WarnUser,
)
from deskpool.rollouts.planner import RolloutView, count_rollout, plan_rollout, waiting_for
from deskpool.schedules.model import IdlePolicy, Targets

S = DesktopState
OLD, NEW = "tpl-v1", "tpl-v2"
REPLACING, WAITS = EntryState.REPLACING, EntryState.WAITING_FOR_LOGOFF
POLICY = ReconcilePolicy()


def rollout_of(pool: Pool, **overrides: object) -> Rollout:
    fields: dict[str, object] = {
        "id": UUID(int=7),
        "pool_id": pool.id,
        "from_template": OLD,
        "to_template": NEW,
        "canary": 1,
        "batch_size": 1,
        "min_ready": pool.spare,
        "surge": 0,
        "in_use": InUsePolicy.WAIT_FOR_LOGOFF,
        "warning_seconds": 5,
        "message": "New image",
        "start_at": NOW - timedelta(minutes=1),
        "stop_on_error": True,
        "recreate_assigned": False,
        "state": RolloutState.CANARY,
        "created_by": "user:ada",
        "created_at": NOW - timedelta(minutes=1),
    }
    fields.update(overrides)
    return Rollout(**fields)


def entry(
    desktop: Desktop, state: EntryState, role: EntryRole = EntryRole.CANARY, **kw: object
) -> RolloutDesktop:
    return RolloutDesktop(
        rollout_id=UUID(int=7),
        desktop_id=desktop.id,
        desktop_name=desktop.name,
        role=role,
        state=state,
        updated_at=NOW,
        **kw,
    )


def pool_of(**overrides: object) -> Pool:
    fields: dict[str, object] = {"template": OLD, "min_size": 6, "max_size": 6, "spare": 2}
    fields.update(overrides)
    return build_pool(**fields)


def six(pool: Pool, in_use: int = 2) -> list[Desktop]:
    make = desktop_builder()
    desktops = [make(pool) for _ in range(6)]
    for index in range(in_use):
        desktops[index] = replace(
            desktops[index], state=S.IN_USE, assigned_user=f"user-{index}", in_session=True
        )
    return desktops


def view(rollout: Rollout, *entries: RolloutDesktop) -> RolloutView:
    return RolloutView(rollout, {e.desktop_id: e for e in entries})


def kinds(plan: RolloutPlan) -> list[tuple[str, str]]:
    out = []
    for action in plan.actions:
        name = getattr(action, "desktop_name", None) or str(getattr(action, "state", ""))
        out.append((action.kind, name))
    return out


# --------------------------------------------------------------------------- rules


def test_a_scheduled_rollout_starts_at_its_time() -> None:
    pool = pool_of()
    desktops = six(pool)
    later = rollout_of(pool, state=RolloutState.SCHEDULED, start_at=NOW + timedelta(hours=1))
    assert plan_rollout(pool, desktops, view(later), NOW).actions == ()
    due = replace(later, start_at=NOW)
    [change] = plan_rollout(pool, desktops, view(due), NOW).actions
    assert isinstance(change, ChangeRollout)
    assert (change.state, change.serving_template) == (RolloutState.CANARY, OLD)
    no_canary = replace(due, canary=0)
    [change] = plan_rollout(pool, desktops, view(no_canary), NOW).actions
    assert isinstance(change, ChangeRollout)
    assert (change.state, change.serving_template) == (RolloutState.ROLLING, NEW)


def test_the_canary_is_a_free_desktop_and_nothing_else_is_touched_until_it_is_ready() -> None:
    pool = pool_of()
    desktops = six(pool)
    plan = plan_rollout(pool, desktops, view(rollout_of(pool)), NOW)
    assert kinds(plan) == [("rollout_replace", "lab-003")]
    canary = replace(desktops[2], state=S.REFRESHING)
    desktops[2] = canary
    rollout = rollout_of(pool)
    plan = plan_rollout(pool, desktops, view(rollout, entry(canary, EntryState.REPLACING)), NOW)
    assert plan.actions == ()
    desktops[2] = replace(canary, state=S.READY, template=NEW)
    plan = plan_rollout(pool, desktops, view(rollout, entry(canary, EntryState.REPLACING)), NOW)
    settle, change = plan.actions
    assert isinstance(settle, SettleEntry)
    assert settle.state is EntryState.REPLACED
    assert isinstance(change, ChangeRollout)
    assert (change.state, change.serving_template) == (RolloutState.ROLLING, NEW)


def test_a_failed_canary_stops_the_rollout_and_the_old_template_is_served() -> None:
    pool = pool_of()
    desktops = six(pool)
    canary = replace(
        desktops[2], state=S.FAILED, failed_step=S.PROVISIONING, last_error="clone failed"
    )
    desktops[2] = canary
    plan = plan_rollout(
        pool, desktops, view(rollout_of(pool), entry(canary, EntryState.REPLACING)), NOW
    )
    settle, change = plan.actions
    assert isinstance(settle, SettleEntry)
    assert settle.state is EntryState.FAILED
    assert isinstance(change, ChangeRollout)
    assert change.state is RolloutState.FAILED
    assert change.serving_template == OLD
    assert "lab-003 failed on template tpl-v2: clone failed" in change.reason


def test_rolling_replaces_free_desktops_first_within_min_ready_then_waits_for_users() -> None:
    pool = pool_of(template=NEW)
    desktops = six(pool)
    desktops = [replace(d, template=OLD) for d in desktops]
    rollout = rollout_of(pool, state=RolloutState.ROLLING, batch_size=5)
    plan = plan_rollout(pool, desktops, view(rollout), NOW)
    # Four free desktops, min_ready 2: two are rebuilt, the other two hold min_ready.
    assert kinds(plan) == [("rollout_replace", "lab-003"), ("rollout_replace", "lab-004")]
    # Once every free desktop is on the new template, users in use are waited for.
    done = [replace(d, template=NEW) if not d.assigned_user else d for d in desktops]
    plan = plan_rollout(pool, done, view(rollout), NOW)
    assert kinds(plan) == [("rollout_wait", "lab-001"), ("rollout_wait", "lab-002")]
    assert all(isinstance(a, WaitForLogoff) for a in plan.actions)


def test_force_logoff_warns_then_logs_off_after_the_warning() -> None:
    pool = pool_of(template=NEW)
    desktops = [
        replace(d, template=NEW) if not d.assigned_user else replace(d, template=OLD)
        for d in six(pool)
    ]
    rollout = rollout_of(pool, state=RolloutState.ROLLING, in_use=InUsePolicy.FORCE_LOGOFF)
    plan = plan_rollout(pool, desktops, view(rollout), NOW)
    warnings = [a for a in plan.actions if isinstance(a, WarnUser)]
    assert [(w.desktop_name, w.user, w.ends_at) for w in warnings] == [
        ("lab-001", "user-0", NOW + timedelta(seconds=5)),
        ("lab-002", "user-1", NOW + timedelta(seconds=5)),
    ]
    warned = [
        entry(
            desktops[0],
            EntryState.WARNED,
            EntryRole.BATCH,
            warned_at=NOW,
            logoff_at=NOW + timedelta(seconds=5),
        )
    ]
    early = plan_rollout(pool, desktops, view(rollout, *warned), NOW + timedelta(seconds=4))
    assert not any(isinstance(a, ForceLogoff) for a in early.actions)
    late = plan_rollout(pool, desktops, view(rollout, *warned), NOW + timedelta(seconds=5))
    assert [a.desktop_name for a in late.actions if isinstance(a, ForceLogoff)] == ["lab-001"]


def test_a_rolling_rollout_succeeds_when_every_desktop_runs_the_new_template() -> None:
    pool = pool_of(template=NEW)
    desktops = [replace(d, template=NEW) for d in six(pool)]
    rollout = rollout_of(pool, state=RolloutState.ROLLING)
    [change] = plan_rollout(pool, desktops, view(rollout), NOW).actions
    assert isinstance(change, ChangeRollout)
    assert change.state is RolloutState.SUCCEEDED
    assert change.reason == "6 of 6 desktops run template tpl-v2"


def test_persistent_pools_keep_assigned_desktops_unless_recreate_assigned() -> None:
    pool = pool_of(template=NEW, kind=PoolKind.PERSISTENT, spare=0)
    desktops = [replace(d, template=OLD, in_session=False, state=S.READY) for d in six(pool)]
    rollout = rollout_of(pool, state=RolloutState.ROLLING, batch_size=6, min_ready=0)
    plan = plan_rollout(pool, desktops, view(rollout), NOW)
    assert [a.desktop_name for a in plan.actions if isinstance(a, ReplaceForRollout)] == [
        "lab-003",
        "lab-004",
        "lab-005",
        "lab-006",
    ]
    recreate = replace(rollout, recreate_assigned=True)
    plan = plan_rollout(pool, desktops, view(recreate), NOW)
    assert len([a for a in plan.actions if isinstance(a, ReplaceForRollout)]) == 6


def test_the_pool_plan_folds_the_rollout_in_and_does_not_refresh_on_a_template_change() -> None:
    pool = pool_of(template=NEW)
    desktops = [replace(d, template=OLD) for d in six(pool, in_use=0)]
    # Without a rollout, a changed template leaves built desktops alone.
    plain = plan_pool(pool, desktops, [build_vm(d) for d in desktops], NOW, POLICY)
    assert not any(isinstance(a, RefreshDesktop) for a in plain.actions)
    rollout = rollout_of(pool, state=RolloutState.ROLLING, batch_size=2, surge=1)
    plan = plan_pool(
        pool, desktops, [build_vm(d) for d in desktops], NOW, POLICY, rollout=view(rollout)
    )
    assert plan.rollout is not None
    assert len([a for a in plan.rollout.actions if isinstance(a, ReplaceForRollout)]) == 2
    # Up to max_size + surge records, to keep min_ready while two are rebuilt; no shrinking.
    assert len([a for a in plan.actions if isinstance(a, CreateDesktop)]) == 1
    assert not any(isinstance(a, DeleteDesktop) for a in plan.actions)


# --------------------------------------------------------------------------- properties


@st.composite
def pool_states(
    draw: st.DrawFn,
) -> tuple[Pool, list[Desktop], Rollout, dict[UUID, RolloutDesktop], datetime]:
    """A random pool mid-rollout: desktops in any state, on either template, some entries."""
    persistent = draw(st.booleans())
    max_size = draw(st.integers(1, 10))
    spare = draw(st.integers(0, max_size))
    count = draw(st.integers(0, max_size))
    rolling = draw(st.booleans())
    pool = build_pool(
        template=NEW if rolling else OLD,
        kind=PoolKind.PERSISTENT if persistent else PoolKind.NON_PERSISTENT,
        min_size=draw(st.integers(0, max_size)),
        max_size=max_size,
        spare=spare,
    )
    make = desktop_builder()
    desktops: list[Desktop] = []
    entries: dict[UUID, RolloutDesktop] = {}
    rollout = rollout_of(
        pool,
        state=RolloutState.ROLLING if rolling else RolloutState.CANARY,
        canary=draw(st.integers(1, 3)),
        batch_size=draw(st.integers(1, 4)),
        min_ready=draw(st.integers(0, max_size)),
        surge=draw(st.integers(0, 3)),
        in_use=draw(st.sampled_from(list(InUsePolicy))),
        recreate_assigned=persistent and draw(st.booleans()),
        stop_on_error=draw(st.booleans()),
    )
    for _ in range(count):
        state = draw(
            st.sampled_from([S.READY, S.READY, S.IN_USE, S.REFRESHING, S.FAILED, S.PROVISIONING])
        )
        user = "u" if state is S.IN_USE or (persistent and draw(st.booleans())) else None
        desktop = make(
            pool,
            state=state,
            template=draw(st.sampled_from([OLD, NEW])),
            assigned_user=user,
            in_session=state is S.IN_USE and draw(st.booleans()),
            used_since_refresh=state is S.READY and user is None and draw(st.booleans()),
        )
        desktops.append(desktop)
        if draw(st.integers(0, 3)) == 0:
            warned = draw(st.booleans())
            entries[desktop.id] = entry(
                desktop,
                draw(st.sampled_from(list(EntryState))),
                draw(st.sampled_from(list(EntryRole))),
                warned_at=NOW - timedelta(seconds=10) if warned else None,
                logoff_at=NOW + timedelta(seconds=draw(st.integers(-10, 10))) if warned else None,
            )
    return pool, desktops, rollout, entries, NOW


@settings(max_examples=400, deadline=None)
@given(pool_states())
def test_invariants_hold_over_random_pool_states(
    state: tuple[Pool, list[Desktop], Rollout, dict[UUID, RolloutDesktop], datetime],
) -> None:
    pool, desktops, rollout, entries, now = state
    by_id = {d.id: d for d in desktops}
    plan = plan_pool(
        pool,
        desktops,
        [build_vm(d) for d in desktops if d.vm_id is not None],
        now,
        POLICY,
        rollout=RolloutView(rollout, entries),
    )
    part = plan.rollout
    assert part is not None
    actions = part.actions
    replaced = [by_id[a.desktop_id] for a in actions if isinstance(a, ReplaceForRollout)]
    # Desktops being rebuilt once this pass's bookkeeping is done (a rebuild that finished
    # frees its slot).
    settled = {a.desktop_id: a.state for a in actions if isinstance(a, SettleEntry)}
    in_flight = sum(
        settled.get(e.desktop_id, e.state) is EntryState.REPLACING for e in entries.values()
    )

    # Never more records than max_size + surge (when there were not already more).
    creates = sum(isinstance(a, CreateDesktop) for a in plan.actions)
    assert len(desktops) + creates <= max(len(desktops), pool.max_size + rollout.surge)

    # Never a desktop in use replaced; never one whose user keeps it (persistent) unless asked.
    for desktop in replaced:
        assert desktop.state is S.READY
        assert not desktop.in_session
        if pool.is_persistent and desktop.assigned_user is not None:
            assert rollout.recreate_assigned

    # Never a user logged off before the warning ran out, and only with force_logoff.
    for action in actions:
        if isinstance(action, ForceLogoff):
            assert rollout.in_use is InUsePolicy.FORCE_LOGOFF
            warned = entries[action.desktop_id]
            assert warned.state is EntryState.WARNED
            assert warned.logoff_at is not None
            assert warned.logoff_at <= now

    # Never fewer clean free ready desktops than min_ready, unless nothing else could be done:
    # no room to create one, nothing being rebuilt, and only one taken.
    available = sum(d.is_available for d in desktops)
    taken = sum(d.is_available for d in replaced)
    if available - taken < min(rollout.min_ready, available):
        assert taken == 1
        assert in_flight == 0
        assert len(desktops) >= pool.max_size + rollout.surge

    # The canary: nothing but canaries is touched before the rollout is rolling.
    if rollout.state is RolloutState.CANARY:
        canaries = sum(e.role is EntryRole.CANARY for e in entries.values())
        assert len(replaced) <= max(0, rollout.canary - canaries)

    # At most batch_size desktops rebuilt at once by a rolling rollout.
    if rollout.state is RolloutState.ROLLING:
        assert len(replaced) <= max(0, rollout.batch_size - in_flight)

    # Each desktop gets one action at most.
    acted = [getattr(a, "desktop_id", None) for a in plan.actions]
    acted = [d for d in acted if d is not None]
    assert not set(acted) & part.touched


def test_replacements_are_free_desktops_of_the_pool() -> None:
    pool = pool_of()
    desktops: Sequence[Desktop] = six(pool, in_use=6)
    plan = plan_rollout(pool, desktops, view(rollout_of(pool)), NOW)
    # Every desktop in use: the canary is one of them, waited for.
    assert kinds(plan) == [("rollout_wait", "lab-001")]


def test_a_persistent_desktop_whose_user_left_is_rebuilt_when_recreate_assigned() -> None:
    pool = pool_of(template=NEW, kind=PoolKind.PERSISTENT, spare=0)
    [desktop] = [
        replace(d, template=OLD, state=S.READY, in_session=False, assigned_user="ada")
        for d in six(pool, in_use=0)[:1]
    ]
    rollout = rollout_of(pool, state=RolloutState.ROLLING, recreate_assigned=True, min_ready=0)
    waiting = entry(desktop, EntryState.WAITING_FOR_LOGOFF, EntryRole.BATCH)
    plan = plan_rollout(pool, [desktop], view(rollout, waiting), NOW)
    assert kinds(plan) == [("rollout_replace", "lab-001")]


def test_an_ended_rollout_is_counted_on_what_it_did_not_on_the_pool_now() -> None:
    pool = pool_of(template=NEW)
    desktops = [replace(d, template=OLD) for d in six(pool, in_use=0)]  # rolled back since
    done = [entry(d, EntryState.REPLACED, EntryRole.BATCH) for d in desktops[:5]]
    done.append(entry(desktops[5], EntryState.FAILED, EntryRole.BATCH))
    rollout = rollout_of(pool, state=RolloutState.SUCCEEDED)
    counts = count_rollout(pool, desktops, view(rollout, *done))
    assert (counts.total, counts.on_new_template, counts.failed, counts.percent) == (6, 5, 1, 83)
    active = count_rollout(pool, desktops, view(replace(rollout, state=RolloutState.ROLLING)))
    assert (active.total, active.on_new_template) == (6, 0)


# --------------------------------------------------------------------------- off-peak (issue 37)


def powered_off(pool: Pool, count: int) -> list[Desktop]:
    """``count`` desktops a schedule powered off (free, clean, on the old template)."""
    make = desktop_builder()
    return [replace(make(pool), state=S.POWERED_OFF) for _ in range(count)]


def test_desktops_a_schedule_powered_off_are_replaced() -> None:
    pool = pool_of(min_size=2, max_size=2, spare=0)
    desktops = powered_off(pool, 2)
    plan = plan_rollout(pool, desktops, view(rollout_of(pool)), NOW)
    assert kinds(plan) == [("rollout_replace", "lab-001")]
    rolling = rollout_of(pool, state=RolloutState.ROLLING, batch_size=2)
    plan = plan_rollout(pool, desktops, view(rolling), NOW)
    assert kinds(plan) == [("rollout_replace", "lab-001"), ("rollout_replace", "lab-002")]


def test_a_powered_off_desktop_can_be_rebuilt() -> None:
    pool = pool_of(min_size=1, max_size=1, spare=0)
    [desktop] = powered_off(pool, 1)
    assert can_take(desktop, Refresh())
    after = transition(desktop, Refresh(), pool=pool, now=NOW)
    assert after.state is S.REFRESHING


def test_a_rollout_always_says_what_it_waits_for() -> None:
    pool = pool_of(min_size=2, max_size=2, spare=0)
    [first, second] = powered_off(pool, 2)
    rollout = rollout_of(pool, state=RolloutState.ROLLING, batch_size=1)
    rebuilding = replace(first, state=S.REFRESHING)
    waits = waiting_for(pool, [rebuilding, second], view(rollout, entry(rebuilding, REPLACING)))
    assert waits == "lab-001 to be rebuilt on tpl-v2; then 1 more desktop"
    user = replace(second, state=S.IN_USE, assigned_user="ada")
    waits = waiting_for(
        pool, [rebuilding, user], view(rollout, entry(rebuilding, REPLACING), entry(user, WAITS))
    )
    assert waits == "lab-001 to be rebuilt on tpl-v2; the user of lab-002 to log off"
    later = rollout_of(pool, state=RolloutState.SCHEDULED, start_at=NOW + timedelta(hours=1))
    assert waiting_for(pool, [first, second], view(later)) == (
        f"its start at {(NOW + timedelta(hours=1)).isoformat(timespec='seconds')}"
    )
    paused = rollout_of(pool, state=RolloutState.PAUSED, paused_from=RolloutState.ROLLING)
    assert waiting_for(pool, [first, second], view(paused)) == "an administrator to resume it"
    done = rollout_of(pool, state=RolloutState.SUCCEEDED)
    assert waiting_for(pool, [first, second], view(done)) is None
    # A failed desktop does not hold a rolling rollout: its next pass ends it (as it plans).
    broken = replace(second, state=S.FAILED, failed_step=S.STARTING, last_error="no disk")
    assert waiting_for(pool, [broken], view(rollout)) == "its next pass, which ends it"
    assert [a.kind for a in plan_rollout(pool, [broken], view(rollout), NOW).actions] == [
        "rollout_state"
    ]
    # A failed canary candidate does hold the canary: it waits for its repair.
    canary = rollout_of(pool, state=RolloutState.CANARY)
    assert waiting_for(pool, [broken], view(canary)) == (
        "lab-002 to be repaired (failed at starting: no disk)"
    )


def test_a_rollout_ends_with_the_pool_at_its_size_not_with_its_surge() -> None:
    """Issue 37: a rollout reached 100 % and left a surge desktop (4 against min 3).

    Under a schedule the pool keeps the desktops it has up to ``max_size``, so the desktop
    the rollout's ``surge`` added stayed for good. The rollout removes it before it ends, and
    says so while it waits; the desktops the pool had before it began are kept.
    """
    pool = pool_of(template=NEW, min_size=3, max_size=5, spare=1)
    started = NOW - timedelta(minutes=30)
    make = desktop_builder()
    kept = [replace(make(pool), template=NEW) for _ in range(3)]
    surge = replace(make(pool), template=NEW, created_at=NOW - timedelta(minutes=10))
    rollout = rollout_of(pool, state=RolloutState.ROLLING, surge=1, started_at=started)
    night = Targets(min_ready=3, spare=1, idle=IdlePolicy.KEEP)
    desktops = [*kept, surge]
    vms = [build_vm(d) for d in desktops]
    plan = plan_pool(pool, desktops, vms, NOW, POLICY, rollout=view(rollout), targets=night)
    assert plan.rollout is not None
    assert [(a.kind, a.desktop_id) for a in plan.actions] == [("delete_desktop", surge.id)]
    assert plan.rollout.actions == ()  # not over while the surge desktop is there
    assert waiting_for(pool, desktops, view(rollout)) == (
        "lab-004 to be removed: the rollout's surge desktop (the pool keeps 3)"
    )
    gone = replace(surge, state=S.DELETING)
    plan = plan_pool(pool, [*kept, gone], vms, NOW, POLICY, rollout=view(rollout), targets=night)
    assert plan.rollout is not None
    [change] = plan.rollout.actions
    assert isinstance(change, ChangeRollout)
    assert change.state is RolloutState.SUCCEEDED
    # Without a schedule too: the pool is at its size when the rollout ends.
    plan = plan_pool(pool, desktops, vms, NOW, POLICY, rollout=view(rollout))
    assert [(a.kind, a.desktop_id) for a in plan.actions] == [("delete_desktop", surge.id)]
    assert plan.rollout is not None
    assert plan.rollout.actions == ()


def test_a_desktop_rebuilt_on_the_new_template_is_not_counted_as_being_replaced() -> None:
    """Issue 37: "100 % ... 1 being replaced" between the rebuild and the next pass."""
    pool = pool_of(template=NEW, min_size=2, max_size=2, spare=0)
    make = desktop_builder()
    done = [replace(make(pool), template=NEW) for _ in range(2)]
    rollout = rollout_of(pool, state=RolloutState.ROLLING)
    counts = count_rollout(pool, done, view(rollout, entry(done[0], REPLACING)))
    assert (counts.percent, counts.replacing) == (100, 0)


def test_a_pool_that_serves_no_new_user_says_what_its_rollout_waits_for() -> None:
    """Issue 37: the pool's health says why its users get no desktop, its rollout included."""
    pool = pool_of(min_size=2, max_size=2, spare=0)
    make = desktop_builder()
    held = [
        replace(make(pool), state=S.IN_USE, assigned_user=f"user-{n}", in_session=True)
        for n in range(2)
    ]
    rollout = rollout_of(pool, state=RolloutState.ROLLING)
    entries = [entry(d, WAITS, EntryRole.BATCH) for d in held]
    vms = [build_vm(d) for d in held]
    plan = plan_pool(pool, held, vms, NOW, POLICY, rollout=view(rollout, *entries))
    assert plan.health.reasons == (
        "no desktop for a new user: every desktop (2) is held and the pool is at max_size (2)",
        "the rollout to template tpl-v2 waits for the users of lab-001, lab-002 to log off",
    )
    # A pool that serves its users says nothing of its rollout.
    free = [replace(d, state=S.READY, assigned_user=None, in_session=False) for d in held]
    plan = plan_pool(pool, free, vms, NOW, POLICY, rollout=view(rollout))
    assert plan.health.reasons == ()
