"""Desktop sessions (``sessions:read`` / ``sessions:manage``) and connection tokens.

A session is one tunnel between a browser and a desktop, recorded by the gateway that holds
it (:mod:`deskpool.sessions.broker`): who, which desktop and pool, which gateway, when it
started and ended and why, the bytes relayed each way. Administrators list and read sessions,
ask for one to be closed (``POST .../disconnect``: 202; the gateway holding it closes it within
seconds, wherever it runs), and may join a live session read-only (``POST .../shadow``).

Users list their own sessions (``/api/v1/me/sessions``), get a new connection token for a
desktop they hold (``POST /api/v1/me/desktops/{desktop_id}/connection``) and log off from it
(``POST /api/v1/me/desktops/{desktop_id}/logoff``); opening a desktop of
a pool (``POST /api/v1/me/pools/{pool_id}/desktop``) answers one as well. A token is
single-use and short-lived (``SESSION_TOKEN_TTL``): the browser hands it to the gateway at
``url`` (``GATEWAY_PUBLIC_WS_URL``) at once.

The handlers and views are here; their schemas in :mod:`deskpool.api.resources.session_schemas`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from deskpool.api.context import Call
from deskpool.api.pagination import Page, decode_cursor, page_schema, paginate
from deskpool.api.problems import PROBLEM_CONTENT_TYPE, ProblemSchema
from deskpool.api.resources.client_policy_schemas import TransferListSchema
from deskpool.api.resources.labels import NO_LABELS, Labels, labels_for
from deskpool.api.resources.session_schemas import (
    PENDING_CONNECTION,
    AnnouncedSchema,
    DesktopConnectionSchema,
    LogoffSchema,
    MySessionQuery,
    MyWatchersSchema,
    SessionDetailSchema,
    SessionQuery,
    SessionSchema,
    ShadowSchema,
)
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.errors import InvalidCursor
from deskpool.helpdesk import announced
from deskpool.ids import parse_id
from deskpool.outage_brokering import service as brokering
from deskpool.pools.model import Desktop
from deskpool.sessions import logoff, service, store, watchers
from deskpool.sessions.logons import LogonRecord
from deskpool.sessions.model import SessionRecord
from deskpool.sessions.service import DesktopConnection, Opened, PendingConnection
from deskpool.sessions.transfers import session_transfers

_UNAVAILABLE = {
    503: ResponseSpec(
        "Desktop access is not configured (`gateway_not_configured`: `GATEWAY_PUBLIC_WS_URL` "
        "unset, or not `wss://` outside development; `secrets_key_missing`), or the desktop "
        "cannot be reached now (`desktop_unreachable`, `desktop_not_ready`, with "
        "`Retry-After`).",
        ProblemSchema,
        content_type=PROBLEM_CONTENT_TYPE,
        headers={"Retry-After": "Seconds to wait before trying again."},
    ),
}


# ---------------------------------------------------------------------------------- views


def my_desktop_view(desktop: Desktop) -> dict[str, Any]:
    """The caller's desktop as opening or logging off answers it (with its state)."""
    return {
        "id": str(desktop.id),
        "name": desktop.name,
        "state": str(desktop.state),
        "pool_id": str(desktop.pool_id),
    }


def connection_view(connection: DesktopConnection) -> dict[str, Any]:
    """The desktop and its connection, as opening a desktop answers them."""
    return {
        **my_desktop_view(connection.desktop),
        "connection": {
            "token": connection.token,
            "url": connection.url,
            "protocol": connection.protocol,
            "expires_at": connection.expires_at,
            "recorded": connection.recorded,
            **({"client": connection.client.as_json()} if connection.client is not None else {}),
        },
    }


def opened_view(opened: Opened) -> Reply:
    """What opening a desktop answers: 200 with its connection, or 202 while it starts."""
    if isinstance(opened, DesktopConnection):
        return Reply(connection_view(opened))
    return Reply(pending_view(opened), 202)


def pending_view(pending: PendingConnection) -> dict[str, Any]:
    """A desktop being started for the caller."""
    return {
        **my_desktop_view(pending.desktop),
        "starting": {
            "requested_at": pending.requested_at,
            "logon_id": str(pending.logon_id),
            "building": pending.building,
        },
    }


def session_view(session: SessionRecord, labels: Labels = NO_LABELS) -> dict[str, Any]:
    """A session as the API shows it (its user and pool named by ``labels``)."""
    return {
        "id": str(session.id),
        "user_id": str(session.user_id),
        **labels.user("user", session.user_id),
        "desktop_id": str(session.desktop_id),
        "desktop_name": session.desktop_name,
        "pool_id": str(session.pool_id),
        **labels.pool(session.pool_id),
        "protocol": session.protocol,
        "state": "open" if session.is_open else "ended",
        "read_only": session.read_only,
        "shadow_of": None if session.shadow_of is None else str(session.shadow_of),
        "gateway_id": session.gateway_id,
        "started_at": session.started_at,
        "connected_at": session.connected_at,
        "last_activity_at": session.last_activity_at,
        "ended_at": session.ended_at,
        "end_reason": session.end_reason,
        "bytes_to_desktop": session.bytes_to_desktop,
        "bytes_to_browser": session.bytes_to_browser,
        "disconnect_requested_at": session.disconnect_requested_at,
    }


