"""The caller's desktops and the notices that their sessions end: ``GET /api/v1/me/desktops``.

A notice (:mod:`deskpool.notices`) says that the caller's session on a desktop ends at a time,
and why: an image rollout that logs users off after a warning, for example. It reaches the
caller at once as a ``desktop.notice`` live event, and stays on the desktop here until it is
cleared (``desktop.notice_cleared``).
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields

from deskpool.api.context import Call
from deskpool.api.routes import ResponseSpec, RouteTable
from deskpool.notices import service
from deskpool.pools.model import DesktopState


class NoticeSchema(Schema):
    """The caller's session on the desktop ends at ``ends_at`` because of ``reason``."""

    id = fields.String(required=True)
    desktop_id = fields.String(required=True)
    pool_id = fields.String(required=True)
    ends_at = fields.AwareDateTime(
        required=True, metadata={"description": "When the session ends (the user is logged off)."}
    )
    reason = fields.String(
        required=True,
        metadata={"description": "Why, as a stable code: `image_rollout` (a new image)."},
    )
    message = fields.String(
        required=True, metadata={"description": "What an administrator wrote for the user."}
    )


class MyDesktopSchema(Schema):
    """A desktop the caller holds."""

    id = fields.String(required=True)
    pool_id = fields.String(required=True)
    name = fields.String(required=True)
    state = fields.String(required=True, metadata={"enum": [str(state) for state in DesktopState]})
    in_session = fields.Boolean(required=True)
    template = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "The template the desktop's VM was built from."},
    )
    notice = fields.Nested(
        NoticeSchema,
        required=True,
        allow_none=True,
        metadata={"description": "When and why the caller's session on it ends, if it does."},
    )


class MyDesktopsSchema(Schema):
    """The desktops the caller holds, in use first."""

    items = fields.List(fields.Nested(MyDesktopSchema), required=True)


#: ``GET /api/v1/me/desktops``.
ROUTES = RouteTable()


@ROUTES.route(
    "GET",
    "/api/v1/me/desktops",
    summary="The desktops the caller holds",
    description=(
        "Each desktop the caller holds (in use first), with the `notice` that their session "
        "on it ends, if one does: when (`ends_at`), why (`reason`) and the administrator's "
        "`message`."
    ),
    tags=("me",),
    permission=None,
    authenticated=True,
    responses={200: ResponseSpec("The caller's desktops.", MyDesktopsSchema)},
)
async def list_my_desktops(call: Call) -> dict[str, Any]:
    held = await service.held_desktops(call.runtime, call.caller.id)
    return {
        "items": [
            {
                "id": str(item.desktop.id),
                "pool_id": str(item.desktop.pool_id),
                "name": item.desktop.name,
                "state": str(item.desktop.state),
                "in_session": item.desktop.in_session,
                "template": item.desktop.template,
                "notice": None
                if item.notice is None
                else {**item.notice.view(), "ends_at": item.notice.ends_at},
            }
            for item in held
        ]
    }
