"""The WebSocket endpoint that ``Guacamole.WebSocketTunnel`` connects to, unchanged.

``new Guacamole.WebSocketTunnel(url)`` opens ``url + "?" + data`` with the subprotocol
``guacamole``, where ``data`` is what the page passed to ``Guacamole.Client.connect``: here
``token=...`` and, optionally, the display the handshake announces (``width``, ``height``,
``dpi``, ``audio``, ``video``, ``image`` (repeatable) and ``timezone``; guacamole-client's own
``GUAC_WIDTH``-style names are accepted too). Nothing else comes from the browser: protocol,
host, port and credentials are what the server resolved when it issued the token.

The upgrade is always accepted, so that every refusal reaches the browser the way Guacamole's
Java endpoint sends it: a close frame with the code guacamole-common pairs with the status and
the status code in decimal as the reason. In order: the ``Origin`` (``CLIENT_FORBIDDEN``), the
query (``CLIENT_BAD_REQUEST``, ``CLIENT_UNAUTHORIZED`` without a token), the gateway's capacity
(``CLIENT_TOO_MANY``, or ``UPSTREAM_UNAVAILABLE`` while it drains), the token (``TokenRejected``),
the daemon (``UPSTREAM_NOT_FOUND`` when it cannot be reached, ``UPSTREAM_TIMEOUT`` when it is
slow, its own status when it answers ``error``, ``UPSTREAM_ERROR`` when it breaks the protocol).
Then the tunnel's UUID (the session id) goes first, ``0.,36.<uuid>;``, and the relay runs.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from aiohttp import web
from multidict import MultiMapping

from deskpool.client_policy.model import ClientPolicy, guacd_arguments, offered
from deskpool.guacamole import Status
from deskpool.guacamole.handshake import ClientInfo, HandshakeError, perform_handshake
from deskpool.guacamole.stream import InstructionReader
from deskpool.sessions.tunnel import (
    RecordingSink,
    SessionEndReason,
    TokenRejected,
    TunnelCounters,
    TunnelGrant,
)
from deskpool.values import ascii_int
from deskpool_gateway.recording import Recorder
from deskpool_gateway.relay import DISCONNECT, Tunnel
from deskpool_gateway.watermarks import open_watermark, watermark_values

if TYPE_CHECKING:
    from deskpool_gateway.supervisor import TunnelSupervisor

__all__ = ["BadRequest", "client_info", "tunnel_handler"]

log = logging.getLogger(__name__)

#: Largest WebSocket message accepted from a browser (aiohttp refuses larger with 1009).
MAX_MESSAGE_SIZE = 256 * 1024
#: Seconds a closing WebSocket waits for the browser's close frame.
CLOSE_TIMEOUT = 5.0

_MIMETYPE = re.compile(r"[\w.+-]{1,64}/[\w.+-]{1,64}(;[\w.+=-]{1,64}){0,4}")
_TIMEZONE = re.compile(r"[A-Za-z0-9_+\-/]{1,64}")

#: Why a token was refused, as the browser's status.
TOKEN_STATUS = {
    "unknown": Status.CLIENT_UNAUTHORIZED,
    "used": Status.CLIENT_UNAUTHORIZED,
    "expired": Status.CLIENT_UNAUTHORIZED,
    "desktop_gone": Status.RESOURCE_NOT_FOUND,
    "access_revoked": Status.CLIENT_FORBIDDEN,
    "unavailable": Status.SERVER_ERROR,
}


class BadRequest(Exception):
    """The query of the upgrade request is not acceptable."""


def _one(query: MultiMapping[str], *names: str) -> str | None:
    for name in names:
        if name in query:
            return query[name]
    return None


def _many(query: MultiMapping[str], *names: str) -> tuple[str, ...]:
    values: list[str] = []
    for name in names:
        values += query.getall(name, [])
    if len(values) > 16 or not all(_MIMETYPE.fullmatch(value) for value in values):
        raise BadRequest("bad mimetype list")
    return tuple(dict.fromkeys(values))


def _number(query: MultiMapping[str], names: Sequence[str], default: int, top: int) -> int:
    raw = _one(query, *names)
    if raw is None or raw == "":
        return default
    number = ascii_int(raw)
    if number is None or not 1 <= number <= top:
        raise BadRequest(f"bad {names[0]}")
    return number


def client_info(query: MultiMapping[str], name: str) -> ClientInfo:
    """The display the browser announced, validated.

    :param name: the user's display name (from the grant, not the browser).
    :raises BadRequest: a value is malformed or out of range.
    """
    defaults = ClientInfo()
    timezone = _one(query, "timezone", "GUAC_TIMEZONE") or None
    if timezone is not None and not _TIMEZONE.fullmatch(timezone):
        raise BadRequest("bad timezone")
    image = _many(query, "image", "GUAC_IMAGE")
    return ClientInfo(
        width=_number(query, ("width", "GUAC_WIDTH"), defaults.width, 8192),
        height=_number(query, ("height", "GUAC_HEIGHT"), defaults.height, 8192),
        dpi=_number(query, ("dpi", "GUAC_DPI"), defaults.dpi, 2400),
        audio=_many(query, "audio", "GUAC_AUDIO"),
        video=_many(query, "video", "GUAC_VIDEO"),
        image=image or defaults.image,
        timezone=timezone,
        name=name or None,
    )


async def _refuse(ws: web.WebSocketResponse, status: Status) -> web.WebSocketResponse:
    await ws.close(code=status.websocket_code, message=status.close_reason.encode())
    return ws


def offered_policy(grant: TunnelGrant, policy: ClientPolicy | None = None) -> ClientPolicy:
    """The grant's client policy (or ``policy``) narrowed to what its desktop offers."""
    target = grant.target
    return offered(policy or grant.client_policy, target.protocol, target.parameters)


