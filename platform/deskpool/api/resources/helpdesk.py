"""The help desk (:mod:`deskpool.helpdesk`): find a user, see everything about him, act.

``GET /api/v1/helpdesk/users?q=`` finds users by name, email or subject (``users:read``);
``GET /api/v1/helpdesk/users/{user_id}`` shows his sessions with their logon phases, failed
logons, desktops and, for every pool, whether he can open it now and why (``sessions:read``);
``POST /api/v1/helpdesk/users/{user_id}/desktops/{desktop_id}/logoff`` logs him off
(``sessions:manage``). The other actions are the platform's own operations, each under its own
permission: a message (``POST /api/v1/messages``), disconnect and shadow
(``/api/v1/sessions/{id}/...``), restart or power off (``/api/v1/desktops/{id}/actions``).
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate

from deskpool.api.context import Call
from deskpool.api.resources.identity_schemas import GroupRefSchema, UserSchema
from deskpool.api.resources.session_schemas import AnnouncedSchema, LogonSchema, SessionSchema
from deskpool.api.resources.sessions import session_view
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.helpdesk import announced, service
from deskpool.helpdesk.model import EXPLANATIONS, Access
from deskpool.ids import parse_id
from deskpool.pools.model import DesktopState

_ACCESS = [str(access) for access in Access]


class UserSearchQuery(Schema):
    """The search of users."""

    q = fields.String(
        required=True,
        validate=validate.Length(min=1, max=200),
        metadata={"description": "Part of the name, email or subject (any case)."},
    )


class UserFoundSchema(Schema):
    """A user a search found."""

    id = fields.String(required=True)
    subject = fields.String(required=True)
    email = fields.String(required=True, allow_none=True)
    display_name = fields.String(required=True, allow_none=True)
    kind = fields.String(required=True)
    disabled = fields.Boolean(required=True)
    last_seen_at = fields.AwareDateTime(required=True)


class UsersFoundSchema(Schema):
    """Up to 20 users, best matches first (an exact email or subject first)."""

    items = fields.List(fields.Nested(UserFoundSchema), required=True)


class EntitlementPathSchema(Schema):
    """One way the user is entitled to the pool."""

    kind = fields.String(
        required=True,
        validate=validate.OneOf(["direct", "group", "claim", "permission"]),
        metadata={
            "description": "`direct`: an entitlement of the user; `group`: of a group he is a "
            "member of; `claim`: of a group bound to a claim of his last sign-in; "
            "`permission`: he holds `pools:manage`."
        },
    )
    group_id = fields.String(required=True, allow_none=True)
    group_key = fields.String(required=True, allow_none=True)


class PoolAccessSchema(Schema):
    """Whether the user can open the pool now, and why."""

    pool_id = fields.String(required=True)
    pool_name = fields.String(required=True)
    can_open = fields.Boolean(required=True)
    access = fields.String(
        required=True,
        validate=validate.OneOf(_ACCESS),
        metadata={
            "description": "Why: `holds_desktop`, `available`, `startable` (he can); "
            "`not_entitled`, `user_disabled`, `pool_disabled`, `pool_draining`, "
            "`license_limit`, `no_desktop_available` (he cannot)."
        },
    )
    explanation = fields.String(required=True, metadata={"description": "The reason in words."})
    paths = fields.List(fields.Nested(EntitlementPathSchema), required=True)


class HelpdeskSessionSchema(SessionSchema):
    """One of his sessions, with its pool's name and its logon's phases."""

    pool_name = fields.String(required=True, allow_none=True)
    logon = fields.Nested(LogonSchema, required=True, allow_none=True)


class FailedLogonSchema(LogonSchema):
    """A logon of his that failed, with its pool's name."""

    pool_name = fields.String(required=True, allow_none=True)


class HelpdeskDesktopSchema(Schema):
    """A desktop he holds."""

    id = fields.String(required=True)
    name = fields.String(required=True)
    pool_id = fields.String(required=True)
    pool_name = fields.String(required=True, allow_none=True)
    state = fields.String(required=True, metadata={"enum": [str(s) for s in DesktopState]})
    in_session = fields.Boolean(required=True)


