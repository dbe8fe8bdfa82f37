"""A phase's warnings and forced log-offs, planned (pure): who is warned, when, and withdrawn.

:func:`deskpool.schedules.logoffs.plan_logoffs` warns the sessions in the phase's scope once,
logs them off at the stored deadline, and withdraws warnings whose session left the scope.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from tests.support.pool_builders import (
    DesktopBuilder,
    PoolBuilder,
)

from deskpool.notices.model import Notice
from deskpool.pools.model import Desktop, DesktopState
from deskpool.schedules.logoffs import (
    IDLE_AFTER,
    NOTICE_REASON,
    ClearWarning,
    LogoffAction,
    LogoffSession,
    WarnSession,
    notice_source,
    plan_logoffs,
)
from deskpool.schedules.model import Logoff, LogoffScope

ALICE = "00000000-0000-0000-0000-00000000a11c"
BOB = "00000000-0000-0000-0000-000000000b0b"
SOURCE = notice_source(uuid.UUID(int=7))
NIGHT = Logoff(scope=LogoffScope.DISCONNECTED, wait_seconds=600, message="Closing at 20:00")


def notice(desktop: Desktop, user: str, ends_at: datetime, source: str = SOURCE) -> Notice:
    """An open capacity-schedule notice on ``desktop``."""
    return Notice(
        id=uuid.uuid4(),
        desktop_id=desktop.id,
        pool_id=desktop.pool_id,
        user_id=uuid.UUID(user),
        ends_at=ends_at,
        reason=NOTICE_REASON,
        message=NIGHT.message,
        source=source,
        created_at=ends_at - timedelta(seconds=NIGHT.wait_seconds),
    )


def kinds(actions: tuple[LogoffAction, ...]) -> list[tuple[str, uuid.UUID]]:
    return [(action.kind, action.desktop_id) for action in actions]


def test_a_disconnected_session_is_warned_once_then_logged_off_at_the_stored_deadline(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    away = make_desktop(pool, 1, state=DesktopState.IN_USE, assigned_user=ALICE)
    here = make_desktop(pool, 2, state=DesktopState.IN_USE, assigned_user=BOB, in_session=True)
    free = make_desktop(pool, 3)
    desktops = [away, here, free]

    [warn] = plan_logoffs(desktops, [], NIGHT, source=SOURCE, last_input={}, now=now)
    assert isinstance(warn, WarnSession)
    assert (warn.desktop_id, warn.user_id, warn.source) == (away.id, ALICE, SOURCE)
    assert warn.ends_at == now + timedelta(seconds=600)
    assert warn.message == "Closing at 20:00"

    # Warned: later passes before the deadline do nothing (the deadline is never moved).
    given = notice(away, ALICE, warn.ends_at)
    later = now + timedelta(seconds=599)
    assert plan_logoffs(desktops, [given], NIGHT, source=SOURCE, last_input={}, now=later) == ()

    # At the deadline the session is logged off.
    [logoff] = plan_logoffs(
        desktops, [given], NIGHT, source=SOURCE, last_input={}, now=warn.ends_at
    )
    assert isinstance(logoff, LogoffSession)
    assert (logoff.desktop_id, logoff.notice_id) == (away.id, given.id)


def test_a_user_who_reconnects_has_the_warning_withdrawn(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    back = make_desktop(pool, 1, state=DesktopState.IN_USE, assigned_user=ALICE, in_session=True)
    given = notice(back, ALICE, now - timedelta(seconds=1))
    [clear] = plan_logoffs([back], [given], NIGHT, source=SOURCE, last_input={}, now=now)
    assert isinstance(clear, ClearWarning)
    assert (clear.notice_id, clear.source) == (given.id, SOURCE)


def test_warnings_are_withdrawn_when_the_phase_no_longer_logs_off_or_the_user_left(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    away = make_desktop(pool, 1, state=DesktopState.IN_USE, assigned_user=ALICE)
    logged_off = make_desktop(pool, 2, state=DesktopState.REFRESHING)
    gone = make_desktop(pool, 3, state=DesktopState.IN_USE, assigned_user=BOB)
    notices = [
        notice(away, ALICE, now),
        notice(logged_off, ALICE, now),
        notice(gone, BOB, now),
    ]
    # The next phase has no logoff (or the schedule was removed): every warning goes.
    cleared = plan_logoffs([away, logged_off], notices, None, source=None, last_input={}, now=now)
    assert sorted(kinds(cleared)) == sorted(
        ("schedule_clear_warning", desktop.id) for desktop in (away, logged_off, gone)
    )
    # Under the phase: the desktop now free has its warning withdrawn; another user's warning
    # on a desktop is withdrawn and its own user warned.
    taken_over = notice(away, BOB, now)
    actions = plan_logoffs(
        [away, logged_off], [taken_over, notices[1]], NIGHT, source=SOURCE, last_input={}, now=now
    )
    assert sorted(kinds(actions)) == sorted(
        [
            ("schedule_clear_warning", away.id),
            ("schedule_warn", away.id),
            ("schedule_clear_warning", logged_off.id),
        ]
    )


def test_scope_idle_also_takes_connected_sessions_without_input_and_activity_clears_them(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder, now: datetime
) -> None:
    pool = make_pool()
    idle = make_desktop(pool, 1, state=DesktopState.IN_USE, assigned_user=ALICE, in_session=True)
    busy = make_desktop(pool, 2, state=DesktopState.IN_USE, assigned_user=BOB, in_session=True)
    last_input = {idle.id: now - IDLE_AFTER, busy.id: now - timedelta(seconds=5)}
    scope_idle = Logoff(scope=LogoffScope.IDLE, wait_seconds=0, message="")
    actions = plan_logoffs(
        [idle, busy], [], scope_idle, source=SOURCE, last_input=last_input, now=now
    )
    assert kinds(actions) == [("schedule_warn", idle.id)]
    # The disconnected scope leaves connected sessions alone, idle or not.
    assert (
        plan_logoffs([idle, busy], [], NIGHT, source=SOURCE, last_input=last_input, now=now) == ()
    )
    # Input after the warning takes the session out of scope: the warning is withdrawn.
    given = notice(idle, ALICE, now)
    typed = {idle.id: now + timedelta(seconds=1)}
    later = now + timedelta(seconds=2)
    actions = plan_logoffs([idle], [given], scope_idle, source=SOURCE, last_input=typed, now=later)
    assert kinds(actions) == [("schedule_clear_warning", idle.id)]
