"""The desktop state machine.

A desktop is provisioned through named steps, then handed out and taken back::

    provisioning -> starting -> waiting_for_agent -> [waiting_for_windows] -> ready
    ready -> in_use -> ready                    (persistent: the user keeps the desktop)
    ready -> in_use -> refreshing -> starting   (non-persistent: rebuilt after logoff)
    ready -> powered_off -> starting            (a schedule powers idle desktops off; the
                                                 schedule or a user opening one powers it on)
    powered_off -> refreshing -> starting       (rebuilt while powered off: a rollout at night)
    provisioning ... waiting_for_*              (a free desktop on its way is reserved to a
                                                 user who opened the pool: handed to him ready)
    any step -> failed -> provisioning          (retry; a failed deletion retries the deletion)
    almost anything -> deleting

``waiting_for_windows`` is a step of Windows pools only (Sysprep/OOBE). Each waiting step
fails when its timeout passes (SPEC §7, §8.5); :data:`WAIT_TIMEOUT_SETTINGS` names the setting
of each. A failed desktop keeps the step it failed at and the error.

Something that happens to a desktop is an *event* (a small frozen dataclass such as
:class:`Cloned` or :class:`Failed`); :func:`transition` applies one and returns the new desktop,
or raises :class:`IllegalTransition` (HTTP 409) when the event is not legal in the desktop's
state. :data:`EVENT_SOURCES` lists the states each event is legal in, for a repository to
guard its ``UPDATE ... WHERE state = ANY(...)`` with the same table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import ClassVar

from deskpool.errors import Conflict
from deskpool.pools.model import Desktop, DesktopState, OsType, Pool, PoolKind

S = DesktopState

#: The steps a new desktop goes through before it is ready, for each operating system.
PROVISIONING_STEPS: Mapping[OsType, tuple[DesktopState, ...]] = {
    OsType.LINUX: (S.PROVISIONING, S.STARTING, S.WAITING_FOR_AGENT),
    OsType.WINDOWS: (S.PROVISIONING, S.STARTING, S.WAITING_FOR_AGENT, S.WAITING_FOR_WINDOWS),
}

#: The configuration variable holding the timeout of each waiting step (SPEC §8.5).
WAIT_TIMEOUT_SETTINGS: Mapping[DesktopState, str] = {
    S.WAITING_FOR_AGENT: "GUEST_AGENT_WAIT_TIMEOUT",
    S.WAITING_FOR_WINDOWS: "WINDOWS_READY_WAIT_TIMEOUT",
}

#: States in which a job is working on the desktop (it is neither usable nor failed).
IN_FLIGHT_STATES = frozenset(
    {S.PROVISIONING, S.STARTING, S.WAITING_FOR_AGENT, S.WAITING_FOR_WINDOWS, S.REFRESHING}
)


def provisioning_steps(os_type: OsType) -> tuple[DesktopState, ...]:
    """Return the steps, in order, that a desktop of ``os_type`` goes through before ``ready``."""
    return PROVISIONING_STEPS[os_type]


class IllegalTransition(Conflict):
    """An event is not legal in the desktop's current state (HTTP 409)."""

    code = "illegal_transition"
    title = "Illegal desktop state transition"

    def __init__(self, desktop: Desktop, event: DesktopEvent, why: str | None = None) -> None:
        self.desktop_id = desktop.id
        self.state = desktop.state
        self.event = event.name
        detail = f"desktop {desktop.name} cannot take {event.name!r} while {desktop.state}"
        super().__init__(
            f"{detail}: {why}" if why else detail,
            extra={"desktop_id": str(desktop.id), "state": str(desktop.state), "event": event.name},
        )


# --------------------------------------------------------------------------- provisioning


@dataclass(frozen=True, slots=True)
class Cloned:
    """The VM was cloned from the template; it is powered on next."""

    name: ClassVar[str] = "cloned"
    vm_id: str
    template: str


@dataclass(frozen=True, slots=True)
class Started:
    """The VM was powered on; provisioning waits for its guest agent next."""

    name: ClassVar[str] = "started"


@dataclass(frozen=True, slots=True)
class AgentReady:
    """The guest agent answered; Windows desktops then wait for Sysprep/OOBE."""

    name: ClassVar[str] = "agent_ready"


