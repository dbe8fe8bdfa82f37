"""Roles over REST: the built-in roles and custom ones."""

from __future__ import annotations

from deskpool.api.context import Call
from deskpool.api.pagination import Page, PageQuery, page_schema, paginate, text_cursor
from deskpool.api.resources.identity_schemas import (
    LAST_ADMIN,
    RoleChangeSchema,
    RoleCreateSchema,
    RoleSchema,
    problems,
)
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.identity import service

#: The role operations.
ROUTES = RouteTable()


@ROUTES.route(
    "GET",
    "/api/v1/roles",
    summary="List roles (built-in and custom)",
    tags=("roles",),
    permission="roles:read",
    query=PageQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of roles.", page_schema(RoleSchema))},
)
async def list_roles(call: Call) -> Page:
    """A page of roles by key."""
    limit = call.query["limit"]
    roles = await service.list_roles(
        call.runtime.db, after_key=text_cursor(call.query.get("cursor")), limit=limit + 1
    )
    return paginate(roles, limit, lambda role: role.key)


@ROUTES.route(
    "POST",
    "/api/v1/roles",
    summary="Create a custom role",
    tags=("roles",),
    permission="roles:manage",
    body=RoleCreateSchema,
    responses={
        201: ResponseSpec("The new role.", RoleSchema),
        **problems(forbidden="the role (every permission it carries)"),
    },
)
async def create_role(call: Call) -> Reply:
    """Create a custom role."""
    role = await service.create_role(
        call.runtime,
        call.actor,
        key=call.body["key"],
        description=call.body["description"],
        permissions=call.body["permissions"],
    )
    return Reply(role, 201)


@ROUTES.route(
    "GET",
    "/api/v1/roles/{role_key}",
    summary="Get a role",
    tags=("roles",),
    permission="roles:read",
    responses={200: ResponseSpec("The role.", RoleSchema)},
)
async def get_role(call: Call) -> service.RoleView:
    """One role."""
    return await service.get_role(call.runtime.db, call.path_param("role_key"))


@ROUTES.route(
    "PATCH",
    "/api/v1/roles/{role_key}",
    summary="Change a custom role",
    tags=("roles",),
    permission="roles:manage",
    body=RoleChangeSchema,
    responses={
        200: ResponseSpec("The role.", RoleSchema),
        **problems(
            forbidden="the permissions added to the role",
            conflict=f"The role is built in, or {LAST_ADMIN}.",
        ),
    },
)
async def update_role(call: Call) -> service.RoleView:
    """Change a custom role."""
    return await service.update_role(
        call.runtime,
        call.actor,
        call.path_param("role_key"),
        description=call.body.get("description"),
        permissions=call.body.get("permissions"),
    )


@ROUTES.route(
    "DELETE",
    "/api/v1/roles/{role_key}",
    summary="Delete a custom role (its grants go with it)",
    tags=("roles",),
    permission="roles:manage",
    responses={
        204: ResponseSpec("Deleted."),
        **problems(conflict=f"The role is built in, or {LAST_ADMIN}."),
    },
)
async def delete_role(call: Call) -> Reply:
    """Delete a custom role and its grants."""
    await service.delete_role(call.runtime, call.actor, call.path_param("role_key"))
    return Reply(None, 204)