def time_id_cursor(cursor: str | None) -> tuple[datetime, uuid.UUID] | None:
    """The ``[time, id]`` position a list cursor encodes. :raises InvalidCursor: it is not one."""
    after = decode_cursor(cursor)
    if after is None:
        return None
    if isinstance(after, list) and len(after) == 2 and all(isinstance(p, str) for p in after):
        try:
            return datetime.fromisoformat(after[0]), uuid.UUID(after[1])
        except ValueError:
            pass
    raise InvalidCursor()


def _open_filter(query: dict[str, Any]) -> bool | None:
    state = query.get("state")
    return None if state is None else state == "open"


async def _page(call: Call, where: store.SessionFilter) -> Page:
    limit = int(call.query["limit"])
    records = await service.list_sessions(
        call.runtime, limit=limit + 1, after=time_id_cursor(call.query.get("cursor")), where=where
    )
    page = paginate(records, limit, store.session_cursor)
    labels = await labels_of(call, page.items)
    return Page([session_view(record, labels) for record in page.items], page.next)


async def labels_of(call: Call, sessions: Sequence[SessionRecord]) -> Labels:
    """The names of the users and pools of ``sessions``."""
    return await labels_for(
        call.runtime, users=[s.user_id for s in sessions], pools=[s.pool_id for s in sessions]
    )


def _session_id(call: Call) -> uuid.UUID:
    return parse_id(call.path_param("session_id"), "session")


# ----------------------------------------------------------------------------------- routes


#: The session operations and the caller's own.
ROUTES = RouteTable()


@ROUTES.route(
    "GET",
    "/api/v1/sessions",
    summary="List desktop sessions",
    description="Newest first; filter by user, desktop, pool and `open` / `ended`.",
    tags=("sessions",),
    permission="sessions:read",
    query=SessionQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of sessions.", page_schema(SessionSchema))},
)
async def list_sessions(call: Call) -> Page:
    query = call.query
    return await _page(
        call,
        store.SessionFilter(
            user_id=query.get("user_id"),
            desktop_id=query.get("desktop_id"),
            pool_id=query.get("pool_id"),
            open=_open_filter(query),
        ),
    )


@ROUTES.route(
    "GET",
    "/api/v1/sessions/{session_id}",
    summary="Get a desktop session",
    tags=("sessions",),
    permission="sessions:read",
    responses={200: ResponseSpec("The session and its logon's phases.", SessionDetailSchema)},
)
async def get_session(call: Call) -> dict[str, Any]:
    session, logon = await service.get_session_detail(call.runtime, _session_id(call))
    labels = await labels_of(call, [session])
    return {**session_view(session, labels), "logon": _logon_view(logon)}


@ROUTES.route(
    "GET",
    "/api/v1/sessions/{session_id}/transfers",
    summary="List a desktop session's transfers",
    description=(
        "Every clipboard transfer, file, print job and refused stream the gateway saw on the "
        "session, under its pool's client policy: direction, sizes, file name, SHA-256, "
        "allowed, cut or refused and why. The content itself is never stored. Oldest first, "
        "at most 500 (the audit trail keeps them all, as `session.transfer`)."
    ),
    tags=("sessions",),
    permission="sessions:read",
    responses={200: ResponseSpec("The session's transfers.", TransferListSchema)},
)
async def list_session_transfers(call: Call) -> dict[str, Any]:
    return {"items": await session_transfers(call.runtime, _session_id(call))}


def _logon_view(logon: LogonRecord | None) -> dict[str, Any] | None:
    return None if logon is None else logon.as_json()


@ROUTES.route(
    "POST",
    "/api/v1/sessions/{session_id}/disconnect",
    summary="Disconnect a desktop session",
    description=(
        "Asks the gateway holding the tunnel to close it (within seconds, whichever gateway "
        "it is); the session then ends with `admin_disconnect`, and the pool's "
        "after-disconnect policy applies. 409 `session_not_open` when it has ended. A "
        "`message` (the body is optional) goes to the session's user first (a warning his "
        "desktop views show at once, audited `message.send` with `about` "
        "`session.disconnect`)."
    ),
    tags=("sessions",),
    permission="sessions:manage",
    body=AnnouncedSchema,
    body_optional=True,
    responses={202: ResponseSpec("The session, asked to close.", SessionSchema)},
)
async def disconnect_session(call: Call) -> Reply:
    session = await announced.disconnect(
        call.runtime, call.actor, _session_id(call), call.body.get("message")
    )
    return Reply(session_view(session), 202)


