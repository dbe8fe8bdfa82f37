"""Usage reports (``reports:read``): concurrency, sessions, users, hours, failures, logon times.

``GET /api/v1/reports/usage`` computes a period's figures per hour or per day from the recorded
sessions and logons (:mod:`deskpool.reports`), for one pool or for all; ``Accept: text/csv``
gives the same buckets as CSV.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from aiohttp import web
from marshmallow import Schema, fields, validate

from deskpool.api.context import Call
from deskpool.api.problems import PROBLEM_CONTENT_TYPE, ProblemSchema
from deskpool.api.routes import ResponseSpec, RouteTable
from deskpool.reports import service
from deskpool.reports.model import MAX_BUCKETS, BucketSize, csv_rows

#: The report operations.
ROUTES = RouteTable()

CSV_TYPE = "text/csv"


class UsageQuery(Schema):
    """The period, the bucket size and the pool of a usage report."""

    start = fields.AwareDateTime(
        data_key="from",
        required=True,
        metadata={"description": "Start of the period (widened to the start of its bucket)."},
    )
    end = fields.AwareDateTime(
        data_key="to",
        required=True,
        metadata={"description": "End of the period, excluded (widened to a bucket's end)."},
    )
    bucket = fields.String(
        load_default="hour",
        validate=validate.OneOf([size.value for size in BucketSize]),
        metadata={
            "description": (
                f"`hour` (at most {MAX_BUCKETS[BucketSize.HOUR]} buckets) or `day` (at most "
                f"{MAX_BUCKETS[BucketSize.DAY]}); buckets are UTC."
            )
        },
    )
    pool_id = fields.UUID(metadata={"description": "Only this pool (all pools when left out)."})


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
