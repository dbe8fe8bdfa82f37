"""Test-only operations, added to the API through the same hook a plugin uses.

They exist only in these tests: :class:`ExtraOperations` is registered on a runtime's plugin
manager, so the product's route table never contains them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from marshmallow import Schema, fields, validate

from deskpool.api.context import Call
from deskpool.api.pagination import Page, PageQuery, decode_cursor, page_schema, paginate
from deskpool.api.routes import ResponseSpec, RouteTable
from deskpool.plugins import hookimpl

PROBLEM = "application/problem+json"

#: ``await make_api_client(numbers=0, **settings)``: a test client (the conftest fixture).
ApiClientFactory = Callable[..., Awaitable[Any]]


class DiskSchema(Schema):
    """A nested object, to see pointers into lists."""

    size_gb = fields.Integer(required=True, validate=validate.Range(min=1))


class DesktopDraftSchema(Schema):
    """The body of the test-only ``POST /test/desktops``."""

    name = fields.String(required=True, validate=validate.Length(min=1, max=40))
    cpus = fields.Integer(load_default=2, validate=validate.Range(min=1, max=64))
    disks = fields.List(fields.Nested(DiskSchema), load_default=list)


class NumberSchema(Schema):
    """An item of the test-only list."""

    value = fields.Integer(required=True)


class ExtraOperations:
    """A plugin adding test-only operations (never part of the product)."""

    def __init__(self, numbers: int = 0) -> None:
        self.numbers = numbers
        #: How many times ``POST /test/contended/{failures}`` ran, by request.
        self.contended_runs: dict[int, int] = {}

    @hookimpl
    def deskpool_register_routes(self, routes: RouteTable) -> None:
        """Add ``POST /test/desktops``, ``GET /test/numbers``, ``GET /test/crash`` and more."""

        @routes.route(
            "POST",
            "/test/desktops",
            summary="Echo a desktop draft",
            tags=("test",),
            permission=None,
            body=DesktopDraftSchema,
            responses={201: ResponseSpec("The draft as read.", DesktopDraftSchema)},
        )
        async def create_test_desktop(call: Call) -> Any:
            return call.body

        @routes.route(
            "GET",
            "/test/numbers",
            summary="Count up",
            tags=("test",),
            permission=None,
            query=PageQuery,
            paginated=True,
            responses={200: ResponseSpec("A page of numbers.", page_schema(NumberSchema))},
        )
        async def list_test_numbers(call: Call) -> Page:
            after = decode_cursor(call.query["cursor"]) or 0
            limit = call.query["limit"]
            rows = [
                {"value": n} for n in range(after + 1, min(after + limit + 1, self.numbers) + 1)
            ]
            return paginate(rows, limit, lambda row: row["value"])

        @routes.route(
            "GET",
            "/test/crash",
            summary="Fail unexpectedly",
            tags=("test",),
            permission=None,
            responses={200: ResponseSpec("Never.")},
        )
        async def crash_test(call: Call) -> Any:
            raise RuntimeError("secret internal detail /srv/deskpool/x.py line 3")

        @routes.route(
            "POST",
            "/test/contended/{failures}",
            summary="Meet a deadlock the first {failures} times it is run",
            tags=("test",),
            permission=None,
            responses={200: ResponseSpec("The times it was run.")},
        )
        async def contended_test(call: Call) -> Any:
            runs = self.contended_runs.get(id(call.request), 0) + 1
            self.contended_runs[id(call.request)] = runs
            if runs <= int(call.request.match_info["failures"]):
                raise asyncpg.DeadlockDetectedError("deadlock detected")
            return {"runs": runs}
