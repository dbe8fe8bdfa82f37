"""Use cases of a pool's desktops, one function each: what the API, the CLI and plugins call.

Administrators act on a desktop (power, rebuild, delete) by enqueuing a job of kind
``desktop.<action>`` through :func:`deskpool.desktops.jobs.enqueue_desktop_job`, as
reconciliation does; in a persistent pool they assign a desktop to a user or remove its user.
Each change validates it against the state machine, changes, records its audit event through
the :class:`Actor` and enqueues its job in one transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import asyncpg

from deskpool.actor import Actor
from deskpool.desktops import store as store_desktops
from deskpool.desktops.jobs import enqueue_desktop_job
from deskpool.desktops.states import (
    Assigned,
    Delete,
    DesktopEvent,
    IllegalTransition,
    Refresh,
    Retry,
    Unassigned,
    can_take,
)
from deskpool.desktops.store import DesktopCursor, DesktopRecord
from deskpool.errors import Conflict, LocatedFieldError, ValidationFailed, found
from deskpool.identity import rules
from deskpool.identity import store as identity_store
from deskpool.identity.refusals import audited_refusals
from deskpool.jobs import queue
from deskpool.jobs.model import Job, JobState
from deskpool.pools import store as store_pools
from deskpool.pools.model import Desktop, DesktopState, Pool
from deskpool.pools.store_entitlements import is_entitled

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

S = DesktopState

#: The actions an administrator can ask for, in the order they are documented.
ACTIONS = ("power_on", "power_off", "restart", "rebuild", "delete")

#: States in which the VM exists and no job is working on it: power actions are allowed.
POWER_ACTION_STATES = frozenset({S.READY, S.IN_USE, S.FAILED})
#: The states each power action is allowed in, where they are not POWER_ACTION_STATES: a
#: running desktop (ready, in use) is not powered on, a powered-off or failed one is.
_POWER_STATES = {"power_on": frozenset({S.POWERED_OFF, S.FAILED})}

_POWER_ACTIONS = frozenset({"power_on", "power_off", "restart"})

#: Checks an assignment change on a locked desktop; gives its event and the audit details.
AssignmentChange: TypeAlias = Callable[
    [asyncpg.Connection, Desktop], Awaitable[tuple[DesktopEvent, dict[str, Any]]]
]


class DesktopActionNotAllowed(Conflict):
    """A power action on a desktop whose VM does not exist yet or that a job works on."""

    code = "desktop_action_not_allowed"
    title = "The desktop cannot take this action now"


class PoolNotPersistent(Conflict):
    """Desktops are assigned to users only in persistent pools."""

    code = "pool_not_persistent"
    title = "The desktop's pool is not persistent"


# ---------------------------------------------------------------------------------- rules


def _event_of(desktop: Desktop, action: str) -> DesktopEvent | None:
    """The state-machine event an action will apply; ``None`` for power actions."""
    if action == "delete":
        return Delete()
    if action == "rebuild":
        return Retry() if desktop.state is S.FAILED else Refresh()
    return None


def refuse_action(desktop: Desktop, action: str) -> None:
    """Raise the 409 that ``action`` meets on ``desktop`` now; return if it is allowed.

    :raises DesktopActionNotAllowed: a power action on a desktop without a VM or busy with a
        job.
    :raises IllegalTransition: the state machine refuses the action's event.
    """
    if action in _POWER_ACTIONS:
        states = _POWER_STATES.get(action, POWER_ACTION_STATES)
        if desktop.state not in states or desktop.vm_id is None:
            allowed = ", ".join(sorted(states))
            raise DesktopActionNotAllowed(
                f"desktop {desktop.name} cannot take {action!r} while {desktop.state}: a VM "
                f"must exist and no job work on it (states {allowed})",
                extra={"desktop_id": str(desktop.id), "state": str(desktop.state)},
            )
        return
    event = _event_of(desktop, action)
    if event is not None and not can_take(desktop, event):
        raise IllegalTransition(desktop, event)


def allowed_actions(desktop: Desktop) -> list[str]:
    """The actions ``desktop`` can take now."""
    allowed = []
    for action in ACTIONS:
        try:
            refuse_action(desktop, action)
        except Conflict:
            continue
        allowed.append(action)
    return allowed


async def _locked(connection: asyncpg.Connection, desktop_id: uuid.UUID) -> Desktop:
    record = found(
        await store_desktops.get_desktop_record(connection, desktop_id, for_update=True),
        "desktop",
        desktop_id,
    )
    return record.desktop


async def _active_job(
    connection: asyncpg.Connection, kind: str, desktop_id: uuid.UUID
) -> Job | None:
    """A queued or running job of ``kind`` for the desktop, if there is one."""
    for state in (JobState.RUNNING, JobState.QUEUED):
        jobs = await queue.list_jobs(
            connection,
            queue.JobFilter(
                state=state, kind=kind, resource_type="desktops", resource_id=str(desktop_id)
            ),
            limit=1,
        )
        if jobs:
            return jobs[0]
    return None


# ---------------------------------------------------------------------------------- reads


async def list_desktops(
    runtime: Runtime,
    *,
    limit: int,
    after: DesktopCursor | None = None,
    pool_id: uuid.UUID | None = None,
    state: DesktopState | None = None,
    assigned_user: uuid.UUID | None = None,
) -> list[DesktopRecord]:
    """Up to ``limit`` desktops in name order (without case) after ``after``, filtered."""
    return await store_desktops.list_desktops(
        runtime.db,
        limit=limit,
        after=after,
        pool_id=pool_id,
        state=state,
        assigned_user=assigned_user,
    )


async def get_desktop(runtime: Runtime, desktop_id: uuid.UUID) -> DesktopRecord:
    """The desktop ``desktop_id``.

    :raises NotFound: there is none.
    """
    record = found(
        await store_desktops.get_desktop_record(runtime.db, desktop_id), "desktop", desktop_id
    )
    return record


# ---------------------------------------------------------------------------------- changes


async def run_action(runtime: Runtime, actor: Actor, desktop_id: uuid.UUID, action: str) -> Job:
    """Enqueue ``desktop.<action>`` for the desktop; the same job if it is queued or running.

    :raises NotFound: there is no such desktop.
    :raises DesktopActionNotAllowed: a power action the desktop cannot take now.
    :raises IllegalTransition: the state machine refuses the action.
    """
    kind = f"desktop.{action}"
    async with runtime.db.acquire() as connection, connection.transaction():
        desktop = await _locked(connection, desktop_id)
        refuse_action(desktop, action)
        already = await _active_job(connection, kind, desktop_id)
        if already is not None:
            return already
        job = await enqueue_desktop_job(connection, kind, desktop)
        await actor.record(
            connection,
            "desktop.action",
            "desktops",
            str(desktop_id),
            {
                "action": action,
                "job_id": job.id,
                "state": str(desktop.state),
                "name": desktop.name,
            },
        )
    return job


async def _change_assignment(
    runtime: Runtime,
    actor: Actor,
    desktop_id: uuid.UUID,
    event: AssignmentChange,
    action: str,
) -> DesktopRecord:
    """Apply the assignment event ``event`` returns to a desktop of a persistent pool.

    ``event(connection, desktop)`` checks what it needs and returns the event and the audit
    details; nothing is recorded when the event changes nothing.
    """
    async with runtime.db.acquire() as connection, connection.transaction():
        desktop = await _locked(connection, desktop_id)
        pool = found(await store_pools.get_pool(connection, desktop.pool_id), "desktop", desktop_id)
        _require_persistent(pool)
        chosen, details = await event(connection, desktop)
        after = await store_desktops.apply_event(connection, desktop_id, chosen, pool=pool)
        if after != desktop:
            await actor.record(
                connection, action, "desktops", str(desktop_id), {**details, "name": desktop.name}
            )
        record = await store_desktops.get_desktop_record(connection, desktop_id)
    return found(record, "desktop", desktop_id)


async def assign_desktop(
    runtime: Runtime, actor: Actor, desktop_id: uuid.UUID, user_id: uuid.UUID
) -> DesktopRecord:
    """Assign a desktop of a persistent pool to a user (the one they get every time).

    :raises NotFound: there is no such desktop.
    :raises PoolNotPersistent: its pool is not persistent.
    :raises ValidationFailed: there is no such user (``/user_id``).
    :raises IllegalTransition: it belongs to another user, or is being deleted.
    :raises EscalationDenied: the user is not entitled to the desktop's pool (directly or
        through a group they are a member of) and the actor does not hold ``pools:manage``:
        the assignment would hand out a desktop of the pool (see
        :mod:`deskpool.identity.rules`).
    """

    async def assigned(
        connection: asyncpg.Connection, desktop: Desktop
    ) -> tuple[DesktopEvent, dict[str, Any]]:
        if await identity_store.get_user(connection, user_id) is None:
            raise ValidationFailed(
                [LocatedFieldError("/user_id", f"No user has the id {user_id}.")]
            )
        principal = actor.principal
        if principal is not None and not principal.may(rules.POOL_ACCESS):
            groups = await identity_store.member_group_ids(connection, user_id)
            entitled = await is_entitled(connection, desktop.pool_id, user_id, groups)
            rules.check_escalation(
                principal.effective,
                () if entitled else {rules.POOL_ACCESS},
                "assign this desktop to a user who is not entitled to its pool",
                "desktops",
            )
        return Assigned(str(user_id)), {"user_id": str(user_id)}

    async with audited_refusals(runtime, actor):
        return await _change_assignment(runtime, actor, desktop_id, assigned, "desktop.assign")


async def unassign_desktop(runtime: Runtime, actor: Actor, desktop_id: uuid.UUID) -> DesktopRecord:
    """Remove the user of a desktop of a persistent pool (it is refreshed before reuse).

    :raises NotFound: there is no such desktop.
    :raises PoolNotPersistent: its pool is not persistent.
    :raises IllegalTransition: it is in use.
    """

    async def unassigned(
        connection: asyncpg.Connection, desktop: Desktop
    ) -> tuple[DesktopEvent, dict[str, Any]]:
        return Unassigned(), {"user_id": desktop.assigned_user}

    return await _change_assignment(runtime, actor, desktop_id, unassigned, "desktop.unassign")


def _require_persistent(pool: Pool) -> None:
    if not pool.is_persistent:
        raise PoolNotPersistent(
            f"pool {pool.name} is {pool.kind}: its desktops are lent per session, not assigned"
        )
