"""Users over REST: list, read, add ahead of the first sign-in, disable and enable."""

from __future__ import annotations

from typing import Any

from deskpool.api.context import Call
from deskpool.api.pagination import Page, id_cursor, page_schema, paginate
from deskpool.api.resources.identity_schemas import (
    LAST_ADMIN,
    UserChangeSchema,
    UserCreateSchema,
    UserQuery,
    UserSchema,
    problems,
)
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.identity import user_state
from deskpool.ids import parse_id

#: The user operations.
ROUTES = RouteTable()


@ROUTES.route(
    "GET",
    "/api/v1/users",
    summary="List users",
    tags=("users",),
    permission="users:read",
    query=UserQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of users.", page_schema(UserSchema))},
)
async def list_users(call: Call) -> Page:
    """A page of users by id."""
    limit = call.query["limit"]
    rows = await user_state.list_users(
        call.runtime.db,
        after=id_cursor(call.query.get("cursor")),
        text=call.query.get("q"),
        disabled=call.query.get("disabled"),
        limit=limit + 1,
    )
    return paginate(rows, limit, lambda r: r["id"])


@ROUTES.route(
    "POST",
    "/api/v1/users",
    summary="Add a person before their first sign-in",
    description=(
        "Users are created at their first sign-in; adding one ahead, by the identity "
        "provider's subject (`sub`), lets an administrator entitle them, add them to groups "
        "or grant them roles before then. Their first sign-in finds the record (a client of "
        "the same subject does not: it is another user). No email is taken (anyone may claim "
        "an email at an identity provider). Adding confers nothing; what the user is then "
        "given is checked where it is given. 409 `user_exists` when the subject exists."
    ),
    tags=("users",),
    permission="users:manage",
    body=UserCreateSchema,
    responses={
        201: ResponseSpec("The user.", UserSchema),
        **problems(conflict="Refused: a user of that issuer has that subject (`user_exists`)."),
    },
)
async def add_user(call: Call) -> Reply:
    """Add a person ahead of their first sign-in."""
    user = await user_state.add_user(
        call.runtime,
        call.actor,
        subject=call.body["subject"],
        display_name=call.body.get("display_name"),
        issuer=call.body.get("issuer"),
    )
    return Reply(user, 201)


@ROUTES.route(
    "GET",
    "/api/v1/users/{user_id}",
    summary="Get a user",
    tags=("users",),
    permission="users:read",
    responses={200: ResponseSpec("The user.", UserSchema)},
)
async def get_user(call: Call) -> dict[str, Any]:
    """One user."""
    return await user_state.get_user(call.runtime.db, parse_id(call.path_param("user_id"), "user"))


@ROUTES.route(
    "PATCH",
    "/api/v1/users/{user_id}",
    summary="Disable or enable a user",
    description=(
        "A disabled user can no longer call the API, and what they held ends at once: their "
        "open desktop sessions and read-only views close (end reason `access_revoked`), their "
        "unused connection tokens are refused at the gateway, the desktops they are logged on "
        "to are logged off (the pool's rule after log-off follows), and their live event "
        "streams close."
    ),
    tags=("users",),
    permission="users:manage",
    body=UserChangeSchema,
    responses={
        200: ResponseSpec("The user.", UserSchema),
        **problems(
            forbidden="disabling or enabling the user (everything the user holds, by a grant, a "
            "group membership, a group claim of their last sign-in or a pool entitlement)",
            conflict=f"Refused: {LAST_ADMIN}, or the caller would disable its own account "
            "(`cannot_disable_self`).",
        ),
    },
)
async def update_user(call: Call) -> dict[str, Any]:
    """Disable or enable a user."""
    user_id = parse_id(call.path_param("user_id"), "user")
    return await user_state.set_user_disabled(
        call.runtime, call.actor, user_id, call.body["disabled"]
    )
