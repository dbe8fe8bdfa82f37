"""Grants and OIDC group claim bindings over REST (both under the ``roles`` permissions)."""

from __future__ import annotations

from typing import Any

from deskpool.api.context import Call
from deskpool.api.pagination import Page, PageQuery, id_cursor, page_schema, paginate
from deskpool.api.resources.identity_schemas import (
    LAST_ADMIN,
    BindingCreateSchema,
    BindingSchema,
    GrantCreateSchema,
    GrantQuery,
    GrantSchema,
    problems,
)
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.identity import service
from deskpool.ids import parse_id

#: The grant and binding operations.
ROUTES = RouteTable()


@ROUTES.route(
    "GET",
    "/api/v1/grants",
    summary="List grants",
    tags=("roles",),
    permission="roles:read",
    query=GrantQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of grants.", page_schema(GrantSchema))},
)
async def list_grants(call: Call) -> Page:
    """A page of grants by id."""
    limit = call.query["limit"]
    rows = await service.list_grants(
        call.runtime.db,
        after=id_cursor(call.query.get("cursor")),
        subject_type=call.query.get("subject_type"),
        subject_id=call.query.get("subject_id"),
        role_key=call.query.get("role_key"),
        limit=limit + 1,
    )
    return paginate(rows, limit, lambda r: r["id"])


@ROUTES.route(
    "POST",
    "/api/v1/grants",
    summary="Grant a role or a permission to a user or a group",
    tags=("roles",),
    permission="roles:manage",
    body=GrantCreateSchema,
    responses={
        201: ResponseSpec("The grant.", GrantSchema),
        **problems(forbidden="the grant (the role's permissions, or the permission)"),
    },
    operation_id="createGrantOperation",
)
async def create_grant(call: Call) -> Reply:
    """Grant a role or a permission to a user or a group."""
    grant = await service.create_grant(
        call.runtime,
        call.actor,
        subject_type=call.body["subject_type"],
        subject_id=call.body["subject_id"],
        role_key=call.body.get("role_key"),
        permission=call.body.get("permission"),
    )
    return Reply(grant, 201)


@ROUTES.route(
    "DELETE",
    "/api/v1/grants/{grant_id}",
    summary="Revoke a grant",
    tags=("roles",),
    permission="roles:manage",
    responses={
        204: ResponseSpec("Revoked."),
        **problems(conflict=f"Refused: {LAST_ADMIN}."),
    },
)
async def delete_grant(call: Call) -> Reply:
    """Revoke a grant."""
    grant_id = parse_id(call.path_param("grant_id"), "grant")
    await service.delete_grant(call.runtime, call.actor, grant_id)
    return Reply(None, 204)


@ROUTES.route(
    "GET",
    "/api/v1/oidc-group-bindings",
    summary="List OIDC group claim bindings",
    tags=("roles",),
    permission="roles:read",
    query=PageQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of bindings.", page_schema(BindingSchema))},
)
async def list_bindings(call: Call) -> Page:
    """A page of OIDC group claim bindings by id."""
    limit = call.query["limit"]
    rows = await service.list_bindings(
        call.runtime.db, after=id_cursor(call.query.get("cursor")), limit=limit + 1
    )
    return paginate(rows, limit, lambda r: r["id"])


@ROUTES.route(
    "POST",
    "/api/v1/oidc-group-bindings",
    summary="Bind an OIDC group claim value to a local group",
    tags=("roles",),
    permission="roles:manage",
    body=BindingCreateSchema,
    responses={
        201: ResponseSpec("The binding.", BindingSchema),
        **problems(forbidden="the binding (everything the group holds)"),
    },
)
async def create_binding(call: Call) -> Reply:
    """Bind an OIDC group claim value to a local group."""
    binding: dict[str, Any] = await service.create_binding(
        call.runtime,
        call.actor,
        claim_value=call.body["claim_value"],
        group_id=call.body["group_id"],
    )
    return Reply(binding, 201)


@ROUTES.route(
    "DELETE",
    "/api/v1/oidc-group-bindings/{binding_id}",
    summary="Delete an OIDC group claim binding",
    tags=("roles",),
    permission="roles:manage",
    responses={
        204: ResponseSpec("Deleted."),
        **problems(
            conflict="The binding comes from AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS "
            "(`configured_binding`): remove it there."
        ),
    },
)
async def delete_binding(call: Call) -> Reply:
    """Delete an OIDC group claim binding."""
    binding_id = parse_id(call.path_param("binding_id"), "binding")
    await service.delete_binding(call.runtime, call.actor, binding_id)
    return Reply(None, 204)
