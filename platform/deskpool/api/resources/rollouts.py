"""Image rollouts of a pool (``pools:read`` / ``pools:manage``) and its image history.

A *rollout* moves a pool's desktops to another template safely (:mod:`deskpool.rollouts`):
``canary`` desktops first, and nothing else is touched until they are ready on the new
template; then ``batch_size`` at a time, never fewer than ``min_ready`` ready free desktops
while that can be avoided, at most ``max_size + surge`` desktops. Desktops in use are
replaced after their user logs off (``wait_for_logoff``), or after the user was warned and
``warning_seconds`` have passed (``force_logoff``; the warning reaches the user's live events
and ``GET /api/v1/me/desktops``). Desktops assigned to users of a persistent pool keep their
disks unless ``recreate_assigned`` (which destroys those users' data). With ``stop_on_error``,
a failed canary or batch desktop stops the rollout in ``failed`` and the pool serves its old
template again.

- ``POST /api/v1/pools/{pool_id}/rollouts`` starts one (201; 409 ``rollout_conflict`` when the
  pool already has an active rollout; 422 for an invalid strategy or an unknown template).
- ``GET .../rollouts`` and ``GET .../rollouts/{rollout_id}`` show them with their progress
  (``counts``) and what they did to each desktop (``desktops``).
- ``POST .../rollouts/{rollout_id}/pause|resume|cancel`` (409 when the state does not allow it).
- ``GET /api/v1/pools/{pool_id}/images``: every template the pool has run; rolling back is a
  rollout to one of them.

While a rollout is active, changing the pool's ``template`` directly is a 409. Everything is
audited; live events ``pool.rollout`` carry the progress.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from marshmallow import Schema, fields, validate

from deskpool.api.context import Call
from deskpool.api.inputs import storable_text
from deskpool.api.pagination import Page, PageQuery, decode_cursor, page_schema, paginate
from deskpool.api.resources.labels import NO_LABELS, Labels, labels_for, name_field
from deskpool.api.resources.pool_schemas import WholeNumber
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.api.values import Instant
from deskpool.errors import InvalidCursor
from deskpool.ids import parse_id
from deskpool.names import SPACE
from deskpool.rollouts import service
from deskpool.rollouts.model import (
    MAX_MESSAGE_LENGTH,
    MAX_WARNING_SECONDS,
    EntryRole,
    EntryState,
    InUsePolicy,
    RolloutState,
    StartRollout,
    Strategy,
)
from deskpool.rollouts.service import RolloutShown
from deskpool.rollouts.store import PoolImage

_IN_USE = [str(policy) for policy in InUsePolicy]
#: Text with something visible in it (the model refuses a blank template).
_VISIBLE = validate.Regexp(rf"^[{SPACE}]*[^{SPACE}]", error="Must not be blank.")
_STATES = [str(state) for state in RolloutState]

# ---------------------------------------------------------------------------------- schemas


class RolloutCreateSchema(Schema):
    """A rollout to start: the template, and the strategy (every member has a default)."""

    template = fields.String(
        required=True,
        validate=[validate.Length(1, 200), storable_text, _VISIBLE],
        metadata={
            "description": "The cluster's template to roll out: its id (a unique template "
            "name is accepted and stored as its id)."
        },
    )
    canary = WholeNumber(
        strict=True,
        load_default=1,
        validate=validate.Range(0, 10_000),
        metadata={
            "description": "Desktops replaced first; nothing else is touched until they are "
            "ready on the new template. 0 skips the canary."
        },
    )
    batch_size = WholeNumber(
        strict=True,
        load_default=1,
        validate=validate.Range(1, 10_000),
        metadata={"description": "Desktops replaced at once after the canary."},
    )
    min_ready = WholeNumber(
        strict=True,
        load_default=None,
        allow_none=True,
        validate=validate.Range(0, 10_000),
        metadata={
            "description": "The pool never has fewer ready, free desktops than this during "
            "the rollout while it can avoid it; default (null): the pool's spare."
        },
    )
    surge = WholeNumber(
        strict=True,
        load_default=0,
        validate=validate.Range(0, 10_000),
        metadata={"description": "Extra desktops the rollout may create above max_size."},
    )
    in_use = fields.String(
        load_default=str(InUsePolicy.WAIT_FOR_LOGOFF),
        validate=validate.OneOf(_IN_USE),
        metadata={
            "description": "A desktop in use is replaced after its user logs off "
            "(wait_for_logoff), or after its user was warned and warning_seconds passed "
            "(force_logoff).",
            "enum": _IN_USE,
        },
    )
    warning_seconds = WholeNumber(
        strict=True,
        load_default=300,
        validate=validate.Range(0, MAX_WARNING_SECONDS),
        metadata={"description": "With force_logoff: how long after the warning the log-off is."},
    )
    message = fields.String(
        load_default="",
        validate=[validate.Length(0, MAX_MESSAGE_LENGTH), storable_text],
        metadata={"description": "What a user of a desktop to be replaced is told."},
    )
    start_at = Instant(
        load_default=None,
        allow_none=True,
        metadata={"description": "When the rollout starts; null or absent: now."},
    )
    stop_on_error = fields.Boolean(
        load_default=True,
        metadata={
            "description": "A failed canary or batch desktop stops the rollout in failed; "
            "the pool serves its old template again."
        },
    )
    recreate_assigned = fields.Boolean(
        load_default=False,
        metadata={
            "description": "Persistent pools: also rebuild desktops assigned to users. "
            "This DESTROYS those users' data (their disks are replaced)."
        },
    )


class RolloutCountsSchema(Schema):
    """How far a rollout is."""

    total = fields.Integer(
        required=True, metadata={"description": "Desktops that must run the new template."}
    )
    on_new_template = fields.Integer(required=True)
    replacing = fields.Integer(required=True)
    waiting_for_logoff = fields.Integer(required=True)
    failed = fields.Integer(required=True)
    percent = fields.Integer(required=True, metadata={"description": "Progress, 0 to 100."})


class RolloutDesktopSchema(Schema):
    """What a rollout did to one desktop."""

    desktop_id = fields.String(required=True)
    name = fields.String(required=True)
    role = fields.String(required=True, metadata={"enum": [str(role) for role in EntryRole]})
    state = fields.String(required=True, metadata={"enum": [str(state) for state in EntryState]})
    warned_at = fields.AwareDateTime(required=True, allow_none=True)
    logoff_at = fields.AwareDateTime(required=True, allow_none=True)
    error = fields.String(required=True, allow_none=True)
    updated_at = fields.AwareDateTime(required=True)


class RolloutSchema(Schema):
    """An image rollout of a pool."""

    id = fields.String(required=True)
    pool_id = fields.String(required=True)
    from_template = fields.String(required=True)
    to_template = fields.String(required=True)
    canary = fields.Integer(required=True)
    batch_size = fields.Integer(required=True)
    min_ready = fields.Integer(required=True)
    surge = fields.Integer(required=True)
    in_use = fields.String(required=True, metadata={"enum": _IN_USE})
    warning_seconds = fields.Integer(required=True)
    message = fields.String(required=True)
    start_at = fields.AwareDateTime(required=True)
    stop_on_error = fields.Boolean(required=True)
    recreate_assigned = fields.Boolean(required=True)
    state = fields.String(required=True, metadata={"enum": _STATES})
    reason = fields.String(
        required=True, metadata={"description": "Why it is in its state (why it failed...)."}
    )
    waiting_for = fields.String(
        required=True,
        allow_none=True,
        metadata={
            "description": "What it waits for now, in words (desktops being rebuilt, users to "
            "log off, failed desktops to be repaired, its start, an administrator's resume, "
            "room to keep `min_ready`); null once it ended."
        },
    )
    created_by = fields.String(required=True)
    created_by_name = name_field("Who started it")
    created_at = fields.AwareDateTime(required=True)
    started_at = fields.AwareDateTime(required=True, allow_none=True)
    finished_at = fields.AwareDateTime(required=True, allow_none=True)
    counts = fields.Nested(RolloutCountsSchema, required=True)
    desktops = fields.List(fields.Nested(RolloutDesktopSchema), required=True)


class PoolImageSchema(Schema):
    """A template the pool ran."""

    template = fields.String(required=True)
    since = fields.AwareDateTime(required=True)
    set_by = fields.String(required=True)
    set_by_name = name_field("Who set it")
    how = fields.String(
        required=True,
        metadata={
            "enum": ["created", "changed", "rollout", "reverted"],
            "description": "created with the pool, changed directly, by a rollout, or "
            "reverted by a failed or cancelled rollout.",
        },
    )
    rollout_id = fields.String(required=True, allow_none=True)


class PoolImagesSchema(Schema):
    """A pool's image history, newest first."""

    items = fields.List(fields.Nested(PoolImageSchema), required=True)


