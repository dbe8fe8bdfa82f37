"""Cluster connections (``clusters:read`` / ``clusters:manage``), and the console's setup state.

A cluster connection names the hypervisor driver that reaches the cluster, its endpoint, TLS
settings (verification, a CA certificate, or a pinned SHA-256 fingerprint), driver options and
credentials. Credentials are write-only: they are sealed by the secret store and a response says
only whether they are set and when they last changed. Credentials and options must match the
fields the driver declares (``GET /api/v1/drivers``); then the driver validates settings and
credentials before anything is stored (a refusal is 422 ``driver_configuration_invalid``); an
unknown driver is 422 with the installed ones listed in ``installed``.

``POST /api/v1/clusters/{cluster_id}/check`` connects with the driver and reports what it found,
or the driver's error, as a result (never as a failed request); the outcome is kept on the
record. Nodes and templates are read from the cluster when asked. A cluster whose driver is no
longer installed still lists (``driver_status: not_installed``); what needs the driver answers
503 ``driver_not_installed``.

Every change is recorded in the audit trail in the same transaction; credentials never appear
in it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from marshmallow import Schema

from deskpool.api.context import Call
from deskpool.api.pagination import (
    Page,
    PageQuery,
    decode_cursor,
    page_schema,
    paginate,
    text_cursor,
)
from deskpool.api.resources.cluster_schemas import (
    DRIVER_PROBLEMS,
    CheckResultSchema,
    ClusterChangeSchema,
    ClusterCreateSchema,
    ClusterQuery,
    ClusterSchema,
    NodeSchema,
    SetupSchema,
    TemplateSchema,
    change_cluster_command,
    create_cluster_command,
    is_storable,
)
from deskpool.api.routes import Handler, Reply, ResponseSpec, RouteTable
from deskpool.clusters import service
from deskpool.clusters.drivers import DriverManager, driver_manager_for
from deskpool.clusters.repository import ClusterRecord
from deskpool.drivers import Node, Template
from deskpool.errors import InvalidCursor
from deskpool.ids import parse_id

T = TypeVar("T")

#: The cluster operations and ``GET /api/v1/setup``.
ROUTES = RouteTable()


# ---------------------------------------------------------------------------------- views


def cluster_view(record: ClusterRecord, manager: DriverManager) -> dict[str, Any]:
    """A cluster connection as the API shows it (credentials described, never shown)."""
    settings = record.settings
    return {
        "id": str(record.id),
        "name": record.name,
        "driver": record.driver,
        "driver_status": manager.status_of(record.driver),
        "endpoint": settings.endpoint,
        "tls": {
            "verify": settings.tls_verify,
            "ca_certificate": settings.ca_certificate,
            "fingerprint": settings.fingerprint,
        },
        "options": service.visible_options(manager, record),
        "credentials": record.credentials,
        "secret_options": record.secret_options,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "last_check_at": record.last_check_at,
        "last_check_ok": record.last_check_ok,
        "last_check_error": record.last_check_error,
    }


def cluster_id_of(call: Call) -> uuid.UUID:
    """The ``{cluster_id}`` of the path; anything but a UUID is a 404."""
    return parse_id(call.path_param("cluster_id"), "cluster")


def _page_in_memory(call: Call, items: list[T], key: Callable[[T], Any]) -> Page:
    """A page of ``items`` (sorted by ``key``) after the cursor, for lists read from a cluster."""
    after = decode_cursor(call.query.get("cursor"))
    ordered = sorted(items, key=key)
    if after is not None:
        try:
            ordered = [item for item in ordered if key(item) > after]
        except TypeError:
            raise InvalidCursor() from None
    limit = int(call.query["limit"])
    return paginate(ordered[: limit + 1], limit, key)


def _node_key(node: Node) -> str:
    return node.name


def _template_key(template: Template) -> list[str]:
    return [template.name, template.id]


# ----------------------------------------------------------------------------------- routes


@ROUTES.route(
    "GET",
    "/api/v1/setup",
    summary="Whether a cluster is connected, and whether the caller may connect one",
    description=(
        "The console asks this after sign-in: with no cluster connected, a caller who may "
        "connect one is led to do so, others are told to ask an administrator. Every "
        "signed-in caller learns whether a cluster is connected and what they may do; the "
        "number of clusters only with `clusters:read`, the installed drivers only with "
        "`clusters:manage`."
    ),
    tags=("setup",),
    permission=None,
    authenticated=True,
    responses={200: ResponseSpec("The setup state.", SetupSchema)},
)
async def get_setup(call: Call) -> dict[str, Any]:
    principal = call.caller
    census = await service.census(call.runtime)
    may_connect = principal.may("clusters:manage")
    setup: dict[str, Any] = {
        "cluster_connected": census.connected,
        "can_connect_cluster": may_connect,
        "is_platform_admin": principal.effective.is_platform_admin,
    }
    # What only administrators act on stays with them: drivers and counts.
    if principal.may("clusters:read"):
        setup["cluster_count"] = sum(census.by_driver.values())
    if may_connect:
        setup["installed_drivers"] = census.installed
    return setup


@ROUTES.route(
    "GET",
    "/api/v1/clusters",
    summary="List cluster connections",
    description="In name order; filter by driver.",
    tags=("clusters",),
    permission="clusters:read",
    query=ClusterQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of clusters.", page_schema(ClusterSchema))},
)
async def list_clusters(call: Call) -> Page:
    manager = driver_manager_for(call.runtime)
    limit = int(call.query["limit"])
    after = text_cursor(call.query.get("cursor"))
    if after is not None and not is_storable(after):
        raise InvalidCursor()
    records = await service.list_clusters(
        call.runtime, limit=limit + 1, after_name=after, driver=call.query.get("driver")
    )
    return paginate([cluster_view(r, manager) for r in records], limit, lambda item: item["name"])


@ROUTES.route(
    "POST",
    "/api/v1/clusters",
    summary="Connect a cluster",
    description=(
        "Credentials and options are checked against the fields the driver declares "
        "(`GET /api/v1/drivers`; 422 `validation_failed`, each error at its member, such as "
        "`/credentials/token_id`), then the driver checks the settings and credentials "
        "without connecting (a refusal is 422 `driver_configuration_invalid`); "
        "`POST .../check` then connects. An unknown driver is 422 with the installed "
        "drivers in `installed`; a name in use, 409 "
        "`cluster_name_taken`; credentials without a configured master key, 503 "
        "`secrets_key_missing`."
    ),
    tags=("clusters",),
    permission="clusters:manage",
    body=ClusterCreateSchema,
    responses={201: ResponseSpec("The new cluster.", ClusterSchema)},
)
async def create_cluster(call: Call) -> Reply:
    command = create_cluster_command(call.body)
    record = await service.create_cluster(call.runtime, call.actor, command)
    return Reply(cluster_view(record, driver_manager_for(call.runtime)), 201)


@ROUTES.route(
    "GET",
    "/api/v1/clusters/{cluster_id}",
    summary="Get a cluster connection",
    tags=("clusters",),
    permission="clusters:read",
    responses={200: ResponseSpec("The cluster.", ClusterSchema)},
)
async def get_cluster(call: Call) -> dict[str, Any]:
    record = await service.get_cluster(call.runtime, cluster_id_of(call))
    return cluster_view(record, driver_manager_for(call.runtime))


@ROUTES.route(
    "PATCH",
    "/api/v1/clusters/{cluster_id}",
    summary="Change a cluster connection",
    description=(
        "Members given replace the stored ones (`tls` member by member; `options` and "
        "`credentials` whole; `credentials: null` removes them). A change to how the "
        "cluster is reached is checked against the driver's declared fields and by the "
        "driver first, as on creation (when the driver is installed)."
    ),
    tags=("clusters",),
    permission="clusters:manage",
    body=ClusterChangeSchema,
    responses={200: ResponseSpec("The cluster.", ClusterSchema)},
)
async def update_cluster(call: Call) -> dict[str, Any]:
    change = change_cluster_command(call.body)
    record = await service.change_cluster(call.runtime, call.actor, cluster_id_of(call), change)
    return cluster_view(record, driver_manager_for(call.runtime))


@ROUTES.route(
    "DELETE",
    "/api/v1/clusters/{cluster_id}",
    summary="Delete a cluster connection",
    description=(
        "Its credentials are deleted with it. 409 `cluster_in_use` while pools provision "
        "on it. Virtual machines on the cluster are not touched."
    ),
    tags=("clusters",),
    permission="clusters:manage",
    responses={204: ResponseSpec("Deleted.")},
)
async def delete_cluster(call: Call) -> Reply:
    await service.delete_cluster(call.runtime, call.actor, cluster_id_of(call))
    return Reply(None, 204)


@ROUTES.route(
    "POST",
    "/api/v1/clusters/{cluster_id}/check",
    summary="Check a cluster connection",
    description=(
        "Connects with the cluster's driver and credentials and reports the product and "
        "version found, or the driver's error (`ok: false`, with the error's code), as a "
        "200 result; the outcome is kept as the cluster's `last_check_*`. 503 "
        "`driver_not_installed` when the cluster's driver is not installed."
    ),
    tags=("clusters",),
    permission="clusters:manage",
    responses={200: ResponseSpec("The outcome of the check.", CheckResultSchema)},
)
async def check_cluster(call: Call) -> service.CheckResult:
    return await service.check_cluster(call.runtime, call.actor, cluster_id_of(call))


def _read_from_cluster(what: str, schema: type[Schema]) -> Callable[[Handler], Handler]:
    """Declare ``GET /api/v1/clusters/{cluster_id}/<what>``, a list the cluster is asked for."""
    return ROUTES.route(
        "GET",
        f"/api/v1/clusters/{{cluster_id}}/{what}",
        summary=f"List the {what} of a cluster",
        description="Read from the cluster now, in name order.",
        tags=("clusters",),
        permission="clusters:read",
        query=PageQuery,
        paginated=True,
        responses={
            200: ResponseSpec(f"A page of {what}.", page_schema(schema)),
            **DRIVER_PROBLEMS,
        },
    )


@_read_from_cluster("nodes", NodeSchema)
async def list_cluster_nodes(call: Call) -> Page:
    nodes = await service.list_nodes(call.runtime, cluster_id_of(call))
    return _page_in_memory(call, nodes, _node_key)


@_read_from_cluster("templates", TemplateSchema)
async def list_cluster_templates(call: Call) -> Page:
    templates = await service.list_templates(call.runtime, cluster_id_of(call))
    return _page_in_memory(call, templates, _template_key)
