"""Capacity and power schedules (``schedules:read`` / ``schedules:manage``) and pools' capacity.

A schedule (:mod:`deskpool.schedules`) has an IANA ``time_zone``, weekly ``phases`` (the days
and local start time of each, and what it asks: ``min_ready`` as a count or a percentage of the
pool's ``max_size``, ``spare``, ``idle`` desktops beyond those kept or powered off, optional
``logoff`` of disconnected or idle sessions after a warning) and ``exceptions`` (a date or a
range of dates running a named phase or ``settings`` of their own). A pool references one with
``schedule_id``.

- ``POST /api/v1/schedules`` (201), ``GET /api/v1/schedules``, ``GET|PUT|DELETE
  /api/v1/schedules/{schedule_id}`` (a schedule used by a pool is 409 ``schedule_in_use``).
- ``POST /api/v1/schedule-preview``: the phases a schedule (saved or not) puts in force over a
  period, with the targets they set for a pool of ``max_size``.
- ``GET /api/v1/pools/{pool_id}/capacity?from=&to=``: the pool's planned targets over the
  period next to what it had (samples the reconciler records at each pass).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from marshmallow import Schema, fields, validate

from deskpool.api.context import Call
from deskpool.api.pagination import Page, PageQuery, page_schema, paginate, text_cursor
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.api.values import Day, Instant
from deskpool.errors import FieldError, ValidationFailed
from deskpool.ids import parse_id
from deskpool.schedules import service
from deskpool.schedules.model import (
    DAYS,
    MAX_COUNT,
    MAX_EXCEPTIONS,
    MAX_LOGOFF_WAIT,
    MAX_MESSAGE_LENGTH,
    MAX_NAME_LENGTH,
    MAX_PHASES,
    IdlePolicy,
    InForce,
    LogoffScope,
    Schedule,
    ScheduleSettings,
    exception_doc,
    exception_of,
    phase_at,
    phase_doc,
    phase_of,
    targets_of,
)
from deskpool.schedules.store import ScheduleRecord

_IDLE = [str(policy) for policy in IdlePolicy]
_SCOPES = [str(scope) for scope in LogoffScope]
_UNITS = ["count", "percent"]
_HHMM = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"

# ---------------------------------------------------------------------------------- schemas


class ScheduleLogoffSchema(Schema):
    """Sessions logged off after a warning (a phase that lowers capacity)."""

    scope = fields.String(
        load_default="disconnected",
        validate=validate.OneOf(_SCOPES),
        metadata={
            "enum": _SCOPES,
            "description": "disconnected: sessions whose connection is closed; idle: those "
            "and connected sessions without input.",
        },
    )
    wait_seconds = fields.Integer(
        load_default=900,
        validate=validate.Range(0, MAX_LOGOFF_WAIT),
        metadata={"description": "How long after the warning the log-off is."},
    )
    message = fields.String(
        load_default="",
        validate=validate.Length(0, MAX_MESSAGE_LENGTH),
        metadata={"description": "What the user is told."},
    )


class PhaseSettingsSchema(Schema):
    """What a phase asks of a pool."""

    min_ready = fields.Integer(
        load_default=0,
        validate=validate.Range(0, MAX_COUNT),
        metadata={"description": "Desktops kept powered on and ready for users."},
    )
    min_ready_unit = fields.String(
        load_default="count",
        validate=validate.OneOf(_UNITS),
        metadata={
            "enum": _UNITS,
            "description": "count, or percent of the pool's max_size (rounded up).",
        },
    )
    spare = fields.Integer(
        load_default=0,
        validate=validate.Range(0, MAX_COUNT),
        metadata={"description": "Free ready desktops kept on top of those in use."},
    )
    idle = fields.String(
        load_default="keep",
        validate=validate.OneOf(_IDLE),
        metadata={
            "enum": _IDLE,
            "description": "Free desktops beyond min_ready and spare: keep running, or "
            "power_off (never one in use).",
        },
    )
    logoff = fields.Nested(ScheduleLogoffSchema, allow_none=True, load_default=None)


class PhaseSchema(PhaseSettingsSchema):
    """A weekly phase: in force from its start on each of its days until the next phase starts."""

    name = fields.String(required=True, validate=validate.Length(1, MAX_NAME_LENGTH))
    days = fields.List(
        fields.String(validate=validate.OneOf(DAYS), metadata={"enum": list(DAYS)}),
        required=True,
        validate=validate.Length(1, 7),
        metadata={"uniqueItems": True},
    )
    start = fields.String(
        required=True,
        validate=validate.Regexp(_HHMM),
        metadata={
            "pattern": _HHMM,
            "description": "Local start time, HH:MM. A time skipped by a change to summer "
            "time starts the phase when the gap ends; a time that happens twice, at its first "
            "occurrence.",
        },
    )


class ScheduleExceptionSchema(Schema):
    """Local dates ``first`` to ``last`` that run a named phase, or settings of their own."""

    name = fields.String(required=True, validate=validate.Length(1, MAX_NAME_LENGTH))
    first = Day(required=True)
    last = Day(load_default=None, allow_none=True, metadata={"description": "Default: first."})
    phase = fields.String(
        load_default=None,
        allow_none=True,
        metadata={"description": "A phase of the schedule to run all day."},
    )
    settings = fields.Nested(
        PhaseSettingsSchema,
        load_default=None,
        allow_none=True,
        metadata={"description": "Settings of its own, when it names no phase."},
    )


class ScheduleInputSchema(Schema):
    """A schedule to create, or the whole of one to replace."""

    name = fields.String(required=True, validate=validate.Length(1, MAX_NAME_LENGTH))
    time_zone = fields.String(
        required=True,
        validate=validate.Length(1, 64),
        metadata={"description": "An IANA time zone, for example Europe/Berlin."},
    )
    phases = fields.List(
        fields.Nested(PhaseSchema), required=True, validate=validate.Length(1, MAX_PHASES)
    )
    exceptions = fields.List(
        fields.Nested(ScheduleExceptionSchema),
        load_default=list,
        validate=validate.Length(0, MAX_EXCEPTIONS),
    )


class InForceSchema(Schema):
    """The phase in force now."""

    phase = fields.String(required=True)
    exception = fields.String(required=True, allow_none=True)
    since = fields.AwareDateTime(required=True)


class ScheduleSchema(Schema):
    """A schedule."""

    id = fields.String(required=True)
    name = fields.String(required=True)
    time_zone = fields.String(required=True)
    phases = fields.List(fields.Nested(PhaseSchema), required=True)
    exceptions = fields.List(fields.Nested(ScheduleExceptionSchema), required=True)
    generation = fields.Integer(required=True)
    in_force = fields.Nested(
        InForceSchema,
        required=True,
        allow_none=True,
        metadata={
            "description": (
                "The phase in force now; null when none is, or when a stored date is beyond "
                "what can be computed (its pools then show a `reconcile_error`)."
            )
        },
    )
    created_at = fields.AwareDateTime(required=True)
    updated_at = fields.AwareDateTime(required=True)


class PreviewInputSchema(ScheduleInputSchema):
    """A schedule (saved or not) and the period to preview."""

    from_ = Instant(required=True, data_key="from")
    to = Instant(required=True)
    max_size = fields.Integer(
        load_default=10,
        validate=validate.Range(1, MAX_COUNT),
        metadata={"description": "The pool size percentages are taken of."},
    )


class PlannedTargetsSchema(Schema):
    """From ``since``, the targets of a phase."""

    since = fields.AwareDateTime(required=True)
    phase = fields.String(required=True, allow_none=True)
    exception = fields.String(required=True, allow_none=True)
    min_ready = fields.Integer(required=True)
    spare = fields.Integer(required=True)
    idle = fields.String(required=True, metadata={"enum": _IDLE})


class SchedulePreviewSchema(Schema):
    """The targets over the period, one entry per change."""

    items = fields.List(fields.Nested(PlannedTargetsSchema), required=True)


class CapacityQuery(Schema):
    """The period: default from a week ago to a week ahead (at most 31 days)."""

    from_ = Instant(data_key="from", load_default=None)
    to = Instant(load_default=None)


class CapacitySampleSchema(Schema):
    """What the pool had at a reconciliation pass."""

    at = fields.AwareDateTime(required=True)
    ready = fields.Integer(required=True, metadata={"description": "Free, ready, powered on."})
    in_use = fields.Integer(required=True)
    powered_off = fields.Integer(required=True)
    other = fields.Integer(
        required=True, metadata={"description": "Provisioning, refreshing, failed..."}
    )
    phase = fields.String(required=True, allow_none=True)
    min_ready = fields.Integer(required=True, allow_none=True)
    spare = fields.Integer(required=True, allow_none=True)


class CapacitySchema(Schema):
    """A pool's planned targets over a period next to what it had."""

    planned = fields.List(fields.Nested(PlannedTargetsSchema), required=True)
    actual = fields.List(fields.Nested(CapacitySampleSchema), required=True)


