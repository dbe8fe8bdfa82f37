"""The installed hypervisor drivers and the connection fields each declares (``clusters:manage``).

``GET /api/v1/drivers`` is what the console builds its cluster form from: for each driver, the
name a cluster names it by, a title, what its endpoint is, and its fields: credentials
(``secret: true``, write-only: sent in a cluster's ``credentials``, never shown back) and
options (in ``options``). Creating or changing a cluster checks its credentials and options
against these fields (422, each error pointing at ``/credentials/<name>`` or
``/options/<name>``). Like ``installed_drivers`` of ``GET /api/v1/setup``, it is for callers
who may connect a cluster.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate

from deskpool.api.context import Call
from deskpool.api.pagination import Page, PageQuery, page_schema, paginate, text_cursor
from deskpool.api.routes import ResponseSpec, RouteTable
from deskpool.clusters import service
from deskpool.drivers import FieldKind

#: ``GET /api/v1/drivers``.
ROUTES = RouteTable()


class ConnectionFieldSchema(Schema):
    """One field of a driver's connection form."""

    name = fields.String(
        required=True, metadata={"description": "The key in `credentials` or `options`."}
    )
    label = fields.String(required=True)
    kind = fields.String(
        required=True,
        validate=validate.OneOf([kind.value for kind in FieldKind]),
        metadata={
            "description": (
                "The value it takes: `text`, `url`, `secret` (a password input) and `choice` "
                "are strings; `integer`, `number`, `boolean`; `list` (of strings); `json` (any "
                "value, which only the driver checks)."
            )
        },
    )
    required = fields.Boolean(required=True)
    default = fields.Raw(
        required=True,
        allow_none=True,
        metadata={"description": "The value the driver uses when the field is absent."},
    )
    help = fields.String(required=True)
    secret = fields.Boolean(
        required=True,
        metadata={
            "description": (
                "A write-only credential (sent in `credentials`, never shown back); otherwise "
                "an option (in `options`)."
            )
        },
    )
    choices = fields.List(
        fields.String(), required=True, metadata={"description": "The values of a `choice`."}
    )
    minimum = fields.Float(required=True, allow_none=True)
    maximum = fields.Float(required=True, allow_none=True)
    placeholder = fields.String(required=True, metadata={"description": "An example value."})
    sealed = fields.Boolean(
        required=True,
        metadata={
            "description": (
                "An option whose value is a secret: write-only (sent in `options`, sealed at "
                "rest like a credential, never shown back)."
            )
        },
    )
    sealed_keys = fields.List(
        fields.String(),
        required=True,
        metadata={
            "description": (
                "For a `json` option: the keys of its object value that are secrets, "
                "write-only like a `sealed` option."
            )
        },
    )


class DriverSchema(Schema):
    """An installed hypervisor driver."""

    name = fields.String(
        required=True, metadata={"description": "What a cluster's `driver` names it by."}
    )
    title = fields.String(required=True, metadata={"description": "What to call it."})
    endpoint_help = fields.String(required=True, metadata={"description": "What the endpoint is."})
    fields_ = fields.List(
        fields.Nested(ConnectionFieldSchema),
        required=True,
        data_key="fields",
        attribute="fields",
        metadata={"description": "Its credentials and options, in the order to show them."},
    )


def driver_view(driver: service.InstalledDriver) -> dict[str, Any]:
    """An installed driver as the API shows it."""
    return {
        "name": driver.name,
        "title": driver.title,
        "endpoint_help": driver.endpoint_help,
        "fields": [field.as_json() for field in driver.fields],
    }


@ROUTES.route(
    "GET",
    "/api/v1/drivers",
    summary="List the installed hypervisor drivers and their connection fields",
    description=(
        "In name order. A cluster's `credentials` and `options` must match its driver's "
        "`fields`: a credential (`secret: true`) is write-only; an undeclared name, a missing "
        "required field or a value of the wrong kind is 422 with the error at its member."
    ),
    tags=("clusters",),
    permission="clusters:manage",
    query=PageQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of drivers.", page_schema(DriverSchema))},
)
async def list_drivers(call: Call) -> Page:
    after = text_cursor(call.query.get("cursor"))
    limit = int(call.query["limit"])
    drivers = [
        driver_view(driver)
        for driver in service.installed_drivers(call.runtime)
        if after is None or driver.name > after
    ]
    return paginate(drivers[: limit + 1], limit, lambda item: item["name"])
