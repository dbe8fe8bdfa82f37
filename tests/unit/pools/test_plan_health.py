"""A pool's health and summary, as the planner reports them."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.support.pool_builders import (
    DesktopBuilder,
    PoolBuilder,
    VmBuilder,
)
from tests.unit.pools.planning import POLICY, S, failed, observed

from deskpool.pools.model import (
    DesktopState,
    ObservedVm,
    PoolKind,
    PowerState,
)
from deskpool.reconciliation.plan import (
    HealthStatus,
    summarize,
)
from deskpool.reconciliation.planner import plan_pool


def test_a_pool_with_nothing_wrong_is_healthy(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=2)
    desktops = [make_desktop(pool), make_desktop(pool, state=S.PROVISIONING)]
    plan = plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY)
    assert plan.health.status is HealthStatus.HEALTHY
    assert plan.health.reasons == ()
    assert plan.pool_id == pool.id
    assert plan.generation == pool.generation


def test_health_says_why_the_pool_is_degraded(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT, max_size=10, spare=1)
    desktops = [
        *(failed(make_desktop, pool, now, last_failed_at=now) for _ in range(3)),
        failed(make_desktop, pool, now, failed_step=S.PROVISIONING, last_error="no space left"),
        make_desktop(pool, state=S.WAITING_FOR_AGENT, state_changed_at=now - timedelta(hours=1)),
        make_desktop(pool, assigned_user="ada"),
        make_desktop(pool, assigned_user="bob"),
        make_desktop(pool, assigned_user="eve"),
        make_desktop(pool, state=S.IN_USE, assigned_user="joe"),
        make_desktop(pool, state=S.IN_USE, assigned_user="max"),
    ]
    vms = [make_vm(desktop) for desktop in desktops if desktop.name != "lab-006"]
    orphans = [
        ObservedVm(vm_id=f"o{n}", name=f"old-{n}", power_state=PowerState.STOPPED, pool_id=pool.id)
        for n in range(7)
    ]
    plan = plan_pool(pool, desktops, [*vms, *orphans], now, POLICY)
    assert plan.health.status is HealthStatus.DEGRADED
    assert plan.health.reasons == (
        "3 desktops failed at waiting_for_agent: timeout",
        "1 desktop failed at provisioning: no space left",
        "1 desktop stuck in waiting_for_agent for over 10m",
        "1 desktop lost its VM on the cluster",
        "7 VMs tagged for this pool belong to no desktop: old-0, old-1, old-2, old-3, old-4 "
        "and 2 more",
        "at max_size (10): 0 of 1 spare desktops available",
    )


def test_a_pool_with_failures_and_nothing_usable_is_failing(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=2)
    desktops = [failed(make_desktop, pool, now, last_failed_at=now), make_desktop(pool)]
    vms = observed(desktops, make_vm)
    assert plan_pool(pool, desktops, vms, now, POLICY).health.status is HealthStatus.DEGRADED
    plan = plan_pool(pool, desktops, vms[:1], now, POLICY)
    assert plan.health.status is HealthStatus.FAILING


def test_an_invalid_naming_pattern_is_reported_not_raised(
    make_pool: PoolBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=1, naming_pattern="lab")
    plan = plan_pool(pool, [], [], now, POLICY)
    assert plan.actions == ()
    assert plan.health.status is HealthStatus.DEGRADED
    assert plan.health.reasons[0].startswith("no desktop can be created: invalid naming pattern")


def test_summarize_counts_desktops(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT)
    desktops = [
        make_desktop(pool),
        make_desktop(pool),
        make_desktop(pool, assigned_user="ada"),
        make_desktop(pool, state=S.IN_USE, assigned_user="bob", in_session=True),
        failed(make_desktop, pool, now),
    ]
    summary = summarize(desktops)
    assert summary.total == 5
    assert summary.by_state[S.READY] == 3
    assert summary.by_state[S.IN_USE] == 1
    assert summary.by_state[S.FAILED] == 1
    assert summary.by_state[S.PROVISIONING] == 0
    assert set(summary.by_state) == set(DesktopState)
    assert (summary.assigned, summary.in_session, summary.available) == (2, 1, 2)
    assert summarize([]).total == 0


# ------------------------------------------------------------ who the pool can serve (issue 37)


def test_a_pool_that_keeps_nothing_ready_says_it_serves_no_new_user_at_its_maximum(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    # Below max_size a new user's open builds him a desktop (issue 39): min 0 and spare 0 serve.
    empty = make_pool(min_size=0, spare=0)
    assert plan_pool(empty, [], [], now, POLICY).health.status is HealthStatus.HEALTHY
    pool = make_pool(min_size=1, spare=0)
    held = [make_desktop(pool, state=S.IN_USE, assigned_user="ada")]
    plan = plan_pool(pool, held, observed(held, make_vm), now, POLICY)
    assert plan.health.status is HealthStatus.HEALTHY
    # At max_size, the pool cannot grow: the next user gets none.
    full = make_pool(min_size=1, spare=0, max_size=1)
    held = [make_desktop(full, state=S.IN_USE, assigned_user="ada")]
    plan = plan_pool(full, held, observed(held, make_vm), now, POLICY)
    assert plan.health.status is HealthStatus.DEGRADED
    assert plan.health.reasons == (
        "no desktop for a new user: every desktop (1) is held and the pool is at max_size (1)",
    )


def test_a_pool_serves_new_users_from_free_desktops_on_their_way_or_powered_off(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=1, spare=0)
    for desktop in (
        make_desktop(pool),
        make_desktop(pool, state=S.STARTING),
        make_desktop(pool, state=S.REFRESHING),
        make_desktop(pool, state=S.POWERED_OFF),  # started for the user who opens the pool
    ):
        plan = plan_pool(pool, [desktop], observed([desktop], make_vm), now, POLICY)
        assert plan.health.status is HealthStatus.HEALTHY, (desktop.state, plan.health)
    grows = make_pool(min_size=0, spare=1)
    held = [make_desktop(grows, state=S.IN_USE, assigned_user="ada")]
    plan = plan_pool(grows, held, observed(held, make_vm), now, POLICY)
    assert plan.health.status is HealthStatus.HEALTHY  # its spare is being created


def test_a_desktop_in_use_whose_vm_is_off_strands_its_user(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=2, spare=1)
    desktops = [make_desktop(pool, state=S.IN_USE, assigned_user="ada"), make_desktop(pool)]
    vms = [make_vm(desktops[0], power_state=PowerState.STOPPED), make_vm(desktops[1])]
    plan = plan_pool(pool, desktops, vms, now, POLICY)
    assert plan.health.status is HealthStatus.DEGRADED
    assert plan.health.reasons == (
        "lab-001 is in use but its VM is stopped: its user cannot connect to it",
    )