@dataclass(frozen=True, slots=True)
class WindowsReady:
    """Windows finished Sysprep/OOBE."""

    name: ClassVar[str] = "windows_ready"


# --------------------------------------------------------------------------- use


@dataclass(frozen=True, slots=True)
class Allocated:
    """The desktop was handed to ``user`` for a session (again, when they reconnect)."""

    name: ClassVar[str] = "allocated"
    user: str


@dataclass(frozen=True, slots=True)
class SessionOpened:
    """A remote desktop connection to the desktop opened."""

    name: ClassVar[str] = "session_opened"


@dataclass(frozen=True, slots=True)
class SessionClosed:
    """The remote desktop connection closed; the user may still be logged on and come back."""

    name: ClassVar[str] = "session_closed"


@dataclass(frozen=True, slots=True)
class Released:
    """The user logged off: a persistent desktop is ready again, a non-persistent one rebuilt."""

    name: ClassVar[str] = "released"


@dataclass(frozen=True, slots=True)
class Assigned:
    """An administrator assigned the desktop of a persistent pool to ``user``."""

    name: ClassVar[str] = "assigned"
    user: str


@dataclass(frozen=True, slots=True)
class Unassigned:
    """The desktop's user was removed; it is refreshed before anyone else gets it."""

    name: ClassVar[str] = "unassigned"


@dataclass(frozen=True, slots=True)
class PowerOff:
    """A schedule powers the idle, ready desktop off (its VM is shut down next).

    A free desktop must be clean; a persistent pool's desktop may be its owner's (with no
    session): it stays assigned to them while powered off.
    """

    name: ClassVar[str] = "power_off"


@dataclass(frozen=True, slots=True)
class PowerUp:
    """The powered-off desktop is needed: its VM is started and provisioning waits for it.

    :ivar user: the user it is started for (start on connect): it is reserved to them, so
        nobody else gets it; ``None`` when the schedule needs it.
    """

    name: ClassVar[str] = "power_up"
    user: str | None = None


@dataclass(frozen=True, slots=True)
class Reserved:
    """A free desktop on its way to ready is set aside for ``user`` (he opened its pool).

    Being built, started or rebuilt, it stays on its way; once ready it is handed to him.
    """

    name: ClassVar[str] = "reserved"
    user: str


# --------------------------------------------------------------------------- repair


@dataclass(frozen=True, slots=True)
class Refresh:
    """Rebuild or reset the desktop to the pool's template."""

    name: ClassVar[str] = "refresh"


@dataclass(frozen=True, slots=True)
class Refreshed:
    """The rebuilt VM exists (possibly with a new id); it is powered on next."""

    name: ClassVar[str] = "refreshed"
    vm_id: str
    template: str


@dataclass(frozen=True, slots=True)
class Replace:
    """The desktop's VM is gone; provision a new one under the same name."""

    name: ClassVar[str] = "replace"


@dataclass(frozen=True, slots=True)
class Retry:
    """Try the failed desktop again: provision it anew, or retry its deletion.

    A retried provisioning keeps ``vm_id``: the provisioning job first destroys that VM, and any
    other VM tagged with the desktop's id, before it clones a new one.
    """

    name: ClassVar[str] = "retry"


@dataclass(frozen=True, slots=True)
class Failed:
    """The current step failed (or timed out) with ``error``, short and without secrets."""

    name: ClassVar[str] = "failed"
    error: str


@dataclass(frozen=True, slots=True)
class Delete:
    """Destroy the desktop's VM, then its record."""

    name: ClassVar[str] = "delete"


#: Anything that can happen to a desktop.
DesktopEvent = (
    Cloned
    | Started
    | AgentReady
    | WindowsReady
    | Allocated
    | SessionOpened
    | SessionClosed
    | Released
    | Assigned
    | Unassigned
    | PowerOff
    | PowerUp
    | Reserved
    | Refresh
    | Refreshed
    | Replace
    | Retry
    | Failed
    | Delete
)

_ALL = frozenset(DesktopState)

