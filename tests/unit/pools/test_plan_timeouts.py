"""The planner fails desktops stuck in a step past its timeout, and only those."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from tests.support.pool_builders import (
    DesktopBuilder,
    PoolBuilder,
    VmBuilder,
)
from tests.unit.pools.planning import POLICY, S, described, failed, observed

from deskpool.pools.model import (
    DesktopState,
    OsType,
)
from deskpool.reconciliation.plan import (
    TimeOutStep,
)
from deskpool.reconciliation.planner import plan_pool


@pytest.mark.parametrize(
    ("state", "os_type", "limit"),
    [
        (S.WAITING_FOR_AGENT, OsType.LINUX, timedelta(minutes=10)),
        (S.WAITING_FOR_WINDOWS, OsType.WINDOWS, timedelta(minutes=30)),
        (S.PROVISIONING, OsType.LINUX, timedelta(hours=1)),
        (S.STARTING, OsType.LINUX, timedelta(hours=1)),
        (S.REFRESHING, OsType.LINUX, timedelta(hours=1)),
        (S.DELETING, OsType.LINUX, timedelta(hours=1)),
    ],
)
def test_a_desktop_stuck_in_a_step_past_its_timeout_fails_there(
    make_pool: PoolBuilder,
    make_desktop: DesktopBuilder,
    make_vm: VmBuilder,
    now: datetime,
    state: DesktopState,
    os_type: OsType,
    limit: timedelta,
) -> None:
    pool = make_pool(os_type=os_type, min_size=3)
    on_time = make_desktop(pool, state=state, state_changed_at=now - limit - POLICY.timeout_grace)
    late = make_desktop(
        pool, state=state, state_changed_at=on_time.state_changed_at - timedelta(seconds=1)
    )
    desktops = [on_time, late, make_desktop(pool)]
    actions = list(plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY).actions)
    (action,) = [action for action in actions if isinstance(action, TimeOutStep)]
    assert (action.desktop_id, action.step) == (late.id, state)
    assert action.error.startswith("timed out after ")
    assert action.reason.startswith(f"lab-002 has been in {state} for ")


def test_ready_and_in_use_desktops_never_time_out(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=2)
    long_ago = now - timedelta(days=30)
    desktops = [
        make_desktop(pool, state_changed_at=long_ago),
        make_desktop(pool, state=S.IN_USE, assigned_user="ada", state_changed_at=long_ago),
    ]
    assert list(plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY).actions) == []


def test_a_stuck_desktop_is_deleted_when_the_pool_has_too_many(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=1)
    desktops = [
        make_desktop(pool),
        make_desktop(pool, state=S.STARTING, state_changed_at=now - timedelta(days=1)),
    ]
    actions = list(plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY).actions)
    assert described(actions, desktops) == [("delete_desktop", "lab-002")]
    assert actions[0].reason.endswith("; it is stuck in starting")


def test_timeouts_apply_even_when_the_cluster_cannot_be_listed(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=5)
    desktops = [
        make_desktop(pool, state=S.WAITING_FOR_AGENT, state_changed_at=now - timedelta(hours=1)),
        failed(make_desktop, pool, now),
        make_desktop(pool, used_since_refresh=True),
    ]
    plan = plan_pool(pool, desktops, None, now, POLICY)
    assert described(plan.actions, desktops) == [("time_out_step", "lab-001")]
    assert plan.health.reasons[0] == (
        "the cluster's VMs could not be listed; only timeouts are acted on"
    )
