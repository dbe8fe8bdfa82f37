"""Local groups over REST: groups and their members."""

from __future__ import annotations

from typing import Any

from deskpool.api.context import Call
from deskpool.api.pagination import Page, PageQuery, id_cursor, page_schema, paginate, text_cursor
from deskpool.api.resources.identity_schemas import (
    LAST_ADMIN,
    GroupChangeSchema,
    GroupCreateSchema,
    GroupSchema,
    MemberSchema,
    problems,
)
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.identity import service
from deskpool.ids import parse_id

#: The group operations.
ROUTES = RouteTable()


@ROUTES.route(
    "GET",
    "/api/v1/groups",
    summary="List groups",
    tags=("groups",),
    permission="groups:read",
    query=PageQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of groups.", page_schema(GroupSchema))},
)
async def list_groups(call: Call) -> Page:
    """A page of groups by key."""
    limit = call.query["limit"]
    rows = await service.list_groups(
        call.runtime.db, after_key=text_cursor(call.query.get("cursor")), limit=limit + 1
    )
    return paginate(rows, limit, lambda r: r["key"])


@ROUTES.route(
    "POST",
    "/api/v1/groups",
    summary="Create a group",
    tags=("groups",),
    permission="groups:manage",
    body=GroupCreateSchema,
    responses={201: ResponseSpec("The new group.", GroupSchema)},
)
async def create_group(call: Call) -> Reply:
    """Create a group."""
    group = await service.create_group(
        call.runtime,
        call.actor,
        key=call.body["key"],
        name=call.body["name"],
        description=call.body["description"],
    )
    return Reply(group, 201)


@ROUTES.route(
    "GET",
    "/api/v1/groups/{group_id}",
    summary="Get a group",
    tags=("groups",),
    permission="groups:read",
    responses={200: ResponseSpec("The group.", GroupSchema)},
)
async def get_group(call: Call) -> dict[str, Any]:
    """One group."""
    return await service.get_group(call.runtime.db, parse_id(call.path_param("group_id"), "group"))


@ROUTES.route(
    "PATCH",
    "/api/v1/groups/{group_id}",
    summary="Change a group",
    tags=("groups",),
    permission="groups:manage",
    body=GroupChangeSchema,
    responses={200: ResponseSpec("The group.", GroupSchema)},
)
async def update_group(call: Call) -> dict[str, Any]:
    """Change a group's name or description."""
    return await service.update_group(
        call.runtime,
        call.actor,
        parse_id(call.path_param("group_id"), "group"),
        name=call.body.get("name"),
        description=call.body.get("description"),
        fields=list(call.body),
    )


@ROUTES.route(
    "DELETE",
    "/api/v1/groups/{group_id}",
    summary="Delete a group (its members, grants and bindings go with it)",
    tags=("groups",),
    permission="groups:manage",
    responses={
        204: ResponseSpec("Deleted."),
        **problems(conflict=f"Refused: {LAST_ADMIN} (the members hold it through the group)."),
    },
)
async def delete_group(call: Call) -> Reply:
    """Delete a group with its members, grants, bindings and pool entitlements."""
    group_id = parse_id(call.path_param("group_id"), "group")
    await service.delete_group(call.runtime, call.actor, group_id)
    return Reply(None, 204)


@ROUTES.route(
    "GET",
    "/api/v1/groups/{group_id}/members",
    summary="List the members of a group",
    tags=("groups",),
    permission="groups:read",
    query=PageQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of members.", page_schema(MemberSchema))},
)
async def list_group_members(call: Call) -> Page:
    """A page of a group's members by user id."""
    group_id = parse_id(call.path_param("group_id"), "group")
    limit = call.query["limit"]
    rows = await service.list_group_members(
        call.runtime.db, group_id, after=id_cursor(call.query.get("cursor")), limit=limit + 1
    )
    return paginate(rows, limit, lambda r: r["user_id"])


def _member(call: Call) -> tuple[Any, Any]:
    return (
        parse_id(call.path_param("group_id"), "group"),
        parse_id(call.path_param("user_id"), "user"),
    )


@ROUTES.route(
    "PUT",
    "/api/v1/groups/{group_id}/members/{user_id}",
    summary="Add a user to a group",
    tags=("groups",),
    permission="groups:manage",
    responses={
        204: ResponseSpec("The user is a member."),
        **problems(forbidden="membership of the group (everything the group holds)"),
    },
)
async def add_group_member(call: Call) -> Reply:
    """Add a user to a group."""
    await service.add_group_member(call.runtime, call.actor, *_member(call))
    return Reply(None, 204)


@ROUTES.route(
    "DELETE",
    "/api/v1/groups/{group_id}/members/{user_id}",
    summary="Remove a user from a group",
    tags=("groups",),
    permission="groups:manage",
    responses={
        204: ResponseSpec("The user is not a member."),
        **problems(conflict=f"Refused: {LAST_ADMIN} (the user holds it through the group)."),
    },
)
async def remove_group_member(call: Call) -> Reply:
    """Remove a user from a group."""
    await service.remove_group_member(call.runtime, call.actor, *_member(call))
    return Reply(None, 204)
