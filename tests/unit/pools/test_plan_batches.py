"""Planning pools in batches: like each pool alone, distinct names, VMs routed right."""

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
    PowerState,
)
from deskpool.reconciliation.plan import (
    CreateDesktop,
)
from deskpool.reconciliation.planner import find_unowned_vms, plan_pool, plan_pools


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
