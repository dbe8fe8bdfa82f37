"""Live events (``GET /api/v1/events``): a server-sent event stream of state changes.

The stream carries the changes of the resources the caller may read (desktop and pool states,
job outcomes, sessions, and every change made through the API), as ``text/event-stream``. Each
event's ``id`` is its position in the stream; a client that reconnects with ``Last-Event-ID``
gets what it missed. It is authenticated with the bearer token like every other operation, so a
browser reads it with ``fetch`` (``EventSource`` cannot send the header).

What the subscriber may see is judged per event with what they hold *now*: every identity change
puts a marker in the stream (:func:`deskpool.identity.authenticator.identity_changed`), and the
subscriber's permissions are read again before the next event after it is sent (also when the
process hears of a change on the invalidation channel, and at the latest every
:data:`~deskpool.identity.authenticator.PRINCIPAL_CACHE_SECONDS`); the stream closes once its
user is disabled: heard on the invalidation channel, or seen by the process's access watch
(:mod:`deskpool.revocation.watch`, every few seconds from the database, Redis or not). A
user entitled to a pool gets ``pool.availability`` (the pool's id only) for a change of the
pool or of a desktop of it he does not hold (:func:`deskpool.live.model.view_for`), so his
pool list
follows; his entitlements are read again with his permissions and after any ``pool.changed``
(granting or revoking one publishes it). One
user holds at most ``API_EVENT_STREAMS_PER_USER`` streams per api process (429 past it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from typing import Any

from aiohttp import web

from deskpool.api.context import Call
from deskpool.api.routes import ResponseSpec, RouteTable
from deskpool.api.security import AUTHENTICATOR_KEY
from deskpool.errors import BadRequest, RateLimited
from deskpool.identity.authenticator import (
    IDENTITY_CHANGED_EVENT,
    PRINCIPAL_CACHE_SECONDS,
    Authenticator,
)
from deskpool.identity.principal import Principal
from deskpool.live import bus
from deskpool.live.model import (
    KIND_OF_RESOURCE,
    LiveEvent,
    valid_stream_id,
    view_for,
)
from deskpool.live.slots import SharedStreamSlots
from deskpool.pool_admin.service import entitled_pool_ids
from deskpool.revocation.model import Holding
from deskpool.revocation.watch import access_watch
from deskpool.runtime import Runtime

#: Seconds between keep-alive comments on a quiet stream (proxies close idle connections).
HEARTBEAT_SECONDS = 15.0
#: What a client waits before reconnecting, in milliseconds (the ``retry`` field).
RETRY_MS = 3_000

log = logging.getLogger(__name__)

HUB_KEY = web.AppKey("live_hub", bus.LiveHub)
STREAM_SLOTS_KEY = web.AppKey("live_stream_slots", SharedStreamSlots)

_DESCRIPTION = """\
A [server-sent event](https://html.spec.whatwg.org/multipage/server-sent-events.html) stream of
the changes of what the caller may read. Each event has:

- `id`: its position in the stream; reconnect with the `Last-Event-ID` header set to the last
  one received to get what was missed (events are kept for a while: when the position is too
  old, the first event is a `reset`, meaning "read everything again"; a `reset` also comes on
  an open stream after events may have been lost, when the key-value store was unavailable);
- `event`: `<kind>.<what>`: `desktop.state`, `desktop.deleted`, `pool.changed`,
  `pool.availability`, `job.succeeded`, `job.dead`, `job.retrying`, `session.changed`,
  `<kind>.changed` for any change made through the API;
- `data`: a JSON object with `type`, `id` (the changed object's id) and what changed (a desktop's
  `state` and `pool_id`, a job's `kind` and `state`...).

A comment line is sent every 15 seconds on a quiet stream. Desktop users receive the events of
their own desktops and sessions, and `pool.availability` (with the pool's id only) when a pool
they are entitled to, or another desktop of it, changes, so their list of pools follows what
opening one would give; other events need the resource's read permission, as the caller holds
it when the event is sent (a permission taken away stops the events it allowed; the stream
closes when the caller is disabled).

One user may hold `API_EVENT_STREAMS_PER_USER` streams open at once per api process: one more is
429 `too_many_streams` with `Retry-After`. A `Last-Event-ID` that is not a stream id (ASCII
digits `<ms>-<seq>`, each at most 2^64-1) is 400.

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
    slots = request.app[STREAM_SLOTS_KEY]
    principal = call.caller
    slot = await slots.take(principal.id)
    if slot is None:
        raise TooManyStreams(
            f"You hold {slots.per_user} live event streams open already; close one first.",
            headers={"Retry-After": str(RETRY_MS // 1000)},
        )
    async with slots.held(slot):
        subscriber = Subscriber(request.app[AUTHENTICATOR_KEY], principal, call.runtime)
        return await _stream(request, resume, subscriber)


class TooManyStreams(RateLimited):
    """The caller holds as many event streams as ``API_EVENT_STREAMS_PER_USER`` allows (429)."""

    code = "too_many_streams"
    title = "Too many event streams"


class Subscriber:
    """The caller of one stream, as they are now (read again after each identity change)."""

    def __init__(
        self, authenticator: Authenticator, principal: Principal, runtime: Runtime | None = None
    ) -> None:
        self.authenticator = authenticator
        self.principal = principal
        self.runtime = runtime
        self._generation = authenticator.generation
        self._loaded = time.monotonic()
        self._changed = False
        #: The pools the subscriber is entitled to (``None``: to be read).
        self._entitled: frozenset[str] | None = None
        self._entitled_at = 0.0

    def changed(self) -> None:
        """An identity change was read from the stream: read the principal again."""
        self._changed = True
        self._entitled = None

    def pools_changed(self) -> None:
        """A pool changed (an entitlement granted or revoked, say): read entitlements again."""
        self._entitled = None

    async def entitled(self) -> frozenset[str]:
        """The ids of the pools the subscriber is entitled to, read when needed."""
        if time.monotonic() - self._entitled_at >= PRINCIPAL_CACHE_SECONDS:
            self._entitled = None
        if self._entitled is None:
            if self.runtime is None:
                return frozenset()
            principal = await self.current()
            ids = await entitled_pool_ids(self.runtime, principal.id, principal.group_ids)
            self._entitled = frozenset(str(pool_id) for pool_id in ids)
            self._entitled_at = time.monotonic()
        return self._entitled

    @property
    def stale(self) -> bool:
        """Whether an identity change was heard, or the principal is older than the cache's."""
        return (
            self._changed
            or self._generation != self.authenticator.generation
            or time.monotonic() - self._loaded >= PRINCIPAL_CACHE_SECONDS
        )

    async def current(self) -> Principal:
        """The principal, read again when :attr:`stale`."""
        if self.stale:
            self._generation = self.authenticator.generation
            self._loaded = time.monotonic()
            self._changed = False
            self.principal = await self.authenticator.reload(self.principal)
        return self.principal

    async def until_disabled(self) -> None:
        """Return once the subscriber is disabled (checked at each change, and every minute)."""
        while not (await self.current()).disabled:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PRINCIPAL_CACHE_SECONDS):
                    await self.authenticator.wait_changed()


async def _stream(
    request: web.Request, resume: str | None, subscriber: Subscriber
) -> web.StreamResponse:
    hub = request.app[HUB_KEY]
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    await response.write(f"retry: {RETRY_MS}\n: stream open\n\n".encode())
    user_id = uuid.UUID(str(subscriber.principal.id))
    runtime = subscriber.runtime
    watching = (
        access_watch(runtime).watching(user_id, "live_events", _keeps_streaming)
        if runtime is not None
        else contextlib.nullcontext(None)
    )
    with watching as watch:
        relay = asyncio.create_task(_relay(hub, resume, subscriber, response))
        disabled = asyncio.create_task(subscriber.until_disabled())
        tasks: list[asyncio.Task[Any]] = [relay, disabled]
        if watch is not None:
            # The database's word, every few seconds whether or not Redis answers.
            tasks.append(asyncio.create_task(watch.lost.wait()))
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            ended = await asyncio.gather(*tasks, return_exceptions=True)
    for outcome in ended:
        if isinstance(outcome, Exception):
            # The response has started: a store lost now ends the stream (the client resumes).
            log.warning("a live event stream ended: %s", type(outcome).__name__)
    if subscriber.principal.disabled or (watch is not None and watch.is_lost):
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await response.write(b": account disabled\n\n")
    return response


def _keeps_streaming(holding: Holding) -> bool:
    """A live event stream goes on while its subscriber is enabled (each event is judged too)."""
    return not holding.disabled


async def _relay(
    hub: bus.LiveHub, resume: str | None, subscriber: Subscriber, response: web.StreamResponse
) -> None:
    """Send the events the subscriber may see now, until the hub or the client ends."""
    try:
        async for entry in hub.events(resume, heartbeat=HEARTBEAT_SECONDS):
            if entry is None:
                await response.write(b": keep-alive\n\n")
                continue
            entry_id, event = entry
            if event.type == bus.RESET:
                # Events may have been lost (Redis was away): the client reads everything again.
                subscriber.changed()
                await response.write(_format(entry_id, "reset", {"type": "reset"}))
                continue
            if event.type == IDENTITY_CHANGED_EVENT:
                # In stream order: every event after it is judged with what holds after it.
                subscriber.changed()
                continue
            if event.type == "pool.changed":
                subscriber.pools_changed()
            principal = await subscriber.current()
            if principal.disabled:
                return
            hinted = event.kind in ("desktop", "pool")
            entitled = await subscriber.entitled() if hinted else frozenset()
            shown = view_for(event, principal.effective.permissions, principal.id, entitled)
            if shown is not None:
                await response.write(_format(entry_id, shown.type, shown.body()))
    except bus.LiveResumeGap as gap:
        await response.write(_format(gap.oldest, "reset", {"type": "reset"}))
    except (ConnectionResetError, RuntimeError):
        pass  # the client went away


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
