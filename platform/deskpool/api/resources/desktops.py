"""Desktops (``desktops:read`` / ``desktops:manage``): inspect them, act on them, assign them.

A desktop is one VM of a pool and what deskpool knows about it: its state (see
:mod:`deskpool.pools.states`), the step it failed at and why, and the user it belongs to.
Desktops are created and deleted by reconciliation; administrators act on one through
``POST /api/v1/desktops/{desktop_id}/actions``:

- ``power_on``, ``power_off``, ``restart``: the VM must exist and no job be working on it
  (states ``ready``, ``in_use`` or ``failed``), else 409 ``desktop_action_not_allowed``;
- ``rebuild``: a ready desktop is rebuilt from the pool's template (the state machine's
  ``refresh``), a failed one provisioned again (``retry``);
- ``delete``: the VM is destroyed, then the record (reconciliation replaces it if the pool
  needs one).

The API checks the action against the state machine (409 ``illegal_transition``) and enqueues
a job of kind ``desktop.<action>`` with payload ``{"desktop_id": ...}`` through
:func:`deskpool.pools.desktop_jobs.enqueue_desktop_job` (as reconciliation does, so the two
never queue the same rebuild or deletion twice), answering 202 with the job; the job applies
the state change when it runs. Asking for an action that is already queued or running for the
desktop answers that job instead of a second one.

In a persistent pool an administrator assigns a desktop to a user
(``PUT .../assignment``) or removes its user (``DELETE .../assignment``; the desktop is
refreshed before anyone else gets it); both are 409 ``pool_not_persistent`` in other pools.
Every change is recorded in the audit trail in the same transaction.
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
from marshmallow import Schema, fields, validate

from deskpool.api.context import Call
from deskpool.api.pagination import Page, PageQuery, cursor_pair, page_schema, paginate
from deskpool.api.resources.jobs import JobSchema
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.api.validation import LocatedFieldError
from deskpool.errors import Conflict, NotFound, ValidationFailed
from deskpool.identity import store as identity_store
from deskpool.ids import parse_id
from deskpool.jobs import queue
from deskpool.jobs.model import Job, JobState
from deskpool.pools import repository
from deskpool.pools.desktop_jobs import enqueue_desktop_job
from deskpool.pools.model import Desktop, DesktopState, Pool
from deskpool.pools.repository import DesktopRecord
from deskpool.pools.states import (
    Assigned,
    Delete,
    DesktopEvent,
    IllegalTransition,
    Refresh,
    Retry,
    Unassigned,
    can_take,
)

S = DesktopState

#: The actions an administrator can ask for, in the order they are documented.
ACTIONS = ("power_on", "power_off", "restart", "rebuild", "delete")

#: States in which the VM exists and no job is working on it: power actions are allowed.
POWER_ACTION_STATES = frozenset({S.READY, S.IN_USE, S.FAILED})

_POWER_ACTIONS = frozenset({"power_on", "power_off", "restart"})

_DESKTOP_STATES = [state.value for state in DesktopState]


class DesktopActionNotAllowed(Conflict):
    """A power action on a desktop whose VM does not exist yet or that a job works on."""

    code = "desktop_action_not_allowed"
    title = "The desktop cannot take this action now"


class PoolNotPersistent(Conflict):
    """Desktops are assigned to users only in persistent pools."""

    code = "pool_not_persistent"
    title = "The desktop's pool is not persistent"


# ---------------------------------------------------------------------------------- schemas


class DesktopSchema(Schema):
    """A desktop of a pool."""

    id = fields.String(required=True)
    pool_id = fields.String(required=True)
    cluster_id = fields.String(required=True)
    name = fields.String(required=True, metadata={"description": "VM and host name."})
    state = fields.String(required=True, validate=validate.OneOf(_DESKTOP_STATES))
    state_changed_at = fields.AwareDateTime(required=True)
    vm_id = fields.String(
        required=True, allow_none=True, metadata={"description": "The hypervisor's VM id."}
    )
    node = fields.String(required=True, allow_none=True)
    template = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "The template the current VM was built from."},
    )
    assigned_user = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "The user it belongs to (persistent) or is lent to."},
    )
    in_session = fields.Boolean(required=True)
    used_since_refresh = fields.Boolean(required=True)
    failed_step = fields.String(
        required=True,
        allow_none=True,
        validate=validate.OneOf(_DESKTOP_STATES),
        metadata={"description": "The state it was in when it last failed."},
    )
    last_error = fields.String(required=True, allow_none=True)
    failure_count = fields.Integer(
        required=True, metadata={"description": "Failures since it was last ready."}
    )
    last_failed_at = fields.AwareDateTime(required=True, allow_none=True)
    allowed_actions = fields.List(
        fields.String(validate=validate.OneOf(ACTIONS)),
        required=True,
        metadata={"description": "The actions it can take now."},
    )
    created_at = fields.AwareDateTime(required=True)
    updated_at = fields.AwareDateTime(required=True)


class DesktopQuery(PageQuery):
    """Filters of the desktop list."""

    pool_id = fields.UUID(metadata={"description": "Only desktops of this pool."})
    state = fields.String(
        validate=validate.OneOf(_DESKTOP_STATES),
        metadata={"description": "Only desktops in this state."},
    )
    assigned_user = fields.UUID(metadata={"description": "Only desktops of this user."})


class DesktopActionSchema(Schema):
    """An action to run on a desktop."""

    action = fields.String(
        required=True,
        validate=validate.OneOf(ACTIONS),
        metadata={"description": "What to do; see the operation's description."},
    )


class AssignmentSchema(Schema):
    """The user a desktop of a persistent pool belongs to."""

    user_id = fields.UUID(required=True, metadata={"description": "The user's id."})


# ---------------------------------------------------------------------------------- helpers


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
        if desktop.state not in POWER_ACTION_STATES or desktop.vm_id is None:
            allowed = ", ".join(sorted(POWER_ACTION_STATES))
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


def desktop_view(record: DesktopRecord) -> dict[str, Any]:
    """A desktop as the API shows it."""
    desktop = record.desktop
    return {
        "id": str(desktop.id),
        "pool_id": str(desktop.pool_id),
        "cluster_id": str(record.cluster_id),
        "name": desktop.name,
        "state": str(desktop.state),
        "state_changed_at": desktop.state_changed_at,
        "vm_id": desktop.vm_id,
        "node": record.node,
        "template": desktop.template,
        "assigned_user": desktop.assigned_user,
        "in_session": desktop.in_session,
        "used_since_refresh": desktop.used_since_refresh,
        "failed_step": None if desktop.failed_step is None else str(desktop.failed_step),
        "last_error": desktop.last_error,
        "failure_count": desktop.failure_count,
        "last_failed_at": desktop.last_failed_at,
        "allowed_actions": allowed_actions(desktop),
        "created_at": desktop.created_at,
        "updated_at": record.updated_at,
    }


def _desktop_id(call: Call) -> uuid.UUID:
    return parse_id(call.path_param("desktop_id"), "desktop")


async def _locked(connection: asyncpg.Connection, desktop_id: uuid.UUID) -> DesktopRecord:
    record = await repository.get_desktop_record(connection, desktop_id, for_update=True)
    if record is None:
        raise NotFound(f"No desktop has the id {desktop_id}.")
    return record


async def _pool_of(connection: asyncpg.Connection, desktop: Desktop) -> Pool:
    pool = await repository.get_pool(connection, desktop.pool_id)
    if pool is None:
        raise NotFound(f"No desktop has the id {desktop.id}.")
    return pool


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


async def _reread(connection: asyncpg.Connection, desktop_id: uuid.UUID) -> dict[str, Any]:
    record = await repository.get_desktop_record(connection, desktop_id)
    if record is None:
        raise NotFound(f"No desktop has the id {desktop_id}.")
    return desktop_view(record)


# ----------------------------------------------------------------------------------- routes


def register(routes: RouteTable) -> None:
    """Add the desktop operations."""

    @routes.route(
        "GET",
        "/api/v1/desktops",
        summary="List desktops",
        description="In name order (without case); filter by pool, state and assigned user.",
        tags=("desktops",),
        permission="desktops:read",
        query=DesktopQuery,
        paginated=True,
        responses={200: ResponseSpec("A page of desktops.", page_schema(DesktopSchema))},
    )
    async def list_desktops(call: Call) -> Page:
        limit = int(call.query["limit"])
        state = call.query.get("state")
        records = await repository.list_desktops(
            call.runtime.db,
            limit=limit + 1,
            after=cursor_pair(call.query.get("cursor")),
            pool_id=call.query.get("pool_id"),
            state=DesktopState(state) if state else None,
            assigned_user=call.query.get("assigned_user"),
        )
        page = paginate(records, limit, lambda record: repository.desktop_cursor(record.desktop))
        return Page([desktop_view(record) for record in page.items], page.next)

    @routes.route(
        "GET",
        "/api/v1/desktops/{desktop_id}",
        summary="Get a desktop",
        tags=("desktops",),
        permission="desktops:read",
        responses={200: ResponseSpec("The desktop.", DesktopSchema)},
    )
    async def get_desktop(call: Call) -> dict[str, Any]:
        desktop_id = _desktop_id(call)
        record = await repository.get_desktop_record(call.runtime.db, desktop_id)
        if record is None:
            raise NotFound(f"No desktop has the id {desktop_id}.")
        return desktop_view(record)

    @routes.route(
        "POST",
        "/api/v1/desktops/{desktop_id}/actions",
        summary="Run an action on a desktop",
        description=(
            "`power_on`, `power_off`, `restart` (the VM must exist and no job work on it: "
            "states `ready`, `in_use`, `failed`; else 409 `desktop_action_not_allowed`), "
            "`rebuild` (a ready desktop is rebuilt from the pool's template, a failed one "
            "provisioned again) and `delete` (the VM, then the record); an action the state "
            "machine refuses is 409 `illegal_transition`. Enqueues a job of kind "
            "`desktop.<action>` and answers it; the same action already queued or running "
            "answers that job."
        ),
        tags=("desktops",),
        permission="desktops:manage",
        body=DesktopActionSchema,
        responses={202: ResponseSpec("The action's job.", JobSchema)},
    )
    async def run_desktop_action(call: Call) -> Reply:
        desktop_id = _desktop_id(call)
        action: str = call.body["action"]
        kind = f"desktop.{action}"
        async with call.runtime.db.acquire() as connection, connection.transaction():
            desktop = (await _locked(connection, desktop_id)).desktop
            refuse_action(desktop, action)
            already = await _active_job(connection, kind, desktop_id)
            job = already or await enqueue_desktop_job(connection, kind, desktop)
            if already is None:
                await call.record_audit(
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
        return Reply(job, 202)

    @routes.route(
        "PUT",
        "/api/v1/desktops/{desktop_id}/assignment",
        summary="Assign a desktop of a persistent pool to a user",
        description=(
            "The user gets this desktop every time they open the pool. 409 "
            "`pool_not_persistent` in other pools; 409 `illegal_transition` when it belongs to "
            "another user (remove the assignment first) or is being deleted; 422 `/user_id` "
            "for an unknown user."
        ),
        tags=("desktops",),
        permission="desktops:manage",
        body=AssignmentSchema,
        responses={200: ResponseSpec("The desktop.", DesktopSchema)},
    )
    async def assign_desktop(call: Call) -> dict[str, Any]:
        desktop_id = _desktop_id(call)
        user_id: uuid.UUID = call.body["user_id"]
        async with call.runtime.db.acquire() as connection, connection.transaction():
            desktop = (await _locked(connection, desktop_id)).desktop
            pool = await _pool_of(connection, desktop)
            _require_persistent(pool)
            if await identity_store.get_user(connection, user_id) is None:
                raise ValidationFailed(
                    [LocatedFieldError("/user_id", f"No user has the id {user_id}.")]
                )
            after = await repository.apply_event(
                connection, desktop_id, Assigned(str(user_id)), pool=pool
            )
            if after != desktop:
                await call.record_audit(
                    connection,
                    "desktop.assign",
                    "desktops",
                    str(desktop_id),
                    {
                        "user_id": str(user_id),
                        "name": desktop.name,
                    },
                )
            return await _reread(connection, desktop_id)

    @routes.route(
        "DELETE",
        "/api/v1/desktops/{desktop_id}/assignment",
        summary="Remove the user of a desktop of a persistent pool",
        description=(
            "The desktop is refreshed before anyone else gets it. 409 `pool_not_persistent` "
            "in other pools; 409 `illegal_transition` while it is in use."
        ),
        tags=("desktops",),
        permission="desktops:manage",
        responses={200: ResponseSpec("The desktop.", DesktopSchema)},
    )
    async def unassign_desktop(call: Call) -> dict[str, Any]:
        desktop_id = _desktop_id(call)
        async with call.runtime.db.acquire() as connection, connection.transaction():
            desktop = (await _locked(connection, desktop_id)).desktop
            pool = await _pool_of(connection, desktop)
            _require_persistent(pool)
            after = await repository.apply_event(connection, desktop_id, Unassigned(), pool=pool)
            if after != desktop:
                await call.record_audit(
                    connection,
                    "desktop.unassign",
                    "desktops",
                    str(desktop_id),
                    {
                        "user_id": desktop.assigned_user,
                        "name": desktop.name,
                    },
                )
            return await _reread(connection, desktop_id)


def _require_persistent(pool: Pool) -> None:
    if not pool.is_persistent:
        raise PoolNotPersistent(
            f"pool {pool.name} is {pool.kind}: its desktops are lent per session, not assigned"
        )
