"""Event subscriptions (``webhooks:read`` / ``webhooks:manage``): webhooks and their deliveries.

A webhook sends the events its ``event_types`` select to its ``url``, signed after the Standard
Webhooks specification (:mod:`deskpool.webhooks`; docs/operators/webhooks.md).

- ``POST /api/v1/webhooks`` (201, with the signing ``secret``, shown this once),
  ``GET /api/v1/webhooks``, ``GET|PUT|DELETE /api/v1/webhooks/{webhook_id}``,
  ``POST /api/v1/webhooks/{webhook_id}/secret`` (a new secret, shown once).
- ``GET /api/v1/webhooks/{webhook_id}/deliveries`` (newest first, ``state`` filter),
  ``GET .../deliveries/{delivery_id}`` (with its attempts),
  ``POST .../deliveries/{delivery_id}/redeliver`` (202) and
  ``POST /api/v1/webhooks/{webhook_id}/replay`` (202: the events from ``since`` queued again).
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate

from deskpool.api.context import Call
from deskpool.api.pagination import (
    Page,
    PageQuery,
    decode_cursor,
    page_schema,
    paginate,
    text_cursor,
)
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.api.values import Instant
from deskpool.errors import InvalidCursor, NotFound
from deskpool.events import NAMED_EVENT_TYPES
from deskpool.ids import parse_id
from deskpool.values import ascii_int
from deskpool.webhooks import service
from deskpool.webhooks.model import (
    MAX_EVENT_TYPE_LENGTH,
    MAX_EVENT_TYPES,
    MAX_NAME_LENGTH,
    MAX_URL_LENGTH,
    DeliveryState,
    Subscription,
    SubscriptionSettings,
)
from deskpool.webhooks.store import Attempt, Delivery

_STATES = [str(state) for state in DeliveryState]
_TYPES_HELP = (
    "Event types and prefix wildcards: the named types ("
    + ", ".join(NAMED_EVENT_TYPES)
    + "), `audit.<action>` for audit events by kind (`audit.pool.create`), a prefix wildcard "
    "(`session.*`, `audit.pool.*`, `audit.*`) or `*` for every event."
)

# ---------------------------------------------------------------------------------- schemas


class WebhookInputSchema(Schema):
    """A webhook to create, or the whole of one to replace."""

    name = fields.String(required=True, validate=validate.Length(1, MAX_NAME_LENGTH))
    url = fields.String(
        required=True,
        validate=validate.Length(1, MAX_URL_LENGTH),
        metadata={
            "description": "An http or https URL, without credentials or fragment. Redirects "
            "are not followed."
        },
    )
    event_types = fields.List(
        fields.String(validate=validate.Length(1, MAX_EVENT_TYPE_LENGTH)),
        required=True,
        validate=validate.Length(1, MAX_EVENT_TYPES),
        metadata={"description": _TYPES_HELP},
    )
    enabled = fields.Boolean(
        load_default=True,
        metadata={"description": "Enabling a webhook the platform disabled clears why."},
    )


class WebhookSchema(Schema):
    """A webhook (its secret is never shown but when made)."""

    id = fields.String(required=True)
    name = fields.String(required=True)
    url = fields.String(required=True)
    event_types = fields.List(fields.String(), required=True)
    enabled = fields.Boolean(required=True)
    disabled_reason = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "Why the platform disabled it (it kept failing)."},
    )
    disabled_at = fields.AwareDateTime(required=True, allow_none=True)
    failing_since = fields.AwareDateTime(
        required=True,
        allow_none=True,
        metadata={"description": "Since when its next delivery has been failing."},
    )
    created_at = fields.AwareDateTime(required=True)
    updated_at = fields.AwareDateTime(required=True)


class WebhookWithSecretSchema(WebhookSchema):
    """A webhook and its signing secret, shown this once."""

    secret = fields.String(
        required=True,
        metadata={
            "description": "The Standard Webhooks signing secret (`whsec_` and base64). It is "
            "shown only here; store it with the receiver."
        },
    )


class DeliveryQuery(PageQuery):
    """A state to list only the deliveries in it."""

    state = fields.String(validate=validate.OneOf(_STATES), metadata={"enum": _STATES})


class AttemptSchema(Schema):
    """One try at a delivery."""

    attempted_at = fields.AwareDateTime(required=True)
    status_code = fields.Integer(required=True, allow_none=True)
    error = fields.String(required=True, allow_none=True)
    duration_ms = fields.Integer(required=True)


class DeliverySchema(Schema):
    """One event on its way to the webhook."""

    id = fields.Integer(required=True)
    message_id = fields.String(required=True, metadata={"description": "The webhook-id."})
    event_type = fields.String(required=True)
    audit_event_id = fields.Integer(required=True, allow_none=True)
    occurred_at = fields.AwareDateTime(required=True)
    state = fields.String(required=True, metadata={"enum": _STATES})
    attempts = fields.Integer(required=True)
    next_attempt_at = fields.AwareDateTime(required=True)
    last_error = fields.String(required=True, allow_none=True)
    created_at = fields.AwareDateTime(required=True)
    finished_at = fields.AwareDateTime(required=True, allow_none=True)
    redelivery_of = fields.Integer(required=True, allow_none=True)


class DeliveryDetailSchema(DeliverySchema):
    """A delivery with its body and its attempts."""

    payload = fields.Dict(required=True, metadata={"description": "The body sent."})
    attempt_log = fields.List(fields.Nested(AttemptSchema), required=True)


class ReplayInputSchema(Schema):
    """Where a replay starts."""

    since = Instant(required=True, metadata={"description": "Events from this instant on."})


class ReplaySchema(Schema):
    """What a replay queued."""

    queued = fields.Integer(required=True)
    next_since = fields.AwareDateTime(
        required=True,
        allow_none=True,
        metadata={
            "description": f"Set when it stopped after {service.MAX_REPLAY} events: "
            "replay again from there."
        },
    )


# ---------------------------------------------------------------------------------- views


def webhook_view(subscription: Subscription) -> dict[str, Any]:
    """A webhook as the API shows it."""
    return {
        "id": str(subscription.id),
        "name": subscription.name,
        "url": subscription.url,
        "event_types": list(subscription.event_types),
        "enabled": subscription.enabled,
        "disabled_reason": subscription.disabled_reason,
        "disabled_at": subscription.disabled_at,
        "failing_since": subscription.failing_since,
        "created_at": subscription.created_at,
        "updated_at": subscription.updated_at,
    }


def _with_secret(made: service.NewSecret) -> dict[str, Any]:
    return {**webhook_view(made.subscription), "secret": made.secret.reveal()}


def delivery_view(delivery: Delivery) -> dict[str, Any]:
    """A delivery as the API lists it."""
    return {
        "id": delivery.id,
        "message_id": delivery.message_id,
        "event_type": delivery.event_type,
        "audit_event_id": delivery.audit_event_id,
        "occurred_at": delivery.occurred_at,
        "state": str(delivery.state),
        "attempts": delivery.attempts,
        "next_attempt_at": delivery.next_attempt_at,
        "last_error": delivery.last_error,
        "created_at": delivery.created_at,
        "finished_at": delivery.finished_at,
        "redelivery_of": delivery.redelivery_of,
    }


def _attempt_view(attempt: Attempt) -> dict[str, Any]:
    return {
        "attempted_at": attempt.attempted_at,
        "status_code": attempt.status_code,
        "error": attempt.error,
        "duration_ms": attempt.duration_ms,
    }


def _settings(body: dict[str, Any]) -> SubscriptionSettings:
    return SubscriptionSettings(
        name=str(body["name"]),
        url=str(body["url"]),
        event_types=tuple(str(name) for name in body["event_types"]),
        enabled=bool(body["enabled"]),
    )


def _webhook_id(call: Call) -> Any:
    return parse_id(call.path_param("webhook_id"), "webhook")


def _delivery_id(call: Call) -> int:
    text = call.path_param("delivery_id")
    number = ascii_int(text)
    if number is None or not 0 < number < 2**63:
        raise NotFound(f"No delivery has the id {text!r}.")
    return number


def _before(cursor: str | None) -> int | None:
    key = decode_cursor(cursor)
    if key is None:
        return None
    if not isinstance(key, int) or isinstance(key, bool):
        raise InvalidCursor()
    return key


# ----------------------------------------------------------------------------------- routes

#: The webhook operations.
ROUTES = RouteTable()

_ONE = "/api/v1/webhooks/{webhook_id}"
_DELIVERY = _ONE + "/deliveries/{delivery_id}"
_TAGS = ("webhooks",)


@ROUTES.route(
    "POST",
    "/api/v1/webhooks",
    summary="Create a webhook",
    description="The answer holds its signing secret, shown this once. 422 for an invalid URL "
    "or event type; 409 `webhook_name_taken`; 503 `secrets_key_missing` without a master key.",
    tags=_TAGS,
    permission="webhooks:manage",
    body=WebhookInputSchema,
    responses={201: ResponseSpec("The webhook and its secret.", WebhookWithSecretSchema)},
)
async def create_webhook(call: Call) -> Reply:
    made = await service.create_subscription(call.runtime, call.actor, _settings(call.body))
    return Reply(_with_secret(made), 201)


@ROUTES.route(
    "GET",
    "/api/v1/webhooks",
    summary="List webhooks",
    description="By name, each with whether it is enabled and why the platform disabled it.",
    tags=_TAGS,
    permission="webhooks:read",
    query=PageQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of webhooks.", page_schema(WebhookSchema))},
)
async def list_webhooks(call: Call) -> Page:
    limit = int(call.query["limit"])
    found = await service.list_subscriptions(
        call.runtime, limit=limit + 1, after=text_cursor(call.query.get("cursor"))
    )
    page = paginate(found, limit, lambda subscription: subscription.name)
    return Page([webhook_view(subscription) for subscription in page.items], page.next)


@ROUTES.route(
    "GET",
    _ONE,
    summary="Show a webhook",
    tags=_TAGS,
    permission="webhooks:read",
    responses={200: ResponseSpec("The webhook.", WebhookSchema)},
)
async def get_webhook(call: Call) -> dict[str, Any]:
    return webhook_view(await service.get_subscription(call.runtime, _webhook_id(call)))


@ROUTES.route(
    "PUT",
    _ONE,
    summary="Replace a webhook",
    description="Enabling a webhook the platform disabled clears why; its pending deliveries "
    "then go out in order. Events recorded while it was disabled were not queued: replay them.",
    tags=_TAGS,
    permission="webhooks:manage",
    body=WebhookInputSchema,
    responses={200: ResponseSpec("The webhook.", WebhookSchema)},
)
async def replace_webhook(call: Call) -> dict[str, Any]:
    found = await service.replace_subscription(
        call.runtime, call.actor, _webhook_id(call), _settings(call.body)
    )
    return webhook_view(found)


@ROUTES.route(
    "DELETE",
    _ONE,
    summary="Delete a webhook",
    description="With its secret and its deliveries.",
    tags=_TAGS,
    permission="webhooks:manage",
    responses={204: ResponseSpec("Deleted.")},
)
async def delete_webhook(call: Call) -> Reply:
    await service.delete_subscription(call.runtime, call.actor, _webhook_id(call))
    return Reply(None, 204)


@ROUTES.route(
    "POST",
    _ONE + "/secret",
    summary="Renew a webhook's signing secret",
    description="The new secret signs every delivery from now on; it is shown this once.",
    tags=_TAGS,
    permission="webhooks:manage",
    responses={200: ResponseSpec("The webhook and its new secret.", WebhookWithSecretSchema)},
)
async def renew_webhook_secret(call: Call) -> dict[str, Any]:
    return _with_secret(await service.renew_secret(call.runtime, call.actor, _webhook_id(call)))


@ROUTES.route(
    "GET",
    _ONE + "/deliveries",
    summary="List a webhook's deliveries",
    description="Newest first; `state=failed` lists those given up, `pending` those waiting "
    "(the first of them is retried after its `next_attempt_at`).",
    tags=_TAGS,
    permission="webhooks:read",
    query=DeliveryQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of deliveries.", page_schema(DeliverySchema))},
)
async def list_webhook_deliveries(call: Call) -> Page:
    limit = int(call.query["limit"])
    state = call.query.get("state")
    found = await service.list_deliveries(
        call.runtime,
        _webhook_id(call),
        state=None if state is None else DeliveryState(state),
        before=_before(call.query.get("cursor")),
        limit=limit + 1,
    )
    page = paginate(found, limit, lambda delivery: delivery.id)
    return Page([delivery_view(delivery) for delivery in page.items], page.next)


@ROUTES.route(
    "GET",
    _DELIVERY,
    summary="Show a delivery",
    description="Its body and every attempt: when, the HTTP status or the error, how long.",
    tags=_TAGS,
    permission="webhooks:read",
    responses={200: ResponseSpec("The delivery.", DeliveryDetailSchema)},
)
async def get_webhook_delivery(call: Call) -> dict[str, Any]:
    delivery, attempts = await service.get_delivery(
        call.runtime, _webhook_id(call), _delivery_id(call)
    )
    return {
        **delivery_view(delivery),
        "payload": delivery.payload,
        "attempt_log": [_attempt_view(attempt) for attempt in attempts],
    }


@ROUTES.route(
    "POST",
    _DELIVERY + "/redeliver",
    summary="Redeliver an event",
    description="Queues the delivery's event again at the end of the webhook's outbox, with "
    "the same webhook-id.",
    tags=_TAGS,
    permission="webhooks:manage",
    responses={202: ResponseSpec("The new delivery.", DeliverySchema)},
)
async def redeliver_webhook_event(call: Call) -> Reply:
    delivery = await service.redeliver(
        call.runtime, call.actor, _webhook_id(call), _delivery_id(call)
    )
    return Reply(delivery_view(delivery), 202)


@ROUTES.route(
    "POST",
    _ONE + "/replay",
    summary="Replay events from a point in time",
    description="Queues again, in order, every kept audit event from `since` on that the "
    f"webhook selects (at most {service.MAX_REPLAY}; `next_since` says where to go on).",
    tags=_TAGS,
    permission="webhooks:manage",
    body=ReplayInputSchema,
    responses={202: ResponseSpec("What was queued.", ReplaySchema)},
)
async def replay_webhook_events(call: Call) -> Reply:
    replayed = await service.replay(call.runtime, call.actor, _webhook_id(call), call.body["since"])
    return Reply({"queued": replayed.queued, "next_since": replayed.next_since}, 202)