#: The states each event is legal in.
EVENT_SOURCES: Mapping[type[DesktopEvent], frozenset[DesktopState]] = {
    Cloned: frozenset({S.PROVISIONING}),
    Started: frozenset({S.STARTING}),
    AgentReady: frozenset({S.WAITING_FOR_AGENT}),
    WindowsReady: frozenset({S.WAITING_FOR_WINDOWS}),
    Allocated: frozenset({S.READY, S.IN_USE}),
    SessionOpened: frozenset({S.IN_USE}),
    SessionClosed: frozenset({S.IN_USE}),
    Released: frozenset({S.IN_USE}),
    Assigned: _ALL - {S.DELETING},
    Unassigned: _ALL - {S.IN_USE, S.DELETING},
    PowerOff: frozenset({S.READY}),
    PowerUp: frozenset({S.POWERED_OFF}),
    Reserved: IN_FLIGHT_STATES,
    Refresh: frozenset({S.READY, S.POWERED_OFF}),
    Refreshed: frozenset({S.REFRESHING}),
    Replace: frozenset({S.READY, S.IN_USE}),
    Retry: frozenset({S.FAILED}),
    Failed: IN_FLIGHT_STATES | {S.READY, S.IN_USE, S.DELETING},
    Delete: _ALL - {S.DELETING},
}

#: The states each event can lead to (from any of its sources).
EVENT_TARGETS: Mapping[type[DesktopEvent], frozenset[DesktopState]] = {
    Cloned: frozenset({S.STARTING}),
    Started: frozenset({S.WAITING_FOR_AGENT}),
    AgentReady: frozenset({S.WAITING_FOR_WINDOWS, S.READY}),
    WindowsReady: frozenset({S.READY}),
    Allocated: frozenset({S.IN_USE}),
    SessionOpened: frozenset({S.IN_USE}),
    SessionClosed: frozenset({S.IN_USE}),
    Released: frozenset({S.READY, S.REFRESHING}),
    Assigned: frozenset(),
    Unassigned: frozenset(),
    PowerOff: frozenset({S.POWERED_OFF}),
    PowerUp: frozenset({S.STARTING}),
    Reserved: frozenset(),
    Refresh: frozenset({S.REFRESHING}),
    Refreshed: frozenset({S.STARTING}),
    Replace: frozenset({S.PROVISIONING}),
    Retry: frozenset({S.PROVISIONING, S.DELETING}),
    Failed: frozenset({S.FAILED}),
    Delete: frozenset({S.DELETING}),
}


def _state_graph() -> dict[DesktopState, frozenset[DesktopState]]:
    graph: dict[DesktopState, set[DesktopState]] = {state: set() for state in DesktopState}
    for event, sources in EVENT_SOURCES.items():
        for source in sources:
            targets = EVENT_TARGETS[event] or {source}
            graph[source].update(target for target in targets if target is not source)
    return {state: frozenset(targets) for state, targets in graph.items()}


#: Every state change the machine allows: state -> the states it can move to.
TRANSITIONS: Mapping[DesktopState, frozenset[DesktopState]] = _state_graph()


def can_take(desktop: Desktop, event: DesktopEvent) -> bool:
    """Whether ``event`` is legal in the desktop's state (not counting per-user checks)."""
    return desktop.state in EVENT_SOURCES[type(event)]


def events_from(state: DesktopState) -> list[str]:
    """Return the names of the events legal in ``state``, for display."""
    return sorted(event.name for event, sources in EVENT_SOURCES.items() if state in sources)


def _ready(desktop: Desktop) -> Desktop:
    """Enter ``ready``: the failure history that drives the backoff starts over."""
    return replace(desktop, state=S.READY, failure_count=0, failed_step=None, last_error=None)


def _user_after_loss(desktop: Desktop, pool: Pool) -> str | None:
    """The assigned user once the desktop's VM or session is lost: kept only when persistent."""
    return desktop.assigned_user if pool.kind is PoolKind.PERSISTENT else None


def transition(desktop: Desktop, event: DesktopEvent, *, pool: Pool, now: datetime) -> Desktop:
    """Apply ``event`` to ``desktop`` and return the desktop after it.

    :param pool: the desktop's pool (its kind and operating system decide some targets).
    :param now: the time of the event; it becomes ``state_changed_at`` when the state changes.
    :raises IllegalTransition: when the event is not legal in the desktop's state, or not for
        this desktop (allocating a desktop someone else holds, assigning in a non-persistent
        pool).
    :raises ValueError: when ``pool`` is not the desktop's pool (a programming error).
    """
    if desktop.pool_id != pool.id:
        raise ValueError(f"desktop {desktop.name} is not in pool {pool.name}")
    if desktop.state not in EVENT_SOURCES[type(event)]:
        raise IllegalTransition(desktop, event)
    after = _apply(desktop, event, pool, now)
    if after.state is not desktop.state:
        after = replace(after, state_changed_at=now)
    return after


