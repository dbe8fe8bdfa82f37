"""The desktop state machine: legal paths, what each event records, and illegal events."""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

import pytest
from tests.support.pool_builders import (
    DesktopBuilder,
    PoolBuilder,
)

from deskpool.area_settings import declare_area_settings
from deskpool.config import SettingRegistry, declare_core_settings
from deskpool.desktops.states import (
    EVENT_SOURCES,
    EVENT_TARGETS,
    IN_FLIGHT_STATES,
    TRANSITIONS,
    WAIT_TIMEOUT_SETTINGS,
    AgentReady,
    Allocated,
    Assigned,
    Cloned,
    Delete,
    DesktopEvent,
    Failed,
    IllegalTransition,
    PowerOff,
    PowerUp,
    Refresh,
    Refreshed,
    Released,
    Replace,
    Reserved,
    Retry,
    SessionClosed,
    SessionOpened,
    Started,
    Unassigned,
    WindowsReady,
    can_take,
    events_from,
    provisioning_steps,
    transition,
)
from deskpool.errors import Conflict
from deskpool.pools.model import Desktop, DesktopState, OsType, Pool, PoolKind

S = DesktopState

#: One instance of every event, for table-driven tests.
EVERY_EVENT: list[DesktopEvent] = [
    Cloned("vm-1", "tpl"),
    Started(),
    AgentReady(),
    WindowsReady(),
    Allocated("ada"),
    SessionOpened(),
    SessionClosed(),
    Released(),
    Assigned("ada"),
    Unassigned(),
    PowerOff(),
    PowerUp(),
    Reserved("ada"),
    Refresh(),
    Refreshed("vm-2", "tpl"),
    Replace(),
    Retry(),
    Failed("boom"),
    Delete(),
]


def run(desktop: Desktop, pool: Pool, now: datetime, *events: DesktopEvent) -> Desktop:
    for event in events:
        desktop = transition(desktop, event, pool=pool, now=now)
    return desktop


def test_every_event_is_in_the_tables() -> None:
    assert {type(event) for event in EVERY_EVENT} == set(EVENT_SOURCES) == set(EVENT_TARGETS)


@pytest.mark.parametrize(
    ("os_type", "steps"),
    [
        (OsType.LINUX, [S.PROVISIONING, S.STARTING, S.WAITING_FOR_AGENT]),
        (OsType.WINDOWS, [S.PROVISIONING, S.STARTING, S.WAITING_FOR_AGENT, S.WAITING_FOR_WINDOWS]),
    ],
)
def test_provisioning_walks_the_steps_of_the_os(
    make_pool: PoolBuilder,
    make_desktop: DesktopBuilder,
    now: datetime,
    os_type: OsType,
    steps: list[DesktopState],
) -> None:
    pool = make_pool(os_type=os_type)
    desktop = make_desktop(pool, state=S.PROVISIONING)
    assert list(provisioning_steps(os_type)) == steps
    seen = [desktop.state]
    for event in (Cloned("101", "tpl-ubuntu"), Started(), AgentReady(), WindowsReady()):
        if desktop.state is S.READY:
            break
        desktop = transition(desktop, event, pool=pool, now=now)
        seen.append(desktop.state)
    assert seen == [*steps, S.READY]
    assert desktop.vm_id == "101"
    assert desktop.template == "tpl-ubuntu"
    assert desktop.state_changed_at == now


