"""Which desktop a user gets: persistent and non-persistent pools, order and refusals."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from uuid import UUID

import pytest
from tests.support.pool_builders import (
    DesktopBuilder,
    PoolBuilder,
)

from deskpool.desktops.allocation import (
    Allocation,
    DesktopNotReady,
    NoDesktopAvailable,
    PoolUnavailable,
    allocation_candidates,
    choose_desktop,
    free_desktops,
    held_desktops,
)
from deskpool.desktops.states import Allocated, transition
from deskpool.errors import Conflict, ServiceUnavailable
from deskpool.pools.model import Desktop, DesktopState, PoolKind, PoolState

S = DesktopState


def names(desktops: list[Desktop]) -> list[str]:
    return [desktop.name for desktop in desktops]


def test_a_non_persistent_pool_lends_the_oldest_free_clean_ready_desktop(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    other = make_pool(id=UUID(int=200))
    desktops = [
        make_desktop(pool, state=S.PROVISIONING),
        make_desktop(pool, used_since_refresh=True),
        make_desktop(pool, state=S.IN_USE, assigned_user="bob"),
        make_desktop(pool),
        make_desktop(pool, state=S.FAILED),
        make_desktop(pool),
        make_desktop(other, 0),
    ]
    allocation = choose_desktop(pool, desktops, "ada")
    assert allocation == Allocation(desktops[3], "ada", new_assignment=True)
    candidates, new = allocation_candidates(pool, desktops, "ada")
    assert (names(candidates), new) == (["lab-004", "lab-006"], True)
    lent = transition(allocation.desktop, allocation.event, pool=pool, now=now)
    assert (lent.state, lent.assigned_user) == (S.IN_USE, "ada")


def test_a_non_persistent_pool_gives_back_the_desktop_in_use(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder
) -> None:
    pool = make_pool()
    desktops = [make_desktop(pool), make_desktop(pool, state=S.IN_USE, assigned_user="ada")]
    allocation = choose_desktop(pool, desktops, "ada")
    assert allocation == Allocation(desktops[1], "ada", new_assignment=False)
    assert allocation.event == Allocated("ada")


def test_a_persistent_pool_gives_a_user_their_own_desktop(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT)
    desktops = [
        make_desktop(pool),
        make_desktop(pool, assigned_user="ada", used_since_refresh=True),
        make_desktop(pool, assigned_user="bob"),
    ]
    assert choose_desktop(pool, desktops, "ada") == Allocation(desktops[1], "ada", False)
    in_use = [*desktops[:1], make_desktop(pool, state=S.IN_USE, assigned_user="ada")]
    assert choose_desktop(pool, in_use, "ada").desktop == in_use[1]


def test_a_persistent_pool_assigns_a_free_desktop_to_a_new_user(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT)
    desktops = [
        make_desktop(pool, assigned_user="bob"),
        make_desktop(pool, used_since_refresh=True),
        make_desktop(pool),
    ]
    assert choose_desktop(pool, desktops, "ada") == Allocation(desktops[2], "ada", True)


def test_a_user_whose_own_desktop_is_not_ready_waits_for_it(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT)
    desktops = [make_desktop(pool), make_desktop(pool, state=S.REFRESHING, assigned_user="ada")]
    with pytest.raises(DesktopNotReady, match="your desktop lab-002 is refreshing") as caught:
        choose_desktop(pool, desktops, "ada")
    assert isinstance(caught.value, ServiceUnavailable)
    assert (caught.value.status, caught.value.code) == (503, "desktop_not_ready")
    assert allocation_candidates(pool, desktops, "ada") == ([], False)


def test_a_desktop_being_deleted_is_not_the_users_anymore(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT)
    desktops = [make_desktop(pool, state=S.DELETING, assigned_user="ada"), make_desktop(pool)]
    assert held_desktops(pool, desktops, "ada") == []
    assert choose_desktop(pool, desktops, "ada").desktop == desktops[1]


def test_no_free_desktop_means_try_again_later(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder
) -> None:
    pool = make_pool()
    desktops = [
        make_desktop(pool, state=S.PROVISIONING),
        make_desktop(pool, used_since_refresh=True),
    ]
    with pytest.raises(NoDesktopAvailable, match="no free desktop ready") as caught:
        choose_desktop(pool, desktops, "ada")
    assert (caught.value.status, caught.value.code) == (503, "no_desktop_available")


def test_a_disabled_pool_gives_out_nothing(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT, state=PoolState.DISABLED)
    desktops = [make_desktop(pool), make_desktop(pool, assigned_user="ada")]
    with pytest.raises(PoolUnavailable, match="is disabled") as caught:
        choose_desktop(pool, desktops, "ada")
    assert isinstance(caught.value, Conflict)
    assert (caught.value.status, caught.value.code) == (409, "pool_unavailable")
    assert allocation_candidates(pool, desktops, "ada") == ([], False)


@pytest.mark.parametrize("kind", list(PoolKind))
def test_a_draining_pool_only_gives_back_what_users_hold(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, kind: PoolKind
) -> None:
    pool = make_pool(kind=kind, state=PoolState.DRAINING)
    desktops = [make_desktop(pool), make_desktop(pool, state=S.IN_USE, assigned_user="ada")]
    assert choose_desktop(pool, desktops, "ada").desktop == desktops[1]
    with pytest.raises(PoolUnavailable, match="is draining"):
        choose_desktop(pool, desktops, "bob")


def test_the_order_does_not_depend_on_the_input_order(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    same_time = now - timedelta(hours=1)
    desktops = [make_desktop(pool, created_at=same_time) for _ in range(6)]
    desktops += [make_desktop(pool, created_at=same_time - timedelta(minutes=1))]
    expected = ["lab-007", "lab-001", "lab-002", "lab-003", "lab-004", "lab-005", "lab-006"]
    rng = random.Random(7)
    for _ in range(20):
        rng.shuffle(desktops)
        assert names(free_desktops(pool, desktops)) == expected
        assert choose_desktop(pool, desktops, "ada").desktop.name == "lab-007"


def test_a_users_own_desktops_come_in_use_first_then_ready(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT)
    desktops = [
        make_desktop(pool, state=S.FAILED, assigned_user="ada"),
        make_desktop(pool, assigned_user="ada"),
        make_desktop(pool, state=S.IN_USE, assigned_user="ada"),
    ]
    assert names(held_desktops(pool, desktops, "ada")) == ["lab-003", "lab-002", "lab-001"]
    assert choose_desktop(pool, desktops, "ada").desktop.name == "lab-003"