def _apply(desktop: Desktop, event: DesktopEvent, pool: Pool, now: datetime) -> Desktop:
    """Return the desktop after ``event``, whose source state has been checked."""
    match event:
        case Cloned(vm_id=vm_id, template=template):
            return replace(desktop, state=S.STARTING, vm_id=vm_id, template=template)
        case Started():
            return replace(desktop, state=S.WAITING_FOR_AGENT)
        case AgentReady():
            if pool.is_windows:
                return replace(desktop, state=S.WAITING_FOR_WINDOWS)
            return _ready(desktop)
        case WindowsReady():
            return _ready(desktop)
        case Allocated(user=user):
            if desktop.assigned_user not in (None, user):
                raise IllegalTransition(desktop, event, "it is assigned to another user")
            if (
                desktop.state is S.READY
                and desktop.used_since_refresh
                and desktop.assigned_user != user
            ):
                raise IllegalTransition(desktop, event, "it must be refreshed first")
            return replace(desktop, state=S.IN_USE, assigned_user=user, used_since_refresh=True)
        case SessionOpened():
            return replace(desktop, in_session=True)
        case SessionClosed():
            return replace(desktop, in_session=False)
        case Released():
            if pool.kind is PoolKind.PERSISTENT:
                return replace(desktop, state=S.READY, in_session=False)
            return replace(desktop, state=S.REFRESHING, in_session=False, assigned_user=None)
        case Assigned(user=user):
            if pool.kind is not PoolKind.PERSISTENT:
                raise IllegalTransition(desktop, event, "only persistent pools assign desktops")
            if desktop.assigned_user not in (None, user):
                raise IllegalTransition(desktop, event, "it is assigned to another user")
            return replace(desktop, assigned_user=user)
        case Unassigned():
            if desktop.in_session:
                raise IllegalTransition(desktop, event, "a session is open")
            return replace(desktop, assigned_user=None)
        case PowerOff():
            owned = pool.kind is PoolKind.PERSISTENT and desktop.assigned_user is not None
            if desktop.in_session or (desktop.used_since_refresh and not owned):
                raise IllegalTransition(desktop, event, "it is in use or not refreshed")
            return replace(desktop, state=S.POWERED_OFF)
        case PowerUp(user=user):
            if user is None:
                return replace(desktop, state=S.STARTING)
            if desktop.assigned_user not in (None, user):
                raise IllegalTransition(desktop, event, "it is assigned to another user")
            return replace(desktop, state=S.STARTING, assigned_user=user)
        case Reserved(user=user):
            if desktop.assigned_user not in (None, user):
                raise IllegalTransition(desktop, event, "it is assigned to another user")
            return replace(desktop, assigned_user=user)
        case Refresh():
            return replace(
                desktop,
                state=S.REFRESHING,
                in_session=False,
                assigned_user=_user_after_loss(desktop, pool),
            )
        case Refreshed(vm_id=vm_id, template=template):
            return replace(
                desktop, state=S.STARTING, vm_id=vm_id, template=template, used_since_refresh=False
            )
        case Replace():
            return replace(
                desktop,
                state=S.PROVISIONING,
                vm_id=None,
                template=None,
                in_session=False,
                used_since_refresh=False,
                assigned_user=_user_after_loss(desktop, pool),
            )
        case Retry():
            if desktop.failed_step is S.DELETING:
                return replace(desktop, state=S.DELETING)
            return replace(desktop, state=S.PROVISIONING, used_since_refresh=False)
        case Failed(error=error):
            return replace(
                desktop,
                state=S.FAILED,
                failed_step=desktop.state,
                last_error=error,
                failure_count=desktop.failure_count + 1,
                last_failed_at=now,
                in_session=False,
                assigned_user=_user_after_loss(desktop, pool),
            )
        case Delete():
            return replace(desktop, state=S.DELETING, in_session=False)