def test_linux_desktops_never_wait_for_windows(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    desktop = make_desktop(pool, state=S.WAITING_FOR_AGENT)
    assert transition(desktop, AgentReady(), pool=pool, now=now).state is S.READY


def test_the_wait_steps_name_declared_timeout_settings() -> None:
    registry = SettingRegistry()
    declare_core_settings(registry)
    declare_area_settings(registry)
    assert set(WAIT_TIMEOUT_SETTINGS) == {S.WAITING_FOR_AGENT, S.WAITING_FOR_WINDOWS}
    for name in WAIT_TIMEOUT_SETTINGS.values():
        assert name in registry


def test_state_changed_at_moves_only_with_the_state(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    desktop = make_desktop(pool, state=S.IN_USE, assigned_user="ada")
    later = now + timedelta(minutes=5)
    opened = transition(desktop, SessionOpened(), pool=pool, now=later)
    assert opened.in_session
    assert opened.state_changed_at == desktop.state_changed_at
    closed = transition(opened, SessionClosed(), pool=pool, now=later)
    assert not closed.in_session
    assert closed.state is S.IN_USE


def test_allocation_lends_the_desktop_and_marks_it_used(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    desktop = transition(make_desktop(pool), Allocated("ada"), pool=pool, now=now)
    assert desktop.state is S.IN_USE
    assert desktop.assigned_user == "ada"
    assert desktop.used_since_refresh
    again = transition(desktop, Allocated("ada"), pool=pool, now=now)
    assert again == desktop


def test_a_held_desktop_is_not_allocated_to_someone_else(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT)
    in_use = make_desktop(pool, state=S.IN_USE, assigned_user="ada")
    with pytest.raises(IllegalTransition, match="assigned to another user"):
        transition(in_use, Allocated("bob"), pool=pool, now=now)
    owned = make_desktop(pool, assigned_user="ada", used_since_refresh=True)
    with pytest.raises(IllegalTransition, match="assigned to another user"):
        transition(owned, Allocated("bob"), pool=pool, now=now)
    assert transition(owned, Allocated("ada"), pool=pool, now=now).state is S.IN_USE


def test_a_used_desktop_must_be_refreshed_before_anyone_else_gets_it(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    used = make_desktop(pool, used_since_refresh=True)
    with pytest.raises(IllegalTransition, match="must be refreshed first"):
        transition(used, Allocated("bob"), pool=pool, now=now)


def test_logoff_keeps_a_persistent_desktop_for_its_user(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT)
    desktop = make_desktop(pool, state=S.IN_USE, assigned_user="ada", in_session=True)
    after = transition(desktop, Released(), pool=pool, now=now)
    assert (after.state, after.assigned_user, after.in_session) == (S.READY, "ada", False)


def test_logoff_rebuilds_a_non_persistent_desktop(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    desktop = make_desktop(
        pool, state=S.IN_USE, assigned_user="ada", in_session=True, used_since_refresh=True
    )
    after = transition(desktop, Released(), pool=pool, now=now)
    assert (after.state, after.assigned_user, after.in_session) == (S.REFRESHING, None, False)
    rebuilt = transition(after, Refreshed("202", "tpl-new"), pool=pool, now=now)
    assert rebuilt.state is S.STARTING
    assert (rebuilt.vm_id, rebuilt.template) == ("202", "tpl-new")
    assert not rebuilt.used_since_refresh


def test_a_failure_keeps_the_step_and_the_error(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    desktop = make_desktop(pool, state=S.WAITING_FOR_AGENT, failure_count=2)
    failed = transition(desktop, Failed("timeout"), pool=pool, now=now)
    assert failed.state is S.FAILED
    assert failed.failed_step is S.WAITING_FOR_AGENT
    assert failed.last_error == "timeout"
    assert failed.failure_count == 3
    assert failed.last_failed_at == now
    assert failed.state_changed_at == now


def test_reaching_ready_clears_the_failure_history(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    desktop = make_desktop(
        pool,
        state=S.FAILED,
        failed_step=S.WAITING_FOR_AGENT,
        last_error="timeout",
        failure_count=3,
        last_failed_at=now,
    )
    retried = transition(desktop, Retry(), pool=pool, now=now)
    assert retried.state is S.PROVISIONING
    assert retried.failure_count == 3
    ready = run(retried, pool, now, Cloned("1", "t"), Started(), AgentReady())
    assert ready.state is S.READY
    assert (ready.failure_count, ready.failed_step, ready.last_error) == (0, None, None)
    assert ready.last_failed_at == now


def test_a_failed_deletion_retries_the_deletion(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    deleting = make_desktop(pool, state=S.DELETING)
    failed = transition(deleting, Failed("VM locked"), pool=pool, now=now)
    assert failed.failed_step is S.DELETING
    assert transition(failed, Retry(), pool=pool, now=now).state is S.DELETING


def test_losing_the_vm_or_session_keeps_only_a_persistent_owner(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    for kind, owner in ((PoolKind.PERSISTENT, "ada"), (PoolKind.NON_PERSISTENT, None)):
        pool = make_pool(kind=kind)
        desktop = make_desktop(pool, state=S.IN_USE, assigned_user="ada", in_session=True)
        for event in (Failed("VM missing"), Replace()):
            after = transition(desktop, event, pool=pool, now=now)
            assert after.assigned_user == owner
            assert not after.in_session


def test_replacing_forgets_the_vanished_vm(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    after = transition(make_desktop(pool, used_since_refresh=True), Replace(), pool=pool, now=now)
    assert after.state is S.PROVISIONING
    assert (after.vm_id, after.template, after.used_since_refresh) == (None, None, False)


def test_assignment_is_for_persistent_pools(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    persistent = make_pool(kind=PoolKind.PERSISTENT)
    desktop = make_desktop(persistent, state=S.PROVISIONING)
    assigned = transition(desktop, Assigned("ada"), pool=persistent, now=now)
    assert (assigned.state, assigned.assigned_user) == (S.PROVISIONING, "ada")
    with pytest.raises(IllegalTransition, match="assigned to another user"):
        transition(assigned, Assigned("bob"), pool=persistent, now=now)
    unassigned = transition(assigned, Unassigned(), pool=persistent, now=now)
    assert unassigned.assigned_user is None
    shared = make_pool(kind=PoolKind.NON_PERSISTENT)
    with pytest.raises(IllegalTransition, match="only persistent pools"):
        transition(make_desktop(shared), Assigned("ada"), pool=shared, now=now)


def test_a_user_in_session_cannot_be_unassigned(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT)
    desktop = make_desktop(pool, assigned_user="ada", in_session=True)
    with pytest.raises(IllegalTransition, match="a session is open"):
        transition(desktop, Unassigned(), pool=pool, now=now)


@pytest.mark.parametrize("event", EVERY_EVENT, ids=lambda event: event.name)
def test_events_outside_their_source_states_are_illegal(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime, event: DesktopEvent
) -> None:
    pool = make_pool(kind=PoolKind.PERSISTENT, os_type=OsType.WINDOWS)
    for state in DesktopState:
        desktop = make_desktop(
            pool, state=state, assigned_user="ada" if state is S.IN_USE else None
        )
        if state in EVENT_SOURCES[type(event)]:
            assert can_take(desktop, event)
            after = transition(desktop, event, pool=pool, now=now)
            assert after.state in (EVENT_TARGETS[type(event)] or {state})
            continue
        assert not can_take(desktop, event)
        with pytest.raises(IllegalTransition) as caught:
            transition(desktop, event, pool=pool, now=now)
        error = caught.value
        assert isinstance(error, Conflict)
        assert (error.status, error.code) == (409, "illegal_transition")
        assert error.extra == {"desktop_id": str(desktop.id), "state": state, "event": event.name}
        assert f"cannot take {event.name!r} while {state}" in error.detail


def test_deleting_is_final_but_for_a_failure(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    assert TRANSITIONS[S.DELETING] == {S.FAILED}
    pool = make_pool()
    with pytest.raises(IllegalTransition):
        transition(make_desktop(pool, state=S.DELETING), Delete(), pool=pool, now=now)


def test_every_state_is_reachable_from_provisioning() -> None:
    reached = {S.PROVISIONING}
    frontier = [S.PROVISIONING]
    while frontier:
        for target in TRANSITIONS[frontier.pop()]:
            if target not in reached:
                reached.add(target)
                frontier.append(target)
    assert reached == set(DesktopState)


def test_the_state_graph() -> None:
    assert TRANSITIONS[S.READY] == {
        S.IN_USE,
        S.REFRESHING,
        S.PROVISIONING,
        S.FAILED,
        S.DELETING,
        S.POWERED_OFF,
    }
    assert TRANSITIONS[S.POWERED_OFF] == {S.STARTING, S.REFRESHING, S.DELETING}
    assert TRANSITIONS[S.IN_USE] == {
        S.READY,
        S.REFRESHING,
        S.PROVISIONING,
        S.FAILED,
        S.DELETING,
    }
    assert TRANSITIONS[S.FAILED] == {S.PROVISIONING, S.DELETING}
    for state in IN_FLIGHT_STATES:
        assert {S.FAILED, S.DELETING} <= TRANSITIONS[state]


def test_a_schedule_powers_only_a_free_clean_ready_desktop_off(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    ready = make_desktop(pool, state=S.READY, vm_id="vm-1")
    off = transition(ready, PowerOff(), pool=pool, now=now)
    assert (off.state, off.state_changed_at) == (S.POWERED_OFF, now)
    up = transition(off, PowerUp(), pool=pool, now=now)
    assert up.state is S.STARTING
    assert up.vm_id == "vm-1"
    used = make_desktop(pool, state=S.READY, vm_id="vm-2", used_since_refresh=True)
    with pytest.raises(IllegalTransition, match="not refreshed"):
        transition(used, PowerOff(), pool=pool, now=now)
    with pytest.raises(IllegalTransition):
        transition(make_desktop(pool, state=S.IN_USE, vm_id="vm-3"), PowerOff(), pool=pool, now=now)


def test_events_from_lists_what_an_operator_can_do() -> None:
    assert events_from(S.FAILED) == ["assigned", "delete", "retry", "unassigned"]
    assert "allocated" in events_from(S.READY)
    assert events_from(S.DELETING) == ["failed"]


def test_a_desktop_of_another_pool_is_a_programming_error(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    desktop = make_desktop(make_pool())
    with pytest.raises(ValueError, match="is not in pool"):
        transition(desktop, Delete(), pool=make_pool(id=UUID(int=7)), now=now)


def test_a_desktop_on_its_way_is_reserved_to_one_user_and_stays_on_its_way(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    for state in (S.PROVISIONING, S.STARTING, S.WAITING_FOR_AGENT, S.REFRESHING):
        reserved = transition(make_desktop(pool, state=state), Reserved("ada"), pool=pool, now=now)
        assert (reserved.state, reserved.assigned_user) == (state, "ada")
        with pytest.raises(IllegalTransition):
            transition(reserved, Reserved("bob"), pool=pool, now=now)
    with pytest.raises(IllegalTransition):
        transition(make_desktop(pool, state=S.READY), Reserved("ada"), pool=pool, now=now)