def connection_parameters(grant: TunnelGrant) -> dict[str, str]:
    """The ``connect`` values by argument name: the server-resolved target, never the browser."""
    target = grant.target
    values = dict(target.parameters)
    values["hostname"] = target.hostname
    values["port"] = str(target.port)
    values.update(guacd_arguments(offered_policy(grant), target.protocol, str(grant.session_id)))
    if grant.read_only:
        values["read-only"] = "true"
    return values


async def tunnel_handler(request: web.Request) -> web.StreamResponse:
    """Accept the upgrade, then refuse with a status or relay until the tunnel ends."""
    supervisor: TunnelSupervisor = request.app[SUPERVISOR]
    metrics = supervisor.metrics
    ws = web.WebSocketResponse(
        protocols=("guacamole",),
        max_msg_size=MAX_MESSAGE_SIZE,
        timeout=CLOSE_TIMEOUT,
        autoping=True,
        # No permessage-deflate, though browsers offer it: the display stream is mostly
        # base64 PNG/JPEG/WebP, and deflating every message would cost CPU and latency.
        compress=False,
    )
    await ws.prepare(request)
    if not supervisor.settings.origin_allowed(request.headers.get("Origin")):
        metrics.refused("origin")
        return await _refuse(ws, Status.CLIENT_FORBIDDEN)
    token = request.query.get("token", "")
    if not token:
        metrics.refused("no_token")
        return await _refuse(ws, Status.CLIENT_UNAUTHORIZED)
    try:
        client_info(request.query, "")
    except BadRequest:
        metrics.refused("bad_request")
        return await _refuse(ws, Status.CLIENT_BAD_REQUEST)
    if not supervisor.accepting:
        metrics.refused("shutting_down")
        return await _refuse(ws, Status.UPSTREAM_UNAVAILABLE)
    if len(supervisor.tunnels) + supervisor.opening >= supervisor.settings.max_tunnels:
        metrics.refused("too_many")
        return await _refuse(ws, Status.CLIENT_TOO_MANY)
    supervisor.opening += 1
    try:
        tunnel = await _open(request, ws, token, supervisor)
    finally:
        supervisor.opening -= 1
    if tunnel is None:
        return ws
    supervisor.add(tunnel)
    try:
        await tunnel.run()
    finally:
        await supervisor.finish(tunnel)
    return ws


