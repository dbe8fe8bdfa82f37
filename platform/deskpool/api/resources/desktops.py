"""Desktops (``desktops:read`` / ``desktops:manage``): inspect them, act on them, assign them.

A desktop is one VM of a pool and what deskpool knows about it: its state (see
:mod:`deskpool.desktops.states`), the step it failed at and why, and the user it belongs to.
Desktops are created and deleted by reconciliation; administrators act on one through
``POST /api/v1/desktops/{desktop_id}/actions``:

- ``power_off``, ``restart``: the VM must exist and no job be working on it (states ``ready``,
  ``in_use`` or ``failed``), else 409 ``desktop_action_not_allowed``; ``power_on`` likewise, in
  states ``powered_off`` or ``failed`` (a running desktop is not powered on);
- ``rebuild``: a ready desktop is rebuilt from the pool's template (the state machine's
  ``refresh``), a failed one provisioned again (``retry``);
- ``delete``: the VM is destroyed, then the record (reconciliation replaces it if the pool
  needs one).

The API checks the action against the state machine (409 ``illegal_transition``) and enqueues
a job of kind ``desktop.<action>`` with payload ``{"desktop_id": ...}`` through
:func:`deskpool.desktops.jobs.enqueue_desktop_job` (as reconciliation does, so the two
never queue the same rebuild or deletion twice), answering 202 with the job; the job applies
the state change when it runs. Asking for an action that is already queued or running for the
desktop answers that job instead of a second one.

In a persistent pool an administrator assigns a desktop to a user
(``PUT .../assignment``) or removes its user (``DELETE .../assignment``; the desktop is
refreshed before anyone else gets it); both are 409 ``pool_not_persistent`` in other pools.
Every change is recorded in the audit trail in the same transaction. The use cases and the rules
of which action a desktop can take are in :mod:`deskpool.desktops.service`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from marshmallow import Schema, fields, validate

from deskpool.api.context import Call
from deskpool.api.pagination import Page, PageQuery, cursor_pair, page_schema, paginate
from deskpool.api.resources.jobs import JobSchema
from deskpool.api.resources.labels import (
    NO_LABELS,
    Labels,
    email_field,
    labels_for,
    name_field,
    pool_name_field,
)
from deskpool.api.resources.session_schemas import announcement_field
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.desktops import service as desktop_service
from deskpool.desktops.service import ACTIONS, allowed_actions
from deskpool.desktops.store import DesktopRecord, desktop_cursor
from deskpool.helpdesk import announced
from deskpool.ids import parse_id
from deskpool.pools.model import DesktopState

_DESKTOP_STATES = [state.value for state in DesktopState]

#: The desktop operations.
ROUTES = RouteTable()


# ---------------------------------------------------------------------------------- schemas


class DesktopSchema(Schema):
    """A desktop of a pool."""

    id = fields.String(required=True)
    pool_id = fields.String(required=True)
    pool_name = pool_name_field()
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
    assigned_user_name = name_field("The assigned user")
    assigned_user_email = email_field("The assigned user")
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
    message = announcement_field()


class AssignmentSchema(Schema):
    """The user a desktop of a persistent pool belongs to."""

    user_id = fields.UUID(required=True, metadata={"description": "The user's id."})


# ---------------------------------------------------------------------------------- views


def desktop_view(record: DesktopRecord, labels: Labels = NO_LABELS) -> dict[str, Any]:
    """A desktop as the API shows it (its pool and user named by ``labels``)."""
    desktop = record.desktop
    return {
        "id": str(desktop.id),
        "pool_id": str(desktop.pool_id),
        **labels.pool(desktop.pool_id),
        "cluster_id": str(record.cluster_id),
        "name": desktop.name,
        "state": str(desktop.state),
        "state_changed_at": desktop.state_changed_at,
        "vm_id": desktop.vm_id,
        "node": record.node,
        "template": desktop.template,
        "assigned_user": desktop.assigned_user,
        **labels.user("assigned_user", desktop.assigned_user),
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


# ----------------------------------------------------------------------------------- routes


@ROUTES.route(
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
    records = await desktop_service.list_desktops(
        call.runtime,
        limit=limit + 1,
        after=cursor_pair(call.query.get("cursor")),
        pool_id=call.query.get("pool_id"),
        state=DesktopState(state) if state else None,
        assigned_user=call.query.get("assigned_user"),
    )
    page = paginate(records, limit, lambda record: desktop_cursor(record.desktop))
    labels = await _labels(call, page.items)
    return Page([desktop_view(record, labels) for record in page.items], page.next)


async def _labels(call: Call, records: Sequence[DesktopRecord]) -> Labels:
    """The names of the pools and users of ``records``."""
    desktops = [record.desktop for record in records]
    return await labels_for(
        call.runtime,
        users=[d.assigned_user for d in desktops],
        pools=[d.pool_id for d in desktops],
    )


@ROUTES.route(
    "GET",
    "/api/v1/desktops/{desktop_id}",
    summary="Get a desktop",
    tags=("desktops",),
    permission="desktops:read",
    responses={200: ResponseSpec("The desktop.", DesktopSchema)},
)
async def get_desktop(call: Call) -> dict[str, Any]:
    record = await desktop_service.get_desktop(call.runtime, _desktop_id(call))
    return desktop_view(record, await _labels(call, [record]))


@ROUTES.route(
    "POST",
    "/api/v1/desktops/{desktop_id}/actions",
    summary="Run an action on a desktop",
    description=(
        "`power_on`, `power_off`, `restart` (the VM must exist and no job work on it: "
        "states `ready`, `in_use`, `failed`; `power_on` in `powered_off` or `failed`, a "
        "running desktop is not powered on; else 409 "
        "`desktop_action_not_allowed`; once a power-off is done, a user logged on to the "
        "desktop is logged off as when he logs off, and a ready desktop is `powered_off`), "
        "`rebuild` (a ready desktop is rebuilt from the pool's template, a failed one "
        "provisioned again) and `delete` (the VM, then the record); an action the state "
        "machine refuses is 409 `illegal_transition`. Enqueues a job of kind "
        "`desktop.<action>` and answers it; the same action already queued or running "
        "answers that job. A `message` goes to the desktop's user first (a warning his "
        "desktop views show at once, audited `message.send` with `about` the action)."
    ),
    tags=("desktops",),
    permission="desktops:manage",
    body=DesktopActionSchema,
    responses={202: ResponseSpec("The action's job.", JobSchema)},
)
async def run_desktop_action(call: Call) -> Reply:
    job = await announced.desktop_action(
        call.runtime, call.actor, _desktop_id(call), call.body["action"], call.body.get("message")
    )
    return Reply(job, 202)


@ROUTES.route(
    "PUT",
    "/api/v1/desktops/{desktop_id}/assignment",
    summary="Assign a desktop of a persistent pool to a user",
    description=(
        "The user gets this desktop every time they open the pool. 409 "
        "`pool_not_persistent` in other pools; 409 `illegal_transition` when it belongs to "
        "another user (remove the assignment first) or is being deleted; 422 `/user_id` "
        "for an unknown user. Assigning it to a user who is not entitled to its pool (directly "
        "or through a group membership) hands out a desktop: it needs `pools:manage` as well "
        "(403 `escalation_denied`)."
    ),
    tags=("desktops",),
    permission="desktops:manage",
    body=AssignmentSchema,
    responses={200: ResponseSpec("The desktop.", DesktopSchema)},
)
async def assign_desktop(call: Call) -> dict[str, Any]:
    record = await desktop_service.assign_desktop(
        call.runtime, call.actor, _desktop_id(call), call.body["user_id"]
    )
    return desktop_view(record)


@ROUTES.route(
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
    record = await desktop_service.unassign_desktop(call.runtime, call.actor, _desktop_id(call))
    return desktop_view(record)
