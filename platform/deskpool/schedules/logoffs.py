"""A phase's warnings and forced log-offs, planned from what a pool's desktops are doing (pure).

A phase with :class:`~deskpool.schedules.model.Logoff` (one that lowers capacity) warns the
user of every session in its scope and logs them off after the wait, so that the desktop
drains and the phase's ``idle`` action (``power_off``) applies to it afterwards:

- a session is in scope when its desktop is ``in_use`` by its user and no remote connection
  is open to it (``disconnected``), or, with scope ``idle``, also when the open connection had
  no input for :data:`IDLE_AFTER` (a connection already asked to close is not counted: the
  log-off of an idle session is under way until its gateway closes it);
- a session in scope without a warning is warned (:class:`WarnSession`): the deadline is
  *now + wait_seconds*, stored with the notice (``desktop_notices.ends_at``) and never moved
  afterwards, so a pass that runs again, on another worker or after a crash, neither repeats
  nor postpones it;
- a warned session still in scope at its deadline is logged off (:class:`LogoffSession`);
- a warned session that left the scope (its user reconnected, or gave input again) has its
  warning withdrawn (:class:`ClearWarning`): it is not logged off, and it is warned afresh,
  with a fresh wait, if it comes back into scope while the phase is in force. So are the
  warnings of a desktop whose user logged off or changed, and every warning of the pool once
  the phase in force has no ``logoff`` (the next phase started, or the schedule was removed).

The reconciler (:mod:`deskpool.reconciliation.reconciler`) plans these with :func:`plan_logoffs` and
applies them with :mod:`deskpool.reconciliation.schedule_apply` in its fenced transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from deskpool.notices.model import Notice
from deskpool.pools.model import Desktop, DesktopState
from deskpool.schedules.model import Logoff, LogoffScope

#: The reason code of a capacity schedule's notices (the console's banner names it).
NOTICE_REASON = "capacity_schedule"

#: A connected session without input for this long is idle (scope ``idle``).
IDLE_AFTER = timedelta(minutes=10)


def notice_source(schedule_id: object) -> str:
    """The ``source`` of a schedule's notices."""
    return f"schedule:{schedule_id}"


@dataclass(frozen=True, slots=True)
class WarnSession:
    """Warn the user of ``desktop_id`` that they are logged off at ``ends_at``."""

    desktop_id: UUID
    user_id: str
    ends_at: datetime
    message: str
    source: str
    reason: str
    kind = "schedule_warn"


@dataclass(frozen=True, slots=True)
class LogoffSession:
    """Log the user of ``desktop_id`` off: the warning ``notice_id`` is due."""

    desktop_id: UUID
    user_id: str
    notice_id: UUID
    source: str
    reason: str
    kind = "schedule_logoff"


@dataclass(frozen=True, slots=True)
class ClearWarning:
    """Withdraw the warning ``notice_id`` of ``desktop_id``."""

    desktop_id: UUID
    notice_id: UUID
    source: str
    reason: str
    kind = "schedule_clear_warning"


LogoffAction = WarnSession | LogoffSession | ClearWarning


def in_scope(
    desktop: Desktop, scope: LogoffScope, last_input_at: datetime | None, now: datetime
) -> bool:
    """Whether the session on ``desktop`` is one the phase logs off (see the module)."""
    if desktop.state is not DesktopState.IN_USE or desktop.assigned_user is None:
        return False
    if not desktop.in_session:
        return True
    return (
        scope is LogoffScope.IDLE
        and last_input_at is not None
        and now - last_input_at >= IDLE_AFTER
    )


def plan_logoffs(
    desktops: Sequence[Desktop],
    notices: Sequence[Notice],
    logoff: Logoff | None,
    *,
    source: str | None,
    last_input: Mapping[UUID, datetime],
    now: datetime,
) -> tuple[LogoffAction, ...]:
    """The warnings, log-offs and withdrawals of one pool's capacity-schedule sessions.

    :param notices: the pool's open notices of reason :data:`NOTICE_REASON`.
    :param logoff: the ``logoff`` of the phase in force (``None``: none, or no phase).
    :param source: the notice source of the pool's schedule (``None``: it has none).
    :param last_input: the last input of each desktop's open connection, by desktop id.
    """
    by_desktop: dict[UUID, list[Notice]] = {}
    for notice in notices:
        by_desktop.setdefault(notice.desktop_id, []).append(notice)
    actions: list[LogoffAction] = []
    for desktop in sorted(desktops, key=lambda d: d.name):
        mine = by_desktop.pop(desktop.id, [])
        wanted = (
            logoff is not None
            and source is not None
            and in_scope(desktop, logoff.scope, last_input.get(desktop.id), now)
        )
        current = None
        for notice in mine:
            if wanted and notice.source == source and str(notice.user_id) == desktop.assigned_user:
                current = notice
            else:
                actions.append(_clear(notice, desktop.name))
        if not wanted or logoff is None or source is None or desktop.assigned_user is None:
            continue
        if current is None:
            actions.append(
                WarnSession(
                    desktop.id,
                    desktop.assigned_user,
                    now + timedelta(seconds=logoff.wait_seconds),
                    logoff.message,
                    source,
                    f"{desktop.name}: the schedule's phase logs {logoff.scope} sessions off "
                    f"after {logoff.wait_seconds} s",
                )
            )
        elif current.ends_at <= now:
            actions.append(
                LogoffSession(
                    desktop.id,
                    desktop.assigned_user,
                    current.id,
                    source,
                    f"{desktop.name}: the schedule's warning ended at "
                    f"{current.ends_at.isoformat()}",
                )
            )
    for left in by_desktop.values():  # desktops gone from the pool
        actions.extend(_clear(notice, str(notice.desktop_id)) for notice in left)
    return tuple(actions)


def _clear(notice: Notice, name: str) -> ClearWarning:
    return ClearWarning(
        notice.desktop_id,
        notice.id,
        notice.source,
        f"{name}: the session is no longer one the schedule's phase logs off",
    )
