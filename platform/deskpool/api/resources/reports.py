"""Reports (``reports:read``): usage, and the percentiles of each logon phase.

``GET /api/v1/reports/usage`` computes a period's figures per hour or per day from the recorded
sessions and logons (:mod:`deskpool.reports`), for one pool or for all; ``Accept: text/csv``
gives the same buckets as CSV. ``GET /api/v1/reports/logon-phases`` gives the median and 95th
percentile of each phase of the logons asked in a period (the console's pool page shows them).
"""

from __future__ import annotations

import csv
import io
from typing import Any

from aiohttp import web
from marshmallow import Schema, fields, validate

from deskpool.api.context import Call
from deskpool.api.problems import PROBLEM_CONTENT_TYPE, ProblemSchema
from deskpool.api.resources.session_schemas import phase_field
from deskpool.api.routes import ResponseSpec, RouteTable
from deskpool.api.values import Instant
from deskpool.reports import service
from deskpool.reports.model import MAX_BUCKETS, BucketSize, csv_rows
from deskpool.reports.phases import MAX_SPAN, TIMED_PHASES

#: The report operations.
ROUTES = RouteTable()

CSV_TYPE = "text/csv"


class PeriodQuery(Schema):
    """A report's period and its pool."""

    start = Instant(
        data_key="from", required=True, metadata={"description": "Start of the period."}
    )
    end = Instant(
        data_key="to", required=True, metadata={"description": "End of the period, excluded."}
    )
    pool_id = fields.UUID(metadata={"description": "Only this pool (all pools when left out)."})


class UsageQuery(PeriodQuery):
    """The period, the bucket size and the pool of a usage report."""

    bucket = fields.String(
        load_default="hour",
        validate=validate.OneOf([size.value for size in BucketSize]),
        metadata={
            "description": (
                f"`hour` (at most {MAX_BUCKETS[BucketSize.HOUR]} buckets) or `day` (at most "
                f"{MAX_BUCKETS[BucketSize.DAY]}); buckets are UTC, and the period is widened "
                "to whole buckets."
            )
        },
    )


class UsageFiguresSchema(Schema):
    """What a bucket (or the whole period) holds."""

    start = fields.AwareDateTime(required=True)
    end = fields.AwareDateTime(required=True)
    peak_concurrent = fields.Integer(
        required=True, metadata={"description": "Most user sessions open at once."}
    )
    mean_concurrent = fields.Float(
        required=True,
        metadata={"description": "Sessions open on average (time-weighted over the bucket)."},
    )
    sessions_started = fields.Integer(required=True)
    distinct_users = fields.Integer(
        required=True, metadata={"description": "Users with a session open during it."}
    )
    connected_hours = fields.Float(
        required=True, metadata={"description": "Session time inside it, in hours."}
    )
    logons = fields.Integer(required=True, metadata={"description": "Logons asked in it."})
    failed_connections = fields.Integer(
        required=True, metadata={"description": "Logons asked in it that stopped."}
    )
    failed_by_reason = fields.Dict(
        keys=fields.String(),
        values=fields.Integer(),
        required=True,
        metadata={"description": "Failed logons by `failure_reason` (see a session's logon)."},
    )
    logon_seconds_p50 = fields.Float(
        required=True,
        allow_none=True,
        metadata={"description": "Median seconds from request to first frame (nearest rank)."},
    )
    logon_seconds_p95 = fields.Float(
        required=True,
        allow_none=True,
        metadata={"description": "95th percentile of the same (nearest rank)."},
    )


class UsageReportSchema(Schema):
    """A usage report: the period's totals and its buckets."""

    start = fields.AwareDateTime(data_key="from", required=True)
    end = fields.AwareDateTime(data_key="to", required=True)
    bucket = fields.String(required=True)
    pool_id = fields.String(required=True, allow_none=True)
    generated_at = fields.AwareDateTime(
        required=True, metadata={"description": "Open sessions are counted up to this instant."}
    )
    totals = fields.Nested(UsageFiguresSchema, required=True)
    buckets = fields.List(fields.Nested(UsageFiguresSchema), required=True)


