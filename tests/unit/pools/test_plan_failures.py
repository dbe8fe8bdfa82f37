"""The planner retries failures with backoff, without churning the cluster."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from tests.support.pool_builders import (
    DesktopBuilder,
    PoolBuilder,
    VmBuilder,
)
from tests.unit.pools.planning import POLICY, S, described, failed, observed

from deskpool.pools.model import (
    PoolKind,
    PoolState,
)
from deskpool.reconciliation.plan import (
    HealthStatus,
    ReconcilePolicy,
    RetryFailed,
    retry_due_at,
)
from deskpool.reconciliation.planner import plan_pool


def test_backoff_doubles_up_to_the_maximum() -> None:
    policy = ReconcilePolicy(
        failure_backoff_base=timedelta(seconds=30), failure_backoff_max=timedelta(minutes=5)
    )
    assert [policy.backoff(n).total_seconds() for n in range(0, 7)] == [
        30,
        30,
        60,
        120,
        240,
        300,
        300,
    ]
    assert policy.backoff(10_000) == timedelta(minutes=5)


def test_a_failed_desktop_is_retried_once_its_backoff_passed(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=1)
    third = failed(
        make_desktop, pool, now, failure_count=3, last_failed_at=now - timedelta(minutes=2)
    )
    assert retry_due_at(third, POLICY) == now
    actions = list(plan_pool(pool, [third], observed([third], make_vm), now, POLICY).actions)
    assert actions == [
        RetryFailed(
            third.id,
            "lab-001 failed at waiting_for_agent: timeout; retrying provisioning "
            "(failure 3, waited 2m)",
        )
    ]
    early = replace(third, last_failed_at=now - timedelta(minutes=2) + timedelta(seconds=1))
    assert list(plan_pool(pool, [early], observed([early], make_vm), now, POLICY).actions) == []


def test_retry_due_falls_back_to_when_the_state_changed(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    desktop = failed(make_desktop, pool, now, last_failed_at=None, state_changed_at=now)
    assert retry_due_at(desktop, POLICY) == now + timedelta(seconds=30)
    assert retry_due_at(make_desktop(pool), POLICY) is None


def test_a_broken_template_does_not_churn_the_cluster(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=3, spare=2)
    desktops = [failed(make_desktop, pool, now, last_failed_at=now) for _ in range(3)]
    plan = plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY)
    assert plan.actions == ()
    assert plan.health.status is HealthStatus.FAILING
    assert plan.health.reasons == ("3 desktops failed at waiting_for_agent: timeout",)


def test_a_failed_deletion_is_retried_even_in_a_draining_pool(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(state=PoolState.DRAINING)
    desktop = failed(make_desktop, pool, now, failed_step=S.DELETING, last_error="VM locked")
    actions = list(plan_pool(pool, [desktop], observed([desktop], make_vm), now, POLICY).actions)
    (action,) = actions
    assert isinstance(action, RetryFailed)
    assert "retrying deletion" in action.reason


def test_a_draining_pool_repairs_what_users_hold(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT, state=PoolState.DRAINING)
    desktop = failed(make_desktop, pool, now, assigned_user="ada")
    actions = list(plan_pool(pool, [desktop], observed([desktop], make_vm), now, POLICY).actions)
    assert described(actions, [desktop]) == [("retry_failed", "lab-001")]
    disabled = replace(pool, state=PoolState.DISABLED)
    assert (
        list(plan_pool(disabled, [desktop], observed([desktop], make_vm), now, POLICY).actions)
        == []
    )