class HelpdeskUserSchema(Schema):
    """Everything the help desk shows of one user."""

    user = fields.Nested(UserSchema, required=True)
    groups = fields.List(
        fields.Nested(GroupRefSchema),
        required=True,
        metadata={"description": "His groups, by membership or by a claim of his last sign-in."},
    )
    sessions = fields.List(
        fields.Nested(HelpdeskSessionSchema),
        required=True,
        metadata={"description": "His latest 20 sessions, newest first (open ones included)."},
    )
    failed_logons = fields.List(
        fields.Nested(FailedLogonSchema),
        required=True,
        metadata={"description": "His latest 20 failed logons, newest first, with why."},
    )
    desktops = fields.List(fields.Nested(HelpdeskDesktopSchema), required=True)
    pools = fields.List(
        fields.Nested(PoolAccessSchema),
        required=True,
        metadata={"description": "Every pool by name, and whether he can open it now."},
    )


#: The help desk's operations.
ROUTES = RouteTable()


@ROUTES.route(
    "GET",
    "/api/v1/helpdesk/users",
    summary="Find users for the help desk",
    description="Users whose display name, email or subject contains `q`; at most 20.",
    tags=("helpdesk",),
    permission="users:read",
    query=UserSearchQuery,
    responses={200: ResponseSpec("The users found.", UsersFoundSchema)},
)
async def search_helpdesk_users(call: Call) -> dict[str, Any]:
    return {"items": await service.search_users(call.runtime, call.query["q"])}


@ROUTES.route(
    "GET",
    "/api/v1/helpdesk/users/{user_id}",
    summary="A user, as the help desk sees him",
    description=(
        "His account and groups, his latest sessions with their logon phases and end reasons, "
        "his failed logons, the desktops he holds, and for every pool whether he can open it "
        "now and why: the entitlement paths (direct, a group, a claim binding, `pools:manage`) "
        "or what is missing. Judged from his groups and claims as of his last sign-in."
    ),
    tags=("helpdesk",),
    permission="sessions:read",
    responses={200: ResponseSpec("The user's help desk page.", HelpdeskUserSchema)},
)
async def get_helpdesk_user(call: Call) -> dict[str, Any]:
    page = await service.user_page(call.runtime, parse_id(call.path_param("user_id"), "user"))
    return {
        "user": page.user,
        "groups": page.groups,
        "sessions": [
            {
                **session_view(line.session),
                "pool_name": line.pool_name,
                "logon": None if line.logon is None else line.logon.as_json(),
            }
            for line in page.sessions
        ],
        "failed_logons": [
            {**logon.as_json(), "pool_name": pool_name} for logon, pool_name in page.failed_logons
        ],
        "desktops": [
            {
                "id": str(desktop.id),
                "name": desktop.name,
                "pool_id": str(desktop.pool_id),
                "pool_name": pool_name,
                "state": str(desktop.state),
                "in_session": desktop.in_session,
            }
            for desktop, pool_name in page.desktops
        ],
        "pools": [
            {
                "pool_id": str(answer.pool_id),
                "pool_name": answer.pool_name,
                "can_open": answer.access.can_open,
                "access": str(answer.access),
                "explanation": EXPLANATIONS[answer.access],
                "paths": [path.view() for path in answer.paths],
            }
            for answer in page.pools
        ],
    }


@ROUTES.route(
    "POST",
    "/api/v1/helpdesk/users/{user_id}/desktops/{desktop_id}/logoff",
    summary="Log a user off his desktop",
    description=(
        "His tunnels to the desktop close and he is logged off; the pool's rule after a log-off "
        "applies (a non-persistent desktop is rebuilt before anyone else gets it), as when he "
        "logs off himself. Audited (`desktop.forced_logoff`, reason `helpdesk`). 404 when he "
        "holds no such desktop. A `message` (the body is optional) goes to him first (a "
        "warning his desktop views show at once, audited `message.send` with `about` "
        "`desktop.forced_logoff`)."
    ),
    tags=("helpdesk",),
    permission="sessions:manage",
    body=AnnouncedSchema,
    body_optional=True,
    responses={202: ResponseSpec("Logged off (his tunnels are closing).")},
)
async def log_user_off(call: Call) -> Reply:
    await announced.log_off(
        call.runtime,
        call.actor,
        parse_id(call.path_param("user_id"), "user"),
        parse_id(call.path_param("desktop_id"), "desktop"),
        call.body.get("message"),
    )
    return Reply(None, 202)