@ROUTES.route(
    "POST",
    "/api/v1/sessions/{session_id}/shadow",
    summary="Watch a desktop session read-only",
    description=(
        "A connection token that joins the live session read-only: the administrator sees "
        "the user's desktop and cannot type or click. 409 `session_not_open` when the "
        "session has ended or has not connected yet."
    ),
    tags=("sessions",),
    permission="sessions:manage",
    responses={
        200: ResponseSpec("The session and the viewer's token.", ShadowSchema),
        **_UNAVAILABLE,
    },
)
async def shadow_session(call: Call) -> dict[str, Any]:
    session, connection = await service.shadow_session(
        call.runtime, call.caller, _session_id(call), call.actor.audit_event
    )
    return {
        "session": session_view(session),
        "connection": connection_view(connection)["connection"],
    }


@ROUTES.route(
    "GET",
    "/api/v1/me/watchers",
    summary="Who watches the caller's desktop now",
    description=(
        "The administrators watching one of the caller's open sessions read-only at this "
        "moment; each start and end of such a view sends the caller a `session.watched` live "
        "event, so a desktop view tells him while it lasts."
    ),
    tags=("me",),
    permission=None,
    authenticated=True,
    responses={200: ResponseSpec("The views of his sessions open now.", MyWatchersSchema)},
)
async def list_my_watchers(call: Call) -> dict[str, Any]:
    found = await watchers.watchers_of(call.runtime, call.caller.id)
    return {
        "items": [
            {
                "session_id": str(w.session_id),
                "watched_session_id": str(w.watched_session_id),
                "desktop_name": w.desktop_name,
                "watcher_name": w.watcher_name,
                "since": w.since,
            }
            for w in found
        ]
    }


@ROUTES.route(
    "GET",
    "/api/v1/me/sessions",
    summary="The caller's desktop sessions",
    description="Newest first; `state` keeps only open or ended ones.",
    tags=("me",),
    permission=None,
    authenticated=True,
    query=MySessionQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of sessions.", page_schema(SessionSchema))},
)
async def list_my_sessions(call: Call) -> Page:
    return await _page(
        call,
        store.SessionFilter(user_id=uuid.UUID(str(call.caller.id)), open=_open_filter(call.query)),
    )


@ROUTES.route(
    "POST",
    "/api/v1/me/desktops/{desktop_id}/connection",
    summary="Reconnect to a desktop the caller holds",
    description=(
        "A new single-use connection token to the caller's desktop (a persistent desktop "
        "the caller was logged off from is handed back first). A desktop resting powered off "
        "(a schedule's off-peak phase) is started for the caller, and one on its way to ready "
        "for him is waited for: 202 with the pending connection (start on connect). 404 when "
        "the caller does not "
        "hold it; 403 `access_revoked` when the caller may no longer open desktops of its pool "
        "(the entitlement was removed: a persistent desktop stays assigned until it comes "
        "back); 409 `license_limit_reached` when the desktop has no session and one more "
        "would go beyond the license's concurrent sessions."
    ),
    tags=("me",),
    permission=None,
    authenticated=True,
    responses={
        200: ResponseSpec("The desktop and its connection.", DesktopConnectionSchema),
        202: PENDING_CONNECTION,
        **_UNAVAILABLE,
    },
)
async def connect_my_desktop(call: Call) -> Reply:
    desktop_id = parse_id(call.path_param("desktop_id"), "desktop")
    opened = await brokering.reconnect_desktop(
        call.runtime, call.caller, desktop_id, call.actor.audit_event
    )
    return opened_view(opened)


@ROUTES.route(
    "POST",
    "/api/v1/me/desktops/{desktop_id}/logoff",
    summary="Log off from a desktop the caller holds",
    description=(
        "Ends the caller's use of the desktop, whatever the pool's after-disconnect policy: "
        "the gateway holding each open session is asked to close it (it ends with "
        "`user_logoff`), then the user is logged off; with no session open, at once. After "
        "log-off a persistent desktop is `ready` and stays the caller's; a non-persistent "
        "one is rebuilt before anyone else gets it. A desktop the caller is not logged on "
        "to is answered as it is. 404 when the caller does not hold it."
    ),
    tags=("me",),
    permission=None,
    authenticated=True,
    responses={202: ResponseSpec("The desktop, logging off.", LogoffSchema)},
)
async def log_off_my_desktop(call: Call) -> Reply:
    desktop_id = parse_id(call.path_param("desktop_id"), "desktop")
    request = await logoff.log_off_my_desktop(
        call.runtime, call.caller, desktop_id, call.actor.audit_event
    )
    return Reply(
        {
            **my_desktop_view(request.desktop),
            "closing_sessions": [str(session.id) for session in request.closing],
        },
        202,
    )
