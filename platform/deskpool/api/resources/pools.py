"""Desktop pools (``pools:read`` / ``pools:manage``).

The foundation serves the list so that the protection rules can be seen; the pool resource
itself (create, change, reconcile) arrives with the pools work.
"""

from __future__ import annotations

from marshmallow import Schema, fields

from deskpool.api.context import Call
from deskpool.api.pagination import Page, PageQuery, page_schema
from deskpool.api.routes import ResponseSpec, RouteTable


class PoolSchema(Schema):
    """A desktop pool."""

    id = fields.String(required=True)
    name = fields.String(required=True)


def register(routes: RouteTable) -> None:
    """Add the pool operations."""

    @routes.route(
        "GET",
        "/api/v1/pools",
        summary="List desktop pools",
        tags=("pools",),
        permission="pools:read",
        query=PageQuery,
        paginated=True,
        responses={200: ResponseSpec("A page of pools.", page_schema(PoolSchema))},
    )
    async def list_pools(call: Call) -> Page:
        return Page(items=[], next=None)
