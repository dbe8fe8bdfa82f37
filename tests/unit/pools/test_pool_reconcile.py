"""The pure planner, rule by rule: size, timeouts, drift, failures, hygiene and health."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from tests.unit.pools.conftest import DesktopBuilder, PoolBuilder, VmBuilder

from deskpool.config import Config
from deskpool.pools.model import (
    Desktop,
    DesktopState,
    ObservedVm,
    OsType,
    Pool,
    PoolKind,
    PoolState,
    PowerState,
)
from deskpool.pools.plan import (
    Action,
    CreateDesktop,
    DeleteDesktop,
    DeleteOrphanVm,
    HealthStatus,
    MarkVmMissing,
    PowerOn,
    ReconcilePolicy,
    RefreshDesktop,
    ReplaceDesktop,
    ReportOrphan,
    RetryFailed,
    TimeOutStep,
    desktop_event,
    retry_due_at,
    summarize,
)
from deskpool.pools.planner import find_unowned_vms, plan_pool, plan_pools
from deskpool.pools.states import Delete, Failed, Refresh, Replace, Retry

S = DesktopState
POLICY = ReconcilePolicy()


def described(actions: Sequence[Action], desktops: Sequence[Desktop]) -> list[tuple[str, str]]:
    """Each action as (kind, the name of what it acts on), for readable assertions."""
    names = {desktop.id: desktop.name for desktop in desktops}
    out = []
    for action in actions:
        match action:
            case CreateDesktop(name=name) | ReportOrphan(name=name) | DeleteOrphanVm(name=name):
                out.append((action.kind, name))
            case _:
                out.append((action.kind, names[action.desktop_id]))
    return out


def observed(desktops: Sequence[Desktop], make_vm: VmBuilder) -> list[ObservedVm]:
    """The VMs of the desktops that have one, all running."""
    return [make_vm(desktop) for desktop in desktops if desktop.vm_id is not None]


def failed(make_desktop: DesktopBuilder, pool: Pool, now: datetime, **overrides: object) -> Desktop:
    fields: dict[str, object] = {
        "state": S.FAILED,
        "failed_step": S.WAITING_FOR_AGENT,
        "last_error": "timeout",
        "failure_count": 1,
        "last_failed_at": now - timedelta(hours=2),
    }
    fields.update(overrides)
    return make_desktop(pool, **fields)


# --------------------------------------------------------------------------- size


def test_an_empty_pool_is_filled_to_min_size(make_pool: PoolBuilder, now: datetime) -> None:
    pool = make_pool(min_size=3)
    actions = list(plan_pool(pool, [], [], now, POLICY).actions)
    assert actions == [
        CreateDesktop(f"lab-00{n}", f"lab-00{n}: pool lab has 0 desktops and needs 3 (min_size 3)")
        for n in (1, 2, 3)
    ]


def test_spares_are_kept_on_top_of_busy_desktops(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=1, spare=2)
    desktops = [
        make_desktop(pool, state=S.IN_USE, assigned_user="ada"),
        make_desktop(pool, state=S.IN_USE, assigned_user="bob", in_session=True),
        make_desktop(pool),
    ]
    actions = list(plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY).actions)
    assert actions == [
        CreateDesktop("lab-004", "lab-004: pool lab has 3 desktops and needs 4 (2 busy + 2 spare)")
    ]


def test_in_flight_and_failed_desktops_count_as_spares(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(spare=3)
    desktops = [
        make_desktop(pool, state=S.PROVISIONING),
        make_desktop(pool, state=S.WAITING_FOR_AGENT),
        failed(make_desktop, pool, now, last_failed_at=now),
    ]
    assert list(plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY).actions) == []


def test_growth_stops_at_max_size(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(max_size=4, spare=3)
    desktops = [make_desktop(pool, state=S.IN_USE, assigned_user=f"u{n}") for n in range(3)]
    actions = list(plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY).actions)
    assert actions == [
        CreateDesktop(
            "lab-004",
            "lab-004: pool lab has 3 desktops and needs 4 (3 busy + 3 spare, capped at max_size 4)",
        )
    ]


def test_desktops_being_deleted_still_count_against_max_size(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=3, max_size=3)
    desktops = [
        make_desktop(pool),
        make_desktop(pool, state=S.DELETING),
        failed(make_desktop, pool, now, failed_step=S.DELETING, last_failed_at=now),
    ]
    actions = list(plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY).actions)
    assert actions == []
    desktops.pop()
    actions = list(plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY).actions)
    assert described(actions, desktops) == [("create_desktop", "lab-003")]


def test_names_present_on_the_cluster_are_not_reused(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=4)
    desktops = [make_desktop(pool, 2)]
    stranger = ObservedVm(vm_id="900", name="LAB-001", power_state=PowerState.STOPPED)
    vms = [*observed(desktops, make_vm), stranger]
    actions = list(plan_pool(pool, desktops, vms, now, POLICY, taken_names=["lab-004"]).actions)
    assert [action.name for action in actions if isinstance(action, CreateDesktop)] == [
        "lab-003",
        "lab-005",
        "lab-006",
    ]


def test_surplus_removes_failed_desktops_first_then_the_newest(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=2)
    desktops = [
        make_desktop(pool),
        failed(make_desktop, pool, now),
        make_desktop(pool, state=S.IN_USE, assigned_user="ada"),
        make_desktop(pool),
        make_desktop(pool),
        make_desktop(pool, state=S.PROVISIONING),
    ]
    actions = list(plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY).actions)
    # 6 desktops, needs 2: only the free ready and failed ones can go, the in-use and the
    # provisioning one stay (the latter is removed once ready, on a later pass).
    assert described(actions, desktops) == [
        ("delete_desktop", "lab-002"),
        ("delete_desktop", "lab-005"),
        ("delete_desktop", "lab-004"),
        ("delete_desktop", "lab-001"),
    ]
    assert actions[0].reason == (
        "lab-002: pool lab has 6 desktops and needs 2; it failed at waiting_for_agent: timeout"
    )


def test_surplus_never_goes_below_min_size(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=3, spare=1)
    desktops = [make_desktop(pool) for _ in range(5)]
    actions = list(plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY).actions)
    assert described(actions, desktops) == [
        ("delete_desktop", "lab-005"),
        ("delete_desktop", "lab-004"),
    ]


def test_a_disabled_pool_creates_and_deletes_nothing(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    small = make_pool(min_size=5, state=PoolState.DISABLED)
    assert list(plan_pool(small, [], [], now, POLICY).actions) == []
    big = make_pool(min_size=0, max_size=2, state=PoolState.DISABLED)
    desktops = [
        make_desktop(big),
        make_desktop(big),
        make_desktop(big, used_since_refresh=True),
        failed(make_desktop, big, now),
    ]
    vms = [make_vm(desktop, power_state=PowerState.STOPPED) for desktop in desktops]
    assert list(plan_pool(big, desktops, vms, now, POLICY).actions) == []


def test_a_draining_pool_deletes_desktops_as_they_become_free(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT, min_size=5, state=PoolState.DRAINING)
    desktops = [
        make_desktop(pool),
        make_desktop(pool, assigned_user="ada"),
        make_desktop(pool, state=S.IN_USE, assigned_user="bob"),
        failed(make_desktop, pool, now),
        failed(make_desktop, pool, now, assigned_user="eve", last_failed_at=now),
        make_desktop(pool, state=S.STARTING),
        make_desktop(pool, state=S.DELETING),
    ]
    actions = list(plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY).actions)
    assert described(actions, desktops) == [
        ("delete_desktop", "lab-004"),
        ("delete_desktop", "lab-001"),
    ]
    assert actions[1].reason == "lab-001: pool lab is draining and the desktop is free"


# --------------------------------------------------------------------------- timeouts


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


# --------------------------------------------------------------------------- drift


def test_a_free_desktop_whose_vm_vanished_is_replaced(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=1)
    desktop = make_desktop(pool)
    actions = list(plan_pool(pool, [desktop], [], now, POLICY).actions)
    assert actions == [
        ReplaceDesktop(
            desktop.id, "VM lab-vm-1 of lab-001 vanished from the cluster; provisioning a new one"
        )
    ]


def test_a_non_persistent_desktop_in_use_whose_vm_vanished_is_replaced(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=1)
    desktop = make_desktop(pool, state=S.IN_USE, assigned_user="ada", in_session=True)
    assert described(list(plan_pool(pool, [desktop], [], now, POLICY).actions), [desktop]) == [
        ("replace_desktop", "lab-001")
    ]


def test_an_owned_desktop_whose_vm_vanished_is_marked_failed(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT)
    desktop = make_desktop(pool, assigned_user="ada")
    actions = list(plan_pool(pool, [desktop], [], now, POLICY).actions)
    assert actions == [
        MarkVmMissing(
            desktop.id,
            "lab-vm-1",
            "VM missing from the cluster",
            "VM lab-vm-1 of lab-001 vanished from the cluster while assigned to ada",
        )
    ]


def test_a_disabled_pool_only_marks_vanished_vms(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool(state=PoolState.DISABLED)
    desktop = make_desktop(pool)
    assert described(list(plan_pool(pool, [desktop], [], now, POLICY).actions), [desktop]) == [
        ("mark_vm_missing", "lab-001")
    ]


def test_a_draining_pool_deletes_a_free_desktop_whose_vm_vanished(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool(state=PoolState.DRAINING)
    desktop = make_desktop(pool, state=S.IN_USE, assigned_user="ada")
    actions = list(plan_pool(pool, [desktop], [], now, POLICY).actions)
    assert described(actions, [desktop]) == [("delete_desktop", "lab-001")]
    assert actions[0].reason.endswith("; its VM lab-vm-1 vanished from the cluster")


def test_in_flight_desktops_are_not_drift(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool(spare=3)  # the desktop being deleted does not count
    desktops = [
        make_desktop(pool, state=state)
        for state in (S.STARTING, S.WAITING_FOR_AGENT, S.REFRESHING, S.DELETING)
    ]
    assert list(plan_pool(pool, desktops, [], now, POLICY).actions) == []


def test_an_unknown_vm_tagged_for_the_pool_is_reported_once(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool()
    orphan = ObservedVm(
        vm_id="777", name="lab-009", power_state=PowerState.RUNNING, pool_id=pool.id
    )
    actions = list(plan_pool(pool, [], [orphan], now, POLICY).actions)
    assert actions == [
        ReportOrphan(
            "777",
            "lab-009",
            "VM 777 (lab-009) is tagged for pool lab but belongs to none of its desktops; "
            "left as is",
        )
    ]
    assert list(plan_pool(pool, [], [orphan], now, POLICY, known_orphans={"777"}).actions) == []


def test_orphans_are_deleted_only_when_the_policy_says_so(
    make_pool: PoolBuilder, now: datetime
) -> None:
    pool = make_pool()
    orphan = ObservedVm(vm_id="777", name="x", power_state=PowerState.RUNNING, pool_id=pool.id)
    deleting = ReconcilePolicy(delete_orphans=True)
    (action,) = list(plan_pool(pool, [], [orphan], now, deleting, known_orphans={"777"}).actions)
    assert isinstance(action, DeleteOrphanVm)
    assert action.vm_id == "777"
    disabled = replace(pool, state=PoolState.DISABLED)
    (action,) = list(plan_pool(disabled, [], [orphan], now, deleting).actions)
    assert isinstance(action, ReportOrphan)


def test_vms_deskpool_did_not_tag_or_of_other_pools_are_left_alone(
    make_pool: PoolBuilder, now: datetime
) -> None:
    pool = make_pool()
    vms = [
        ObservedVm(vm_id="1", name="db", power_state=PowerState.RUNNING),
        ObservedVm(vm_id="2", name="x", power_state=PowerState.RUNNING, pool_id=UUID(int=9)),
        ObservedVm(vm_id="3", name="y", power_state=PowerState.RUNNING, desktop_id=UUID(int=9)),
    ]
    assert list(plan_pool(pool, [], vms, now, POLICY).actions) == []


def test_vms_a_desktop_job_is_working_on_are_not_orphans(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(spare=4)  # the desktop being deleted does not count
    desktops = [
        make_desktop(pool, state=S.PROVISIONING),
        make_desktop(pool, state=S.REFRESHING),
        make_desktop(pool, state=S.DELETING),
        failed(make_desktop, pool, now, last_failed_at=now),
        make_desktop(pool, state=S.STARTING),
    ]
    vms = [
        *observed(desktops, make_vm),
        *(make_vm(desktop, vm_id=f"new-{desktop.name}") for desktop in desktops[:4]),
    ]
    assert list(plan_pool(pool, desktops, vms, now, POLICY).actions) == []
    # a second VM for a desktop nobody works on is a duplicate: an orphan
    duplicate = make_vm(desktops[4], vm_id="dup")
    actions = list(plan_pool(pool, desktops, [*vms, duplicate], now, POLICY).actions)
    assert described(actions, desktops) == [("report_orphan", "lab-005")]


# --------------------------------------------------------------------------- failures


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


# --------------------------------------------------------------------------- hygiene


def test_free_desktops_are_refreshed_after_use_or_a_template_change(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT, template="tpl-v2", spare=4)
    desktops = [
        make_desktop(pool, used_since_refresh=True),
        make_desktop(pool, template="tpl-v1"),
        make_desktop(pool, template="tpl-v1", assigned_user="ada"),
        make_desktop(pool, template=None),
        make_desktop(pool),
    ]
    actions = list(plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY).actions)
    assert actions == [
        RefreshDesktop(desktops[0].id, "lab-001 was used since its last refresh and is free"),
        RefreshDesktop(
            desktops[1].id, "lab-002 was built from template tpl-v1; pool lab now uses tpl-v2"
        ),
    ]


def test_free_ready_desktops_are_powered_on(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT, spare=3)
    desktops = [
        make_desktop(pool),
        make_desktop(pool),
        make_desktop(pool),
        make_desktop(pool, assigned_user="ada"),
    ]
    powers = [PowerState.STOPPED, PowerState.PAUSED, PowerState.UNKNOWN, PowerState.STOPPED]
    vms = [make_vm(d, power_state=p) for d, p in zip(desktops, powers, strict=True)]
    actions = list(plan_pool(pool, desktops, vms, now, POLICY).actions)
    assert actions == [
        PowerOn(
            desktops[0].id, "lab-vm-1", "lab-001 is a free ready desktop but its VM is stopped"
        ),
        PowerOn(desktops[1].id, "lab-vm-2", "lab-002 is a free ready desktop but its VM is paused"),
    ]


# --------------------------------------------------------------------------- health


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


# --------------------------------------------------------------------------- batches


def test_a_batch_is_planned_like_each_pool_alone(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    other_cluster = UUID(int=2)
    first = make_pool(min_size=3)
    second = make_pool(id=UUID(int=200), name="dev", naming_pattern="dev-{n}", spare=2)
    third = make_pool(id=UUID(int=300), name="ops", cluster_id=other_cluster, min_size=1)
    desktops = [
        make_desktop(first, 1),
        make_desktop(second, 1, state=S.IN_USE, assigned_user="ada"),
        failed(make_desktop, second, now),
        make_desktop(third, 1),
    ]
    first_vms = observed(desktops[:3], make_vm)
    orphan = ObservedVm(vm_id="o", name="o", power_state=PowerState.RUNNING, pool_id=second.id)
    vms = {first.cluster_id: [*first_vms, orphan], other_cluster: []}
    plans = plan_pools([first, second, third], desktops, vms, now, POLICY)
    alone = [
        plan_pool(first, desktops, [*first_vms, orphan], now, POLICY),
        plan_pool(second, desktops, [*first_vms, orphan], now, POLICY),
        plan_pool(third, desktops, [], now, POLICY),
    ]
    assert plans == alone
    assert [plan.pool_id for plan in plans] == [first.id, second.id, third.id]


def test_pools_of_a_batch_sharing_a_pattern_get_distinct_names(
    make_pool: PoolBuilder, now: datetime
) -> None:
    first = make_pool(min_size=2)
    second = make_pool(id=UUID(int=200), name="lab2", min_size=2)
    plans = plan_pools(
        [first, second],
        [],
        {first.cluster_id: []},
        now,
        POLICY,
        taken_names={first.cluster_id: ["lab-002"]},
    )
    names = [[a.name for a in plan.actions if isinstance(a, CreateDesktop)] for plan in plans]
    assert names == [["lab-001", "lab-003"], ["lab-004", "lab-005"]]


def test_a_cluster_missing_from_the_batch_could_not_be_listed(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=3)
    desktops = [make_desktop(pool)]
    (plan,) = plan_pools([pool], desktops, {}, now, POLICY)
    assert plan.actions == ()
    assert "could not be listed" in plan.health.reasons[0]


def test_batches_route_vms_by_id_desktop_tag_and_pool_tag(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(spare=2)
    other = make_pool(id=UUID(int=200), name="dev", naming_pattern="dev-{n}", spare=1)
    desktops = [
        make_desktop(pool, 1),
        make_desktop(pool, 2, state=S.PROVISIONING),
        make_desktop(other, 1),
    ]
    vms = [
        make_vm(desktops[0], desktop_id=None, pool_id=None),  # matched by its id only
        make_vm(desktops[1], vm_id="cloning"),  # matched by its desktop tag
        make_vm(desktops[2]),
        ObservedVm(vm_id="lost", name="lab-777", power_state=PowerState.STOPPED, pool_id=pool.id),
    ]
    first, second = plan_pools([pool, other], desktops, {pool.cluster_id: vms}, now, POLICY)
    assert described(first.actions, desktops) == [("report_orphan", "lab-777")]
    assert second.actions == ()


def test_find_unowned_vms_lists_tagged_vms_of_unknown_pools() -> None:
    known_pool, known_desktop = UUID(int=1), UUID(int=2)
    vms = [
        ObservedVm(vm_id="a", name="a", power_state=PowerState.RUNNING),
        ObservedVm(vm_id="b", name="b", power_state=PowerState.RUNNING, pool_id=known_pool),
        ObservedVm(vm_id="c", name="c", power_state=PowerState.RUNNING, desktop_id=known_desktop),
        ObservedVm(vm_id="d", name="d", power_state=PowerState.RUNNING, pool_id=UUID(int=8)),
        ObservedVm(vm_id="e", name="e", power_state=PowerState.RUNNING, desktop_id=UUID(int=9)),
    ]
    unowned = find_unowned_vms(vms, pool_ids={known_pool}, desktop_ids={known_desktop})
    assert [vm.vm_id for vm in unowned] == ["d", "e"]


# --------------------------------------------------------------------------- contract


def test_actions_map_to_desktop_events() -> None:
    some = UUID(int=1)
    assert desktop_event(DeleteDesktop(some, "r")) == Delete()
    assert desktop_event(ReplaceDesktop(some, "r")) == Replace()
    assert desktop_event(RetryFailed(some, "r")) == Retry()
    assert desktop_event(RefreshDesktop(some, "r")) == Refresh()
    assert desktop_event(MarkVmMissing(some, "1", "gone", "r")) == Failed("gone")
    assert desktop_event(TimeOutStep(some, S.STARTING, "timed out", "r")) == Failed("timed out")
    assert desktop_event(CreateDesktop("x", "r")) is None
    assert desktop_event(PowerOn(some, "1", "r")) is None
    assert desktop_event(ReportOrphan("1", "x", "r")) is None
    assert desktop_event(DeleteOrphanVm("1", "x", "r")) is None


def test_action_kinds_are_distinct() -> None:
    kinds = [
        kind.kind
        for kind in (
            CreateDesktop,
            DeleteDesktop,
            ReplaceDesktop,
            RetryFailed,
            RefreshDesktop,
            MarkVmMissing,
            TimeOutStep,
            PowerOn,
            ReportOrphan,
            DeleteOrphanVm,
        )
    ]
    assert len(set(kinds)) == len(kinds)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("failure_backoff_base", timedelta(0)),
        ("failure_backoff_max", timedelta(seconds=1)),
        ("guest_agent_wait_timeout", timedelta(0)),
        ("operation_timeout", timedelta(seconds=-1)),
        ("timeout_grace", timedelta(seconds=-1)),
    ],
)
def test_a_policy_rejects_nonsense(field: str, value: timedelta) -> None:
    changes: dict[str, Any] = {field: value}
    with pytest.raises(ValueError, match=field):
        replace(POLICY, **changes)


def test_a_policy_reads_the_wait_timeouts_from_the_configuration() -> None:
    config = Config(
        {"GUEST_AGENT_WAIT_TIMEOUT": 120.0, "WINDOWS_READY_WAIT_TIMEOUT": 900.0}, {}, {}
    )
    policy = ReconcilePolicy.from_config(config)
    assert policy.step_timeout(S.WAITING_FOR_AGENT) == timedelta(minutes=2)
    assert policy.step_timeout(S.WAITING_FOR_WINDOWS) == timedelta(minutes=15)
    assert policy.step_timeout(S.READY) is None
    assert policy.step_timeout(S.FAILED) is None


def test_a_surplus_desktop_whose_vm_vanished_is_deleted_not_replaced(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=1)
    desktops = [
        make_desktop(pool),
        make_desktop(pool, state=S.IN_USE, assigned_user="ada", in_session=True),
    ]
    actions = list(plan_pool(pool, desktops, observed(desktops[:1], make_vm), now, POLICY).actions)
    assert described(actions, desktops) == [("delete_desktop", "lab-002")]


def test_desktops_of_other_pools_are_ignored(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=1)
    other = make_pool(id=UUID(int=200), name="dev")
    stranger = make_desktop(other, 1, used_since_refresh=True)
    actions = list(plan_pool(pool, [stranger], [make_vm(stranger)], now, POLICY).actions)
    # lab-001 is taken by the other pool's VM on the same cluster
    assert described(actions, []) == [("create_desktop", "lab-002")]