# ---------------------------------------------------------------------------------- views


def rollout_view(shown: RolloutShown, labels: Labels = NO_LABELS) -> dict[str, Any]:
    """A rollout as the API shows it."""
    rollout, counts = shown.rollout, shown.counts
    return {
        "id": str(rollout.id),
        "pool_id": str(rollout.pool_id),
        "from_template": rollout.from_template,
        "to_template": rollout.to_template,
        "canary": rollout.canary,
        "batch_size": rollout.batch_size,
        "min_ready": rollout.min_ready,
        "surge": rollout.surge,
        "in_use": str(rollout.in_use),
        "warning_seconds": rollout.warning_seconds,
        "message": rollout.message,
        "start_at": rollout.start_at,
        "stop_on_error": rollout.stop_on_error,
        "recreate_assigned": rollout.recreate_assigned,
        "state": str(rollout.state),
        "reason": rollout.reason,
        "waiting_for": shown.waiting_for,
        "created_by": rollout.created_by,
        "created_by_name": labels.name(rollout.created_by),
        "created_at": rollout.created_at,
        "started_at": rollout.started_at,
        "finished_at": rollout.finished_at,
        "counts": {
            "total": counts.total,
            "on_new_template": counts.on_new_template,
            "replacing": counts.replacing,
            "waiting_for_logoff": counts.waiting_for_logoff,
            "failed": counts.failed,
            "percent": counts.percent,
        },
        "desktops": [
            {
                "desktop_id": str(entry.desktop_id),
                "name": entry.desktop_name,
                "role": str(entry.role),
                "state": str(entry.state),
                "warned_at": entry.warned_at,
                "logoff_at": entry.logoff_at,
                "error": entry.error,
                "updated_at": entry.updated_at,
            }
            for entry in shown.desktops
        ],
    }


