"""The audit trail over REST: ``GET /api/v1/audit-events``, newest first."""

from __future__ import annotations

from datetime import datetime

from deskpool.api.context import Call
from deskpool.api.pagination import Page, decode_cursor, page_schema, paginate
from deskpool.api.resources.identity_schemas import AuditEventSchema, AuditQuery
from deskpool.api.routes import ResponseSpec, RouteTable
from deskpool.audit import AUDIT_FILTERS
from deskpool.audit_query import list_audit_events as query_audit_events
from deskpool.errors import InvalidCursor

#: The audit trail.
ROUTES = RouteTable()


def _before(cursor: str | None) -> tuple[datetime, int] | None:
    after = decode_cursor(cursor)
    if after is None:
        return None
    try:
        at, last_id = after
        return datetime.fromisoformat(at), int(last_id)
    except (ValueError, TypeError):
        raise InvalidCursor() from None


@ROUTES.route(
    "GET",
    "/api/v1/audit-events",
    summary="List audit events, newest first",
    tags=("audit",),
    permission="audit:read",
    query=AuditQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of events.", page_schema(AuditEventSchema))},
)
async def list_audit_events(call: Call) -> Page:
    """A page of audit events, newest first."""
    limit = call.query["limit"]
    before = _before(call.query.get("cursor"))
    filters = {name: call.query.get(name) for name in AUDIT_FILTERS}
    rows = await query_audit_events(call.runtime, before=before, filters=filters, limit=limit + 1)
    return paginate(rows, limit, lambda r: [r["occurred_at"].isoformat(), r["id"]])
