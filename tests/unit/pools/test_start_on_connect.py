"""Start on connect, pure parts: the transitions, which desktop is started, the planner's power.

A desktop powered up for a user is reserved to him (``PowerUp(user)``); a persistent pool's
desktop whose owner has no session is powered off under ``idle: power_off`` and stays his; the
desktop started for a user is chosen by :func:`deskpool.starts.model.choose_start`.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from tests.support.pool_builders import (
    DesktopBuilder,
    PoolBuilder,
    VmBuilder,
)
from tests.unit.pools.planning import POLICY, S, described, observed

from deskpool.desktops.states import IllegalTransition, PowerOff, PowerUp, transition
from deskpool.pools.model import PoolKind, PoolState
from deskpool.reconciliation.planner import plan_pool
from deskpool.schedules.model import IdlePolicy, Targets
from deskpool.starts.model import choose_start

ALICE = "00000000-0000-0000-0000-00000000a11c"
BOB = "00000000-0000-0000-0000-000000000b0b"

OFF_PEAK = Targets(min_ready=0, spare=0, idle=IdlePolicy.POWER_OFF)
PEAK = Targets(min_ready=2, spare=0, idle=IdlePolicy.KEEP)


def test_a_desktop_powered_up_for_a_user_is_reserved_to_him(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    off = make_desktop(pool, state=S.POWERED_OFF)
    up = transition(off, PowerUp(ALICE), pool=pool, now=now)
    assert (up.state, up.assigned_user) == (S.STARTING, ALICE)
    assert not up.used_since_refresh  # handed over clean, used once allocated
    assert transition(off, PowerUp(), pool=pool, now=now).assigned_user is None
    owned = make_desktop(
        make_pool(kind=PoolKind.PERSISTENT), state=S.POWERED_OFF, assigned_user=BOB
    )
    with pytest.raises(IllegalTransition, match="another user"):
        transition(owned, PowerUp(ALICE), pool=make_pool(kind=PoolKind.PERSISTENT), now=now)


def test_a_persistent_desktop_is_powered_off_with_its_owner_and_stays_his(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT)
    mine = make_desktop(pool, assigned_user=ALICE, used_since_refresh=True)
    off = transition(mine, PowerOff(), pool=pool, now=now)
    assert (off.state, off.assigned_user) == (S.POWERED_OFF, ALICE)
    with pytest.raises(IllegalTransition):
        transition(
            make_desktop(pool, assigned_user=ALICE, in_session=True), PowerOff(), pool=pool, now=now
        )
    # A non-persistent desktop used since its refresh is not powered off (it is rebuilt first).
    lent = make_desktop(make_pool(), used_since_refresh=True, assigned_user=ALICE)
    with pytest.raises(IllegalTransition):
        transition(lent, PowerOff(), pool=make_pool(), now=now)


def test_a_free_powered_off_desktop_is_started_oldest_first(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder
) -> None:
    pool = make_pool()
    older = make_desktop(pool, 1, state=S.POWERED_OFF)
    newer = make_desktop(pool, 2, state=S.POWERED_OFF)
    taken = make_desktop(pool, 3, state=S.STARTING, assigned_user=BOB)
    choice = choose_start(pool, [newer, taken, older], ALICE)
    assert choice is not None
    assert (choice.desktop, choice.power_up) == (older, True)
    # Bob waits for the desktop already started for him rather than another.
    again = choose_start(pool, [newer, taken, older], BOB)
    assert again is not None
    assert (again.desktop, again.power_up) == (taken, False)
    assert choose_start(pool, [taken], ALICE) is None
    assert choose_start(make_pool(state=PoolState.DISABLED), [older], ALICE) is None
    assert choose_start(make_pool(state=PoolState.DRAINING), [older], ALICE) is None
    assert choose_start(pool, [older], ALICE, held_only=True) is None


def test_a_persistent_pool_starts_the_owners_desktop_only(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT)
    mine = make_desktop(pool, 1, state=S.POWERED_OFF, assigned_user=ALICE)
    free = make_desktop(pool, 2, state=S.POWERED_OFF)
    choice = choose_start(pool, [free, mine], ALICE)
    assert choice is not None
    assert (choice.desktop, choice.power_up) == (mine, True)
    broken = make_desktop(pool, 3, state=S.FAILED, assigned_user=BOB)
    assert choose_start(pool, [free, broken], BOB) is None  # his own is broken: not another
    newcomer = choose_start(pool, [free], BOB)
    assert newcomer is not None
    assert newcomer.desktop == free
    # A draining pool still starts the owner's own desktop.
    assert choose_start(
        make_pool(kind=PoolKind.PERSISTENT, state=PoolState.DRAINING), [mine], ALICE
    )


def test_off_peak_powers_off_owned_desktops_without_session_and_leaves_them_off(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT, max_size=4)
    idle = make_desktop(pool, 1, assigned_user=ALICE, used_since_refresh=True)
    working = make_desktop(pool, 2, state=S.IN_USE, assigned_user=BOB, in_session=True)
    resting = make_desktop(pool, 3, state=S.POWERED_OFF, assigned_user="carol")
    desktops = [idle, working, resting]
    plan = plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY, targets=OFF_PEAK)
    assert described(plan.actions, desktops) == [("power_off_desktop", idle.name)]

    # At peak (idle: keep) the pool wants its desktops running: the resting one is powered on.
    peak = plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY, targets=PEAK)
    assert ("power_up_desktop", resting.name) in described(peak.actions, desktops)
    assert ("power_off_desktop", idle.name) not in described(peak.actions, desktops)


def test_a_desktop_being_started_for_a_user_is_busy_for_the_planner(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, make_vm: VmBuilder, now: datetime
) -> None:
    pool = make_pool(max_size=2)
    starting = make_desktop(pool, 1, state=S.STARTING, assigned_user=ALICE)
    off = make_desktop(pool, 2, state=S.POWERED_OFF)
    desktops = [starting, off]
    plan = plan_pool(pool, desktops, observed(desktops, make_vm), now, POLICY, targets=OFF_PEAK)
    assert plan.actions == ()  # neither deleted nor powered off: Alice waits for it
