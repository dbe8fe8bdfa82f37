"""Jobs (``jobs:read`` / ``jobs:manage``): inspect the queue, retry dead jobs, cancel queued ones.

A job is listed with its attempts, its last error and the history of its failed attempts, and
the resource it works on, so an operator can see why a desktop is stuck. Retrying and cancelling
are recorded in the audit trail in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from marshmallow import Schema, fields, validate

from deskpool.api.context import Call
from deskpool.api.pagination import Page, PageQuery, decode_cursor, page_schema, paginate
from deskpool.api.routes import Handler, ResponseSpec, RouteTable
from deskpool.errors import InvalidCursor, NotFound
from deskpool.jobs import queue, service
from deskpool.jobs.model import Job, JobState
from deskpool.values import ascii_int

_STATES = [state.value for state in JobState]

#: The job operations.
ROUTES = RouteTable()


class JobAttemptErrorSchema(Schema):
    """A failed attempt of a job."""

    attempt = fields.Integer(required=True)
    fence = fields.Integer(required=True, metadata={"description": "The attempt's lease token."})
    worker = fields.String(required=True, allow_none=True)
    error = fields.String(required=True)
    at = fields.String(required=True, metadata={"description": "When it failed (RFC 3339)."})


class JobSchema(Schema):
    """A job of the worker's queue."""

    id = fields.Integer(required=True)
    kind = fields.String(required=True)
    state = fields.String(required=True, validate=validate.OneOf(_STATES))
    payload = fields.Dict(required=True, metadata={"description": "The handler's arguments."})
    priority = fields.Integer(required=True)
    run_at = fields.AwareDateTime(required=True, metadata={"description": "When it is due."})
    attempts = fields.Integer(required=True, metadata={"description": "Attempts started."})
    max_attempts = fields.Integer(required=True)
    idempotency_key = fields.String(required=True, allow_none=True)
    resource_type = fields.String(required=True, allow_none=True)
    resource_id = fields.String(required=True, allow_none=True)
    resource_name = fields.String(
        required=True,
        allow_none=True,
        metadata={
            "description": "The resource's name (a desktop's, a pool's, a cluster's); null "
            "when it has none or no longer exists."
        },
    )
    worker = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "The worker holding (or that last held) the job's lease."},
    )
    lease_expires_at = fields.AwareDateTime(required=True, allow_none=True)
    heartbeat_at = fields.AwareDateTime(required=True, allow_none=True)
    reclaims = fields.Integer(
        required=True, metadata={"description": "Times its lease expired and was taken back."}
    )
    last_error = fields.String(required=True, allow_none=True)
    errors = fields.List(
        fields.Nested(JobAttemptErrorSchema),
        required=True,
        metadata={"description": "The latest failed attempts, oldest first."},
    )
    created_at = fields.AwareDateTime(required=True)
    updated_at = fields.AwareDateTime(required=True)
    started_at = fields.AwareDateTime(required=True, allow_none=True)
    finished_at = fields.AwareDateTime(required=True, allow_none=True)


class JobListQuery(PageQuery):
    """Filters of the job list."""

    state = fields.String(load_default=None, validate=validate.OneOf(_STATES))
    kind = fields.String(load_default=None, validate=validate.Length(min=1, max=200))
    resource_type = fields.String(load_default=None, validate=validate.Length(min=1, max=200))
    resource_id = fields.String(load_default=None, validate=validate.Length(min=1, max=200))


def job_id(call: Call) -> int:
    """The ``{id}`` of the path; a value that is no job id is a 404."""
    raw = call.path_param("id")
    number = ascii_int(raw)
    if number is None or number < 1 or not raw.isdigit():
        raise NotFound(f"No job has the id {raw!r}.")
    return number


def job_filter(query: dict[str, Any]) -> queue.JobFilter:
    """The filters of a validated list query."""
    state = query.get("state")
    return queue.JobFilter(
        state=JobState(state) if state else None,
        kind=query.get("kind"),
        resource_type=query.get("resource_type"),
        resource_id=query.get("resource_id"),
    )


def cursor_id(cursor: str | None) -> int | None:
    """The job id a list cursor continues below."""
    after = decode_cursor(cursor)
    if after is not None and not isinstance(after, int):
        raise InvalidCursor()
    return after


@ROUTES.route(
    "GET",
    "/api/v1/jobs",
    summary="List jobs",
    description="Newest first; filter by state, kind and the resource a job works on.",
    tags=("jobs",),
    permission="jobs:read",
    query=JobListQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of jobs.", page_schema(JobSchema))},
)
async def list_jobs(call: Call) -> Page:
    limit = int(call.query["limit"])
    jobs = await service.list_jobs(
        call.runtime,
        job_filter(call.query),
        limit=limit + 1,
        before_id=cursor_id(call.query.get("cursor")),
    )
    return paginate(jobs, limit, lambda job: job.id)


@ROUTES.route(
    "GET",
    "/api/v1/jobs/{id}",
    summary="Get a job",
    description="With its attempts, last error, error history and timestamps.",
    tags=("jobs",),
    permission="jobs:read",
    responses={200: ResponseSpec("The job.", JobSchema)},
)
async def get_job(call: Call) -> Job:
    return await service.get_job(call.runtime, job_id(call))


def _job_change(
    action: str, summary: str, description: str, done: str
) -> Callable[[Handler], Handler]:
    """Declare ``POST /api/v1/jobs/{id}/<action>``, a change of one job's state."""
    return ROUTES.route(
        "POST",
        f"/api/v1/jobs/{{id}}/{action}",
        summary=summary,
        description=description,
        tags=("jobs",),
        permission="jobs:manage",
        responses={200: ResponseSpec(done, JobSchema)},
    )


@_job_change(
    "retry",
    "Retry a dead job",
    "Gives a dead job a fresh set of attempts, due now. 409 unless it is dead.",
    "The job, queued again.",
)
async def retry_job(call: Call) -> Job:
    return await service.retry_job(call.runtime, call.actor, job_id(call))


@_job_change(
    "cancel",
    "Cancel a queued job",
    "A job that has not started is cancelled. 409 once it runs or has finished.",
    "The job, cancelled.",
)
async def cancel_job(call: Call) -> Job:
    return await service.cancel_job(call.runtime, call.actor, job_id(call))