class PhaseSpreadSchema(Schema):
    """How many logons reached a phase, and the percentiles of its time."""

    reached = fields.Integer(required=True, metadata={"description": "Logons that reached it."})
    seconds_p50 = fields.Float(
        required=True,
        allow_none=True,
        metadata={"description": "Median seconds (nearest rank); null when none reached it."},
    )
    seconds_p95 = fields.Float(
        required=True,
        allow_none=True,
        metadata={"description": "95th percentile of the seconds (nearest rank)."},
    )


class PhaseFiguresSchema(PhaseSpreadSchema):
    """One phase: seconds from the phase reached before it to this one."""

    phase = phase_field(TIMED_PHASES)


class LogonPhasesReportSchema(Schema):
    """The logons asked in a period: outcomes, and the percentiles of each phase."""

    start = fields.AwareDateTime(data_key="from", required=True)
    end = fields.AwareDateTime(data_key="to", required=True)
    pool_id = fields.String(required=True, allow_none=True)
    generated_at = fields.AwareDateTime(required=True)
    logons = fields.Integer(required=True, metadata={"description": "Logons asked in it."})
    connected = fields.Integer(required=True, metadata={"description": "Those that drew."})
    failed = fields.Integer(required=True, metadata={"description": "Those that stopped."})
    pending = fields.Integer(required=True, metadata={"description": "Those still under way."})
    phases = fields.List(
        fields.Nested(PhaseFiguresSchema),
        required=True,
        metadata={
            "description": (
                "Every phase after `asked`, in order; a failed or pending logon counts for the "
                "phases it reached."
            )
        },
    )
    to_first_frame = fields.Nested(
        PhaseSpreadSchema,
        required=True,
        metadata={"description": "Request to first frame, of the logons that drew."},
    )


def wants_csv(request: web.Request) -> bool:
    """Whether the caller asked for CSV (``Accept: text/csv``) rather than JSON."""
    accept = request.headers.get("Accept", "")
    return any(part.split(";")[0].strip() == CSV_TYPE for part in accept.split(","))


@ROUTES.route(
    "GET",
    "/api/v1/reports/usage",
    summary="Usage report",
    description=(
        "Per hour or per day of a period, for one pool or for all: the peak and mean concurrent "
        "sessions, sessions started, distinct users, connected hours, failed connections by "
        "reason and logon duration percentiles, computed from the recorded sessions and "
        "logons. `Accept: text/csv` answers the buckets as CSV (one `failed_<reason>` column "
        "per reason). 422 when `to` is not after `from` or the period has too many buckets."
    ),
    tags=("reports",),
    permission="reports:read",
    query=UsageQuery,
    responses={
        200: ResponseSpec("The report.", UsageReportSchema, also=(CSV_TYPE,)),
        404: ResponseSpec(
            "No pool has the id `pool_id`.", ProblemSchema, content_type=PROBLEM_CONTENT_TYPE
        ),
    },
)
async def usage_report(call: Call) -> Any:
    query = call.query
    report = await service.usage_report(
        call.runtime,
        start=query["start"],
        end=query["end"],
        bucket=BucketSize(query["bucket"]),
        pool_id=query.get("pool_id"),
    )
    if not wants_csv(call.request):
        return report
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(csv_rows(report["buckets"]))
    return web.Response(
        text=out.getvalue(),
        content_type=CSV_TYPE,
        headers={"Content-Disposition": 'attachment; filename="usage.csv"'},
    )


@ROUTES.route(
    "GET",
    "/api/v1/reports/logon-phases",
    summary="Logon phase percentiles",
    description=(
        f"Over the logons asked in a period (at most {MAX_SPAN.days} days), for one pool or for "
        "all: how many connected, failed or are pending, and for each phase the number of "
        "logons that reached it with the median and 95th percentile (nearest rank) of the "
        "seconds from the phase before it, as a session's `logon` shows them. 422 when `to` is "
        "not after `from` or the period is too long."
    ),
    tags=("reports",),
    permission="reports:read",
    query=PeriodQuery,
    responses={
        200: ResponseSpec("The phases.", LogonPhasesReportSchema),
        404: ResponseSpec(
            "No pool has the id `pool_id`.", ProblemSchema, content_type=PROBLEM_CONTENT_TYPE
        ),
    },
)
async def logon_phases(call: Call) -> Any:
    query = call.query
    return await service.logon_phases(
        call.runtime, start=query["start"], end=query["end"], pool_id=query.get("pool_id")
    )
