"""The planner repairs drift: vanished VMs, and orphans tagged for a pool."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from uuid import UUID

from tests.support.pool_builders import (
    DesktopBuilder,
    PoolBuilder,
    VmBuilder,
)
from tests.unit.pools.planning import POLICY, S, described, failed, observed

from deskpool.pools.model import (
    ObservedVm,
    PoolKind,
    PoolState,
    PowerState,
)
from deskpool.reconciliation.plan import (
    DeleteOrphanVm,
    MarkVmMissing,
    PowerOn,
    ReconcilePolicy,
    ReplaceDesktop,
    ReportOrphan,
)
from deskpool.reconciliation.planner import plan_pool


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


def test_an_owned_desktop_left_with_its_vm_off_is_started_again(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    """Issue 37: an administrator powered off a persistent desktop while its owner was on it.

    His session ended with the VM, and his log-off left the desktop his and ``ready`` with its
    VM stopped: nothing acted on it, and his open failed ("vm_not_running ... try again
    shortly") for good. Its VM is started again, as a free desktop's is; a desktop whose owner
    is still in session is left to his session's end.
    """
    pool = make_pool(kind=PoolKind.PERSISTENT, min_size=2, max_size=2)
    left = make_desktop(pool, assigned_user="ada")
    still_on = make_desktop(pool, assigned_user="bob", state=S.IN_USE, in_session=True)
    vms = [make_vm(d, power_state=PowerState.STOPPED) for d in (left, still_on)]
    plan = plan_pool(pool, [left, still_on], vms, now, POLICY)
    assert list(plan.actions) == [
        PowerOn(
            left.id,
            "lab-vm-1",
            "lab-001 is ready for ada, who has no session, but its VM is stopped: his desktop "
            "is started again",
        )
    ]
