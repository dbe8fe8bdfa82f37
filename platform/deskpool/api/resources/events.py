"""Live events (``GET /api/v1/events``): a server-sent event stream of state changes.

The stream carries the changes of the resources the caller may read (desktop and pool states,
job outcomes, sessions, and every change made through the API), as ``text/event-stream``. Each
event's ``id`` is its position in the stream; a client that reconnects with ``Last-Event-ID``
gets what it missed. It is authenticated with the bearer token like every other operation, so a
browser reads it with ``fetch`` (``EventSource`` cannot send the header).
"""

from __future__ import annotations

import json

from aiohttp import web

from deskpool.api.context import Call
from deskpool.api.routes import ResponseSpec, RouteTable
from deskpool.errors import BadRequest
from deskpool.live import bus
from deskpool.live.model import KIND_OF_RESOURCE, LiveEvent, may_see, valid_stream_id

#: Seconds between keep-alive comments on a quiet stream (proxies close idle connections).
HEARTBEAT_SECONDS = 15.0
#: What a client waits before reconnecting, in milliseconds (the ``retry`` field).
RETRY_MS = 3_000

HUB_KEY = web.AppKey("live_hub", bus.LiveHub)

_DESCRIPTION = """\
A [server-sent event](https://html.spec.whatwg.org/multipage/server-sent-events.html) stream of
the changes of what the caller may read. Each event has:

- `id`: its position in the stream; reconnect with the `Last-Event-ID` header set to the last
  one received to get what was missed (events are kept for a while: when the position is too
  old, the first event is a `reset`, meaning "read everything again");
- `event`: `<kind>.<what>`: `desktop.state`, `desktop.deleted`, `pool.changed`, `job.succeeded`,
  `job.dead`, `job.retrying`, `session.changed`, `<kind>.changed` for any change made through the
  API;
- `data`: a JSON object with `type`, `id` (the changed object's id) and what changed (a desktop's
  `state` and `pool_id`, a job's `kind` and `state`...).

A comment line is sent every 15 seconds on a quiet stream. Desktop users receive the events of
their own desktops and sessions; other events need the resource's read permission.

Authenticated with the bearer token like every operation: browsers read it with `fetch`."""


def _format(entry_id: str, event_type: str, data: object) -> bytes:
    return f"id: {entry_id}\nevent: {event_type}\ndata: {json.dumps(data)}\n\n".encode()


#: The live event stream, ``GET /api/v1/events``.
ROUTES = RouteTable()


@ROUTES.route(
    "GET",
    "/api/v1/events",
    summary="Stream live events (server-sent events)",
    description=_DESCRIPTION,
    tags=("events",),
    permission=None,
    authenticated=True,
    responses={
        200: ResponseSpec("The event stream (it stays open).", content_type="text/event-stream")
    },
)
async def stream_events(call: Call) -> web.StreamResponse:
    request = call.request
    resume = request.headers.get("Last-Event-ID", "").strip() or None
    if resume is not None and not valid_stream_id(resume):
        raise BadRequest("Last-Event-ID is not an id this stream gave.")
    hub = request.app[HUB_KEY]
    principal = call.caller
    permissions = set(principal.effective.permissions)
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    await response.write(f"retry: {RETRY_MS}\n: stream open\n\n".encode())
    try:
        async for entry in hub.events(resume, heartbeat=HEARTBEAT_SECONDS):
            if entry is None:
                await response.write(b": keep-alive\n\n")
                continue
            entry_id, event = entry
            if may_see(event, permissions, principal.id):
                await response.write(_format(entry_id, event.type, event.body()))
    except bus.LiveResumeGap as gap:
        await response.write(_format(gap.oldest, "reset", {"type": "reset"}))
    except (ConnectionResetError, RuntimeError):
        pass  # the client went away
    return response


async def publish_api_change(call: Call, answer: object) -> None:
    """Publish ``<kind>.changed`` for a successful change made through the API.

    The kind comes from the operation's ``<resource>:manage`` permission and the id from the
    first path parameter, else from the answer's ``id`` (a creation), so every change through
    the API reaches other screens at once.
    """
    permission = call.operation.permission or ""
    resource, _, action = permission.partition(":")
    kind = KIND_OF_RESOURCE.get(resource)
    if kind is None or action != "manage":
        return
    match = call.request.match_info
    resource_id = next(iter(match.values()), "") if match else ""
    if not resource_id and isinstance(answer, dict):
        resource_id = str(answer.get("id") or "")
    event = LiveEvent(
        f"{kind}.changed",
        str(resource_id),
        {"method": call.operation.method, "operation": call.operation.operation_id},
    )
    await bus.publish(call.runtime.kv, call.runtime.config["KVSTORE_KEY_PREFIX"], event)
