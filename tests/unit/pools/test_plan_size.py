"""The planner sizes a pool: min size, spares, max size, surplus, disabled and draining pools."""

from __future__ import annotations

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
    CreateDesktop,
)
from deskpool.reconciliation.planner import plan_pool


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


def test_desktops_of_other_pools_are_ignored(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(min_size=1)
    other = make_pool(id=UUID(int=200), name="dev")
    stranger = make_desktop(other, 1, used_since_refresh=True)
    actions = list(plan_pool(pool, [stranger], [make_vm(stranger)], now, POLICY).actions)
    # lab-001 is taken by the other pool's VM on the same cluster
    assert described(actions, []) == [("create_desktop", "lab-002")]