def _image_view(image: PoolImage, labels: Labels) -> dict[str, Any]:
    return {
        "template": image.template,
        "since": image.since,
        "set_by": image.set_by,
        "set_by_name": labels.name(image.set_by),
        "how": image.how,
        "rollout_id": None if image.rollout_id is None else str(image.rollout_id),
    }


def _cursor(shown: RolloutShown) -> list[str]:
    return [shown.rollout.created_at.astimezone(UTC).isoformat(), str(shown.rollout.id)]


def _after(cursor: str | None) -> tuple[datetime, uuid.UUID] | None:
    after = decode_cursor(cursor)
    if after is None:
        return None
    try:
        return datetime.fromisoformat(after[0]), uuid.UUID(after[1])
    except (TypeError, ValueError, IndexError, KeyError):
        raise InvalidCursor() from None


def _ids(call: Call) -> tuple[uuid.UUID, uuid.UUID]:
    pool_id = parse_id(call.path_param("pool_id"), "pool")
    return pool_id, parse_id(call.path_param("rollout_id"), "rollout")


# ----------------------------------------------------------------------------------- routes


def start_rollout_command(body: Mapping[str, Any]) -> StartRollout:
    """A loaded ``RolloutCreate`` document as a command (defaults: :class:`Strategy`'s)."""
    defaults = Strategy()
    strategy = Strategy(
        canary=body.get("canary", defaults.canary),
        batch_size=body.get("batch_size", defaults.batch_size),
        min_ready=body.get("min_ready"),
        surge=body.get("surge", defaults.surge),
        in_use=InUsePolicy(body.get("in_use", defaults.in_use)),
        warning_seconds=body.get("warning_seconds", defaults.warning_seconds),
        message=body.get("message", defaults.message),
        start_at=body.get("start_at"),
        stop_on_error=body.get("stop_on_error", defaults.stop_on_error),
        recreate_assigned=body.get("recreate_assigned", defaults.recreate_assigned),
    )
    return StartRollout(template=str(body["template"]), strategy=strategy)


#: The rollout and image history operations.
ROUTES = RouteTable()

_ONE = "/api/v1/pools/{pool_id}/rollouts/{rollout_id}"


