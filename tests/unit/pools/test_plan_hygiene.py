"""The planner refreshes used desktops and powers free ones on."""

from __future__ import annotations

from datetime import datetime

from tests.support.pool_builders import (
    DesktopBuilder,
    PoolBuilder,
    VmBuilder,
)
from tests.unit.pools.planning import POLICY, observed

from deskpool.pools.model import (
    PoolKind,
    PowerState,
)
from deskpool.reconciliation.plan import (
    PowerOn,
    RefreshDesktop,
)
from deskpool.reconciliation.planner import plan_pool


def test_free_desktops_are_refreshed_after_use_but_not_after_a_template_change(
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
    # A desktop built from the pool's former template stays (replacing it is a rollout's work).
    assert actions == [
        RefreshDesktop(desktops[0].id, "lab-001 was used since its last refresh and is free"),
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
        # Its owner has no session: his desktop is started too (issue 37), so his open works.
        PowerOn(
            desktops[3].id,
            "lab-vm-4",
            "lab-004 is ready for ada, who has no session, but its VM is stopped: his desktop is "
            "started again",
        ),
    ]
