"""Messages to desktop users (:mod:`deskpool.messages`).

An administrator with ``sessions:manage`` sends a message to one open session, to a user, or to
every session of a pool (``POST /api/v1/messages``); holders of ``sessions:read`` list what was
sent. A desktop user reads the messages meant for him (``GET /api/v1/me/messages``: valid, not
dismissed) and dismisses one (``POST /api/v1/me/messages/{message_id}/dismiss``); his desktop
view also gets each at once as a ``message.sent`` live event.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from marshmallow import Schema, fields, validate

from deskpool.api.context import Call
from deskpool.api.pagination import Page, PageQuery, page_schema, paginate
from deskpool.api.problems import PROBLEM_CONTENT_TYPE, ProblemSchema
from deskpool.api.resources.pool_schemas import WholeNumber
from deskpool.api.resources.sessions import time_id_cursor
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.api.values import Instant
from deskpool.ids import parse_id
from deskpool.messages import service
from deskpool.messages.model import (
    DEFAULT_VALIDITY,
    MAX_BODY,
    MAX_VALIDITY,
    MIN_VALIDITY,
    Message,
    SendMessage,
    Severity,
    TargetKind,
)

_SEVERITIES = [str(severity) for severity in Severity]
_TARGETS = [str(kind) for kind in TargetKind]


class SendMessageSchema(Schema):
    """A message to send."""

    target_kind = fields.String(
        required=True,
        validate=validate.OneOf(_TARGETS),
        metadata={
            "description": "`session`: one open session; `user`: every session of the user, "
            "now and while it is valid; `pool`: every session of the pool, now and while it is "
            "valid."
        },
    )
    target_id = fields.UUID(required=True, metadata={"description": "The session, user or pool."})
    severity = fields.String(
        load_default="info",
        validate=validate.OneOf(_SEVERITIES),
        metadata={"description": "How the desktop view shows it: `info`, `warning`, `urgent`."},
    )
    body = fields.String(
        required=True,
        # Something besides white space (the body is trimmed), so that the document says
        # what the service refuses.
        validate=[
            validate.Length(min=1, max=MAX_BODY),
            validate.Regexp(r"[\s\S]*\S", error="Write the message."),
        ],
        metadata={"description": f"The message, 1 to {MAX_BODY} characters, not only spaces."},
    )
    valid_for_seconds = WholeNumber(
        strict=True,
        load_default=int(DEFAULT_VALIDITY.total_seconds()),
        validate=validate.Range(
            min=int(MIN_VALIDITY.total_seconds()), max=int(MAX_VALIDITY.total_seconds())
        ),
        metadata={
            "description": "How long users who connect meanwhile still see it (60 s to 7 days; "
            "default an hour)."
        },
    )


class MessageSchema(Schema):
    """A message to desktop users."""

    id = fields.String(required=True)
    target_kind = fields.String(required=True, metadata={"enum": _TARGETS})
    target_id = fields.String(required=True)
    severity = fields.String(required=True, metadata={"enum": _SEVERITIES})
    body = fields.String(required=True)
    sender_name = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "Who sent it (the administrator's name), when known."},
    )
    created_at = Instant(required=True)
    valid_until = Instant(required=True)


class MyMessagesSchema(Schema):
    """The caller's messages, oldest first."""

    items = fields.List(fields.Nested(MessageSchema), required=True)


class MessageQuery(PageQuery):
    """Filters of the messages sent."""

    target_kind = fields.String(validate=validate.OneOf(_TARGETS))
    target_id = fields.UUID()


def message_view(message: Message) -> dict[str, Any]:
    """A message as the API shows it (times as datetimes, for the schema to render)."""
    return {
        **message.view(),
        "created_at": message.created_at,
        "valid_until": message.valid_until,
    }


def _cursor(message: Message) -> list[str]:
    return [message.created_at.isoformat(), str(message.id)]


#: The messages' operations.
ROUTES = RouteTable()


@ROUTES.route(
    "POST",
    "/api/v1/messages",
    summary="Send a message to desktop users",
    description=(
        "To one open session, to a user, or to every session of a pool. The desktop views open "
        "to the target show it at once; users who connect to it while it is valid see it too, "
        "until they dismiss it. Audited (`message.send`). 404 when the pool or user does not "
        "exist or the session is not open; 422 for an empty or too long body."
    ),
    tags=("sessions",),
    permission="sessions:manage",
    body=SendMessageSchema,
    responses={
        201: ResponseSpec("The message, sent.", MessageSchema),
        404: ResponseSpec(
            "No such pool or user, or no such open session.",
            ProblemSchema,
            content_type=PROBLEM_CONTENT_TYPE,
        ),
    },
)
async def send_message(call: Call) -> Reply:
    body = call.body
    message = await service.send_message(
        call.runtime,
        call.actor,
        SendMessage(
            target_kind=TargetKind(body["target_kind"]),
            target_id=body["target_id"],
            severity=Severity(body["severity"]),
            body=body["body"],
            valid_for=timedelta(seconds=body["valid_for_seconds"]),
        ),
    )
    return Reply(message_view(message), 201)


@ROUTES.route(
    "GET",
    "/api/v1/messages",
    summary="List the messages sent to desktop users",
    description="Newest first; filter by target.",
    tags=("sessions",),
    permission="sessions:read",
    query=MessageQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of messages.", page_schema(MessageSchema))},
)
async def list_messages(call: Call) -> Page:
    query = call.query
    limit = int(query["limit"])
    kind = query.get("target_kind")
    records = await service.list_messages(
        call.runtime,
        target_kind=None if kind is None else TargetKind(kind),
        target_id=query.get("target_id"),
        after=time_id_cursor(query.get("cursor")),
        limit=limit + 1,
    )
    page = paginate(records, limit, _cursor)
    return Page([message_view(message) for message in page.items], page.next)


@ROUTES.route(
    "GET",
    "/api/v1/me/messages",
    summary="The caller's messages",
    description=(
        "Messages meant for the caller that are still valid and that he has not dismissed: "
        "his own, his open sessions', and those of the pools he has a session open in."
    ),
    tags=("me",),
    permission=None,
    authenticated=True,
    responses={200: ResponseSpec("The caller's messages.", MyMessagesSchema)},
)
async def my_messages(call: Call) -> dict[str, Any]:
    messages = await service.messages_for(call.runtime, call.caller.id)
    return {"items": [message_view(message) for message in messages]}


@ROUTES.route(
    "POST",
    "/api/v1/me/messages/{message_id}/dismiss",
    summary="Dismiss a message",
    description="The caller read it: it is not shown to him again. 404 if it is not his.",
    tags=("me",),
    permission=None,
    authenticated=True,
    responses={204: ResponseSpec("Dismissed.")},
)
async def dismiss_message(call: Call) -> Reply:
    message_id: uuid.UUID = parse_id(call.path_param("message_id"), "message")
    await service.dismiss(call.runtime, call.caller.id, message_id)
    return Reply(None, 204)