# ---------------------------------------------------------------------------------- views


def _in_force(found: InForce | None) -> dict[str, Any] | None:
    if found is None:
        return None
    return {"phase": found.phase, "exception": found.exception, "since": found.since}


def _phase_now(schedule: Schedule) -> InForce | None:
    """The phase in force now; ``None`` too when a stored date is out of the calendar's reach."""
    try:
        return phase_at(schedule, datetime.now(UTC))
    except (ArithmeticError, ValueError):
        return None  # its pools say why in their reconcile_error


def schedule_view(record: ScheduleRecord) -> dict[str, Any]:
    """A schedule as the API shows it."""
    schedule = record.schedule
    return {
        "id": str(schedule.id),
        "name": schedule.name,
        "time_zone": schedule.time_zone,
        "phases": [phase_doc(phase) for phase in schedule.phases],
        "exceptions": [
            {**exception_doc(exception), "first": exception.first, "last": exception.last}
            for exception in schedule.exceptions
        ],
        "generation": schedule.generation,
        "in_force": _in_force(_phase_now(schedule)),
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }


def _targets_view(item: service.PlannedTargets) -> dict[str, Any]:
    return {
        "since": item.since,
        "phase": item.phase,
        "exception": item.exception,
        "min_ready": item.min_ready,
        "spare": item.spare,
        "idle": item.idle,
    }