@ROUTES.route(
    "POST",
    "/api/v1/pools/{pool_id}/rollouts",
    summary="Start an image rollout",
    description=(
        "Rolls the pool out to another template with the given strategy (module rules: "
        "canary first, batches, min_ready, surge, users in use waited for or warned). 409 "
        "`rollout_conflict` when the pool already has an active rollout. "
        "`recreate_assigned: true` destroys the data of users of a persistent pool."
    ),
    tags=("pools",),
    permission="pools:manage",
    body=RolloutCreateSchema,
    responses={201: ResponseSpec("The rollout, scheduled.", RolloutSchema)},
)
async def start_rollout(call: Call) -> Reply:
    pool_id = parse_id(call.path_param("pool_id"), "pool")
    command = start_rollout_command(call.body)
    shown = await service.start_rollout(call.runtime, call.actor, pool_id, command)
    return Reply(rollout_view(shown), 201)


@ROUTES.route(
    "GET",
    "/api/v1/pools/{pool_id}/rollouts",
    summary="List a pool's rollouts",
    description="Newest first, each with its progress and what it did to each desktop.",
    tags=("pools",),
    permission="pools:read",
    query=PageQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of rollouts.", page_schema(RolloutSchema))},
)
async def list_rollouts(call: Call) -> Page:
    pool_id = parse_id(call.path_param("pool_id"), "pool")
    limit = int(call.query["limit"])
    shown = await service.list_rollouts(
        call.runtime, pool_id, limit=limit + 1, after=_after(call.query.get("cursor"))
    )
    page = paginate(shown, limit, _cursor)
    labels = await labels_for(call.runtime, users=[i.rollout.created_by for i in page.items])
    return Page([rollout_view(item, labels) for item in page.items], page.next)


@ROUTES.route(
    "GET",
    _ONE,
    summary="Show a rollout",
    description="Its state and reason, its progress, and what it did to each desktop.",
    tags=("pools",),
    permission="pools:read",
    responses={200: ResponseSpec("The rollout.", RolloutSchema)},
)
async def get_rollout(call: Call) -> dict[str, Any]:
    pool_id, rollout_id = _ids(call)
    shown = await service.get_rollout(call.runtime, pool_id, rollout_id)
    return rollout_view(shown, await labels_for(call.runtime, users=[shown.rollout.created_by]))


@ROUTES.route(
    "POST",
    f"{_ONE}/pause",
    summary="Pause a rollout",
    description="Nothing new is replaced until it is resumed. 409 unless scheduled, canary "
    "or rolling.",
    tags=("pools",),
    permission="pools:manage",
    responses={200: ResponseSpec("The rollout, paused.", RolloutSchema)},
)
async def pause_rollout(call: Call) -> dict[str, Any]:
    pool_id, rollout_id = _ids(call)
    return rollout_view(await service.pause_rollout(call.runtime, call.actor, pool_id, rollout_id))


@ROUTES.route(
    "POST",
    f"{_ONE}/resume",
    summary="Resume a paused rollout",
    description="It goes on where it was paused. 409 unless paused.",
    tags=("pools",),
    permission="pools:manage",
    responses={200: ResponseSpec("The rollout, resumed.", RolloutSchema)},
)
async def resume_rollout(call: Call) -> dict[str, Any]:
    pool_id, rollout_id = _ids(call)
    return rollout_view(await service.resume_rollout(call.runtime, call.actor, pool_id, rollout_id))


@ROUTES.route(
    "POST",
    f"{_ONE}/cancel",
    summary="Cancel a rollout",
    description=(
        "Nothing more is replaced; desktops already on the new template stay, and the pool "
        "clones its former template again. 409 unless the rollout is active."
    ),
    tags=("pools",),
    permission="pools:manage",
    responses={200: ResponseSpec("The rollout, cancelled.", RolloutSchema)},
)
async def cancel_rollout(call: Call) -> dict[str, Any]:
    pool_id, rollout_id = _ids(call)
    return rollout_view(await service.cancel_rollout(call.runtime, call.actor, pool_id, rollout_id))


@ROUTES.route(
    "GET",
    "/api/v1/pools/{pool_id}/images",
    summary="List a pool's image history",
    description=(
        "Every template the pool has run, newest first: when it became the pool's, who made "
        "it so and how. Rolling back is a rollout to an earlier one."
    ),
    tags=("pools",),
    permission="pools:read",
    responses={200: ResponseSpec("The image history.", PoolImagesSchema)},
)
async def list_pool_images(call: Call) -> dict[str, Any]:
    pool_id = parse_id(call.path_param("pool_id"), "pool")
    images = await service.image_history(call.runtime, pool_id, limit=500)
    labels = await labels_for(call.runtime, users=[image.set_by for image in images])
    return {"items": [_image_view(image, labels) for image in images]}