async def _open(
    request: web.Request, ws: web.WebSocketResponse, token: str, supervisor: TunnelSupervisor
) -> Tunnel | None:
    """Redeem the token, connect to the daemon and shake hands; ``None`` once refused."""
    metrics, settings, broker = supervisor.metrics, supervisor.settings, supervisor.broker
    started = time.monotonic()
    try:
        grant = await broker.redeem(token, gateway_id=supervisor.gateway_id)
    except TokenRejected as rejected:
        metrics.refused(f"token_{rejected.reason}")
        await _refuse(ws, TOKEN_STATUS.get(rejected.reason, Status.CLIENT_UNAUTHORIZED))
        return None
    info = client_info(request.query, grant.user_display_name)
    daemon = settings.daemon
    status: Status
    # The daemon's time starts now: a redemption that queued for the database is not its.
    asked = time.monotonic()
    try:
        async with asyncio.timeout(settings.handshake_timeout):
            reader, writer = await asyncio.open_connection(daemon.host, daemon.port)
    except TimeoutError:
        status, cause = Status.UPSTREAM_TIMEOUT, "daemon_timeout"
    except OSError as error:
        log.warning("cannot reach the desktop daemon at %s: %s", daemon, error)
        status, cause = Status.UPSTREAM_NOT_FOUND, "daemon_unreachable"
    else:
        instructions = InstructionReader(reader)
        select = grant.join_connection_id or grant.target.protocol
        try:
            handshake = await perform_handshake(
                instructions,
                writer,
                select,
                connection_parameters(grant),
                info,
                within=max(settings.handshake_timeout - (time.monotonic() - asked), 0.1),
            )
        except HandshakeError as error:
            log.warning("tunnel %s: handshake failed: %s", grant.session_id, error)
            writer.write(DISCONNECT)
            writer.close()
            status, cause = error.status, _cause(error.status)
        else:
            metrics.handshake_seconds.observe(time.monotonic() - started)
            tunnel = Tunnel(
                grant,
                ws,
                reader,
                writer,
                instructions.decoder,
                metrics,
                idle_timeout=settings.effective_limit(settings.idle_timeout, grant.idle_timeout),
                max_duration=settings.effective_limit(settings.max_duration, grant.max_duration),
                first_frame_timeout=settings.first_frame_timeout,
                held_input_limit=settings.held_input_limit,
            )
            tunnel.leftover = instructions.detach()
            tunnel.on_first_frame = lambda: supervisor.first_frame(grant)
            tunnel.recorder = await _recorder(grant, supervisor)
            tunnel.guard = supervisor.guard(grant, offered_policy(grant))
            tunnel.watermark_values = watermark_values(grant, request.remote or "")
            tunnel.watermark = open_watermark(
                tunnel.guard.policy, tunnel.watermark_values, datetime.now(UTC)
            )
            await supervisor.connected(tunnel, handshake.connection_id)
            return tunnel
    metrics.refused(cause)
    await supervisor.ended_early(grant, SessionEndReason.DAEMON_ERROR, TunnelCounters())
    await _refuse(ws, status)
    return None


async def _recorder(grant: TunnelGrant, supervisor: TunnelSupervisor) -> Recorder | None:
    """The tunnel's recorder when its pool records sessions and the broker keeps recordings."""
    broker = supervisor.broker
    if grant.recording_id is None or not isinstance(broker, RecordingSink):
        return None
    channel = await supervisor.recordings.open(grant.recording_id, broker)
    return Recorder(channel, include_keys=grant.record_keys)


def _cause(status: Status) -> str:
    return {
        Status.UPSTREAM_TIMEOUT: "daemon_timeout",
        Status.UPSTREAM_ERROR: "daemon_protocol",
    }.get(status, "daemon_refused")


SUPERVISOR: web.AppKey[TunnelSupervisor] = web.AppKey("tunnel_supervisor")