def _schedule_id(call: Call) -> Any:
    return parse_id(call.path_param("schedule_id"), "schedule")


# ----------------------------------------------------------------------------------- routes

#: The schedule operations and a pool's capacity.
ROUTES = RouteTable()


def schedule_settings(body: Mapping[str, Any]) -> ScheduleSettings:
    """A loaded ``ScheduleInput`` document as the settings the schedule services take.

    :raises ValidationFailed: a day or a time that does not parse, at its pointer (the rest
        is :func:`~deskpool.schedules.model.validate_schedule`'s, in the service).
    """
    errors: list[FieldError] = []
    phases = []
    for index, doc in enumerate(body.get("phases", [])):
        try:
            phases.append(phase_of(doc))
        except (ValueError, KeyError):
            errors.append(FieldError(f"/phases/{index}", "has an unknown day or an invalid start"))
    exceptions = []
    for index, doc in enumerate(body.get("exceptions", [])):
        try:
            exceptions.append(exception_of(doc))
        except (ValueError, KeyError):
            errors.append(FieldError(f"/exceptions/{index}", "has an invalid date"))
    if errors:
        raise ValidationFailed(errors)
    return ScheduleSettings(
        name=str(body["name"]),
        time_zone=str(body["time_zone"]),
        phases=tuple(phases),
        exceptions=tuple(exceptions),
    )


_ONE = "/api/v1/schedules/{schedule_id}"


@ROUTES.route(
    "POST",
    "/api/v1/schedules",
    summary="Create a schedule",
    description="422 for invalid phases or exceptions; 409 `schedule_name_taken`.",
    tags=("schedules",),
    permission="schedules:manage",
    body=ScheduleInputSchema,
    responses={201: ResponseSpec("The schedule.", ScheduleSchema)},
)
async def create_schedule(call: Call) -> Reply:
    record = await service.create_schedule(call.runtime, call.actor, schedule_settings(call.body))
    return Reply(schedule_view(record), 201)


@ROUTES.route(
    "GET",
    "/api/v1/schedules",
    summary="List schedules",
    description="By name, each with the phase in force now.",
    tags=("schedules",),
    permission="schedules:read",
    query=PageQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of schedules.", page_schema(ScheduleSchema))},
)
async def list_schedules(call: Call) -> Page:
    limit = int(call.query["limit"])
    records = await service.list_schedules(
        call.runtime, limit=limit + 1, after=text_cursor(call.query.get("cursor"))
    )
    page = paginate(records, limit, lambda record: record.schedule.name)
    return Page([schedule_view(record) for record in page.items], page.next)


@ROUTES.route(
    "GET",
    _ONE,
    summary="Show a schedule",
    description="Its phases, exceptions and the phase in force now.",
    tags=("schedules",),
    permission="schedules:read",
    responses={200: ResponseSpec("The schedule.", ScheduleSchema)},
)
async def get_schedule(call: Call) -> dict[str, Any]:
    return schedule_view(await service.get_schedule(call.runtime, _schedule_id(call)))


@ROUTES.route(
    "PUT",
    _ONE,
    summary="Replace a schedule",
    description="The pools using it are reconciled to the new phase in force at once.",
    tags=("schedules",),
    permission="schedules:manage",
    body=ScheduleInputSchema,
    responses={200: ResponseSpec("The schedule.", ScheduleSchema)},
)
async def replace_schedule(call: Call) -> dict[str, Any]:
    settings = schedule_settings(call.body)
    record = await service.replace_schedule(call.runtime, call.actor, _schedule_id(call), settings)
    return schedule_view(record)


@ROUTES.route(
    "DELETE",
    _ONE,
    summary="Delete a schedule",
    description="409 `schedule_in_use` while a pool references it.",
    tags=("schedules",),
    permission="schedules:manage",
    responses={204: ResponseSpec("Deleted.")},
)
async def delete_schedule(call: Call) -> Reply:
    await service.delete_schedule(call.runtime, call.actor, _schedule_id(call))
    return Reply(None, 204)


@ROUTES.route(
    "POST",
    "/api/v1/schedule-preview",
    summary="Preview a schedule",
    description=(
        "The phases a schedule (saved or not) puts in force from `from` to `to` (at most 31 "
        "days), with the targets they set for a pool of `max_size`. Nothing is stored."
    ),
    tags=("schedules",),
    permission="schedules:read",
    body=PreviewInputSchema,
    responses={200: ResponseSpec("The targets over the period.", SchedulePreviewSchema)},
)
async def preview_schedule(call: Call) -> dict[str, Any]:
    body = call.body
    schedule = service.checked_schedule(uuid.UUID(int=0), schedule_settings(body))
    items = []
    for change in service.preview(schedule, body["from_"], body["to"]):
        targets = targets_of(change.settings, body["max_size"])
        items.append(
            {
                "since": change.since,
                "phase": change.phase,
                "exception": change.exception,
                "min_ready": targets.min_ready,
                "spare": targets.spare,
                "idle": str(targets.idle),
            }
        )
    return {"items": items}


@ROUTES.route(
    "GET",
    "/api/v1/pools/{pool_id}/capacity",
    summary="A pool's planned and actual capacity",
    description=(
        "The targets the pool's schedule plans from `from` to `to` (default: a week ago to a "
        "week ahead; at most 31 days), one entry per change, next to what the pool had at "
        "each reconciliation pass (ready, in use, powered off, other). A pool without a "
        "schedule plans its min_size and spare. 409 `schedule_unusable` when the stored "
        "schedule's dates cannot be computed."
    ),
    tags=("pools",),
    permission="pools:read",
    query=CapacityQuery,
    responses={200: ResponseSpec("Planned and actual capacity.", CapacitySchema)},
)
async def pool_capacity(call: Call) -> dict[str, Any]:
    pool_id = parse_id(call.path_param("pool_id"), "pool")
    now = datetime.now(UTC)
    start = call.query.get("from_") or now - timedelta(days=7)
    end = call.query.get("to") or now + timedelta(days=7)
    capacity = await service.pool_capacity(call.runtime, pool_id, start, end)
    return {
        "planned": [_targets_view(item) for item in capacity.planned],
        "actual": [
            {
                "at": sample.at,
                "ready": sample.ready,
                "in_use": sample.in_use,
                "powered_off": sample.powered_off,
                "other": sample.other,
                "phase": sample.phase,
                "min_ready": sample.min_ready,
                "spare": sample.spare,
            }
            for sample in capacity.actual
        ],
    }
