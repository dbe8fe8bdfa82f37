"""HTTP listeners: every socket the platform serves HTTP on, with the same connection limits.

The api, gateway and web components are :class:`HttpListenerComponent` subclasses, and the
ops listener (``METRICS_ADDR``) is served through :func:`start_listener` too, so every listener
of the platform bounds its connections the same way (settings declared here):

- ``API_IDLE_TIMEOUT``: a connection that sends no request for that long (after it opened or
  after its last response) is closed: aiohttp's keep-alive timeout;
- ``API_HEADER_TIMEOUT``: a connection that has begun a request must send the rest of its
  request line and headers within that time, or it is closed (slowloris);
- ``API_MAX_CONNECTIONS``: a listener holding that many connections answers a new one 503
  (``too_many_connections``, with ``Retry-After``) and closes it at once;
- a per-address cap (the api's ``API_MAX_CONNECTIONS_PER_ADDRESS``): a client address holding
  that many connections of the listener has a new one answered the same way, so one address
  cannot hold them all; the addresses of trusted proxies (``API_TRUSTED_PROXIES``) are exempt.

A request aiohttp cannot parse (a header over 8190 bytes, a malformed line, an unsupported
content coding) is answered problem+json (431, 400 or 415) and logged as one line that names
the kind of error and the client, never the bytes received: they may hold a bearer token.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import json
import logging
import socket
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.http_exceptions import ContentEncodingError, HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestPayloadError

from deskpool.config import HostPort, Setting, SettingRegistry, parse_duration, parse_int
from deskpool.errors import BadRequest, DeskpoolError, UnsupportedMediaType, problem_document

if TYPE_CHECKING:
    from deskpool.config import Config
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: Seconds a client refused for :data:`API_MAX_CONNECTIONS` is told to wait.
REFUSED_RETRY_AFTER = 1

_SECTION = "HTTP listeners"


def declare_listener_settings(registry: SettingRegistry) -> None:
    """Declare the connection limits every HTTP listener applies."""

    def add(name: str, parse: Any, default: str, text: str, type_name: str) -> None:
        registry.add(Setting(name, parse, default, text, section=_SECTION, type_name=type_name))

    add(
        "API_IDLE_TIMEOUT",
        parse_duration,
        "75s",
        "How long a connection may stay open without sending a request (after it opened or "
        "after its last response) before it is closed; applies to every HTTP listener (api, "
        "ops, gateway, web). Keep it above the idle timeout of a load balancer in front.",
        "duration",
    )
    add(
        "API_HEADER_TIMEOUT",
        parse_duration,
        "10s",
        "How long a client may take, once it has begun a request, to send the request line and "
        "headers before the connection is closed (slowloris); applies to every HTTP listener.",
        "duration",
    )
    add(
        "API_MAX_CONNECTIONS",
        parse_int(1, 1_000_000),
        "1000",
        "Open connections one HTTP listener of a process holds; a connection over it is "
        "answered 503 with `Retry-After` and closed at once.",
        "integer",
    )
    add(
        "API_BODY_TIMEOUT",
        parse_duration,
        "30s",
        "How long the API waits for a request body to arrive in full; a slower one is "
        "answered 408 and its connection closed.",
        "duration",
    )


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a connection may idle or take to send its headers, and how many may be open.

    :param idle_timeout: seconds without a request before a connection is closed.
    :param header_timeout: seconds a begun request has to finish its request line and headers.
    :param max_connections: connections one listener holds at most.
    :param max_per_address: connections one client address holds at most (0: no cap).
    :param exempt: networks the per-address cap does not apply to (trusted proxies).
    """

    idle_timeout: float = 75.0
    header_timeout: float = 10.0
    max_connections: int = 1000
    max_per_address: int = 0
    exempt: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    def capped(self, address: str) -> bool:
        """Whether the per-address cap applies to ``address``."""
        if self.max_per_address <= 0:
            return False
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            return True
        if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
            parsed = parsed.ipv4_mapped
        return not any(parsed in network for network in self.exempt)

    @classmethod
    def from_config(cls, config: Config) -> ConnectionLimits:
        """The limits the configuration sets."""
        return cls(
            idle_timeout=config.duration("API_IDLE_TIMEOUT"),
            header_timeout=config.duration("API_HEADER_TIMEOUT"),
            max_connections=int(config["API_MAX_CONNECTIONS"]),
        )


def protocol_problem(error: HttpProcessingError) -> DeskpoolError:
    """The problem answered for a request the HTTP parser refused (never quoting its bytes)."""
    if isinstance(error, LineTooLong):
        return DeskpoolError(
            "The request line or a header field is longer than this server reads.",
            status=431,
            code="request_header_too_large",
            title="Request header fields too large",
        )
    if isinstance(error, ContentEncodingError):
        return UnsupportedMediaType(
            "The request body's Content-Encoding is not one this server reads.",
            code="unsupported_content_encoding",
            headers={"Accept-Encoding": "gzip, deflate"},
        )
    return BadRequest("The request is not valid HTTP.", code="malformed_request")


def problem_bytes(error: DeskpoolError) -> bytes:
    """A problem+json body for ``error`` about a request that was never read (a fresh id)."""
    return json.dumps(problem_document(error, "", uuid.uuid4().hex)).encode()


def _client_fault(error: BaseException | None) -> bool:
    return isinstance(error, HttpProcessingError | RequestPayloadError)


class GuardedRequestHandler(web.RequestHandler):
    """aiohttp's connection handler, with a header-read deadline and one-line parse errors.

    :param header_timeout: seconds a begun request has to finish its head.
    :param listener: the listener's name, for log lines.
    """

    def __init__(
        self, manager: web.Server, *, header_timeout: float, listener: str, **kwargs: Any
    ) -> None:
        super().__init__(manager, **kwargs)
        self.header_timeout = header_timeout
        self.listener = listener
        self._head_deadline: asyncio.TimerHandle | None = None
        self._head_count = 0

    def data_received(self, data: bytes) -> None:
        """Feed the parser; start the header deadline when these bytes begin a request."""
        super().data_received(data)
        if self._messages or self._request_in_progress:
            # A request head is complete (queued or being served): no deadline.
            self._cancel_head_deadline()
        elif data and self._head_deadline is None and self.transport is not None:
            self._head_count = self._request_count
            self._head_deadline = self._loop.call_later(self.header_timeout, self._head_expired)

    def _cancel_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_expired(self) -> None:
        self._head_deadline = None
        waiting = self._waiter is not None and not self._waiter.done()
        if waiting and self._request_count == self._head_count and not self._messages:
            log.info(
                "%s closed a connection from %s: no complete request head within "
                "API_HEADER_TIMEOUT (%gs)",
                self.listener,
                _peer(self),
                self.header_timeout,
            )
            self.force_close()

    def connection_lost(self, exc: BaseException | None) -> None:
        """Forget the header deadline with the connection."""
        self._cancel_head_deadline()
        super().connection_lost(exc)

    def refuse(self, error: DeskpoolError) -> None:
        """Answer ``error`` before reading anything, and close the connection."""
        body = problem_bytes(error)
        head = [
            f"HTTP/1.1 {error.status} {HTTPStatus(error.status).phrase}",
            "Content-Type: application/problem+json",
            f"Content-Length: {len(body)}",
            "Connection: close",
            *(f"{name}: {value}" for name, value in error.headers.items()),
        ]
        if self.transport is not None:
            self.transport.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        self.force_close()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """Answer a request the parser refused as problem+json, logged as one line."""
        if not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        error = protocol_problem(exc)
        log.info(
            "%s refused a request from %s: %s (%s %s)",
            self.listener,
            request.remote,
            type(exc).__name__,
            error.status,
            error.code,
        )
        response = web.Response(
            body=problem_bytes(error),
            status=error.status,
            content_type="application/problem+json",
            headers=error.headers,
        )
        response.force_close()
        return response

    def log_exception(self, *args: Any, **kwargs: Any) -> None:
        """Log a client's unreadable request as one line; anything else as aiohttp does."""
        error = kwargs.get("exc_info")
        if isinstance(error, BaseException) and _client_fault(error):
            log.info(
                "%s dropped a request from %s whose body could not be read (%s)",
                self.listener,
                _peer(self),
                type(error).__name__,
            )
            return
        super().log_exception(*args, **kwargs)


def _peer(handler: web.RequestHandler) -> str:
    peer = handler.peername
    if isinstance(peer, tuple):
        return str(peer[0])
    return str(peer or "unknown")


class GuardedServer(web.Server):
    """aiohttp's low-level server, making guarded handlers and capping open connections."""

    def __init__(
        self,
        handler: Any,
        *,
        limits: ConnectionLimits,
        listener: str,
        handler_kwargs: dict[str, Any],
        **kwargs: Any,
    ) -> None:
        super().__init__(handler, **kwargs)
        self.limits = limits
        self.listener = listener
        self.handler_kwargs = handler_kwargs
        self.refused = 0
        #: Open connections by client address (those the per-address cap applies to).
        self.by_address: collections.Counter[str] = collections.Counter()
        self.counted: dict[int, str] = {}
        self.refused_addresses: set[str] = set()

    def __call__(self) -> web.RequestHandler:
        """A handler for one new connection."""
        return GuardedRequestHandler(
            self,
            loop=asyncio.get_running_loop(),
            header_timeout=self.limits.header_timeout,
            listener=self.listener,
            keepalive_timeout=self.limits.idle_timeout,
            **self.handler_kwargs,
        )

    def connection_made(self, handler: web.RequestHandler, transport: asyncio.Transport) -> None:
        """Count the connection; answer it 503 and close it when the listener is full.

        The same when its address holds as many as one address may.
        """
        super().connection_made(handler, transport)
        over = len(self.connections) > self.limits.max_connections
        address = _peer_of(transport)
        if not over and address is not None and self.limits.capped(address):
            self.by_address[address] += 1
            self.counted[id(handler)] = address
            if self.by_address[address] > self.limits.max_per_address:
                self._refuse_address(handler, address)
                return
        if over and isinstance(handler, GuardedRequestHandler):
            if self.refused == 0:
                log.warning(
                    "%s holds API_MAX_CONNECTIONS (%d) connections: refusing new ones",
                    self.listener,
                    self.limits.max_connections,
                )
            self.refused += 1
            handler.refuse(_too_many("This server holds as many connections as it accepts"))
        elif self.refused and not over:
            log.warning(
                "%s accepts connections again (%d refused meanwhile)", self.listener, self.refused
            )
            self.refused = 0

    def _refuse_address(self, handler: web.RequestHandler, address: str) -> None:
        if address not in self.refused_addresses:
            log.warning(
                "%s: %s holds API_MAX_CONNECTIONS_PER_ADDRESS (%d) connections: refusing its "
                "new ones",
                self.listener,
                address,
                self.limits.max_per_address,
            )
        self.refused_addresses.add(address)
        if isinstance(handler, GuardedRequestHandler):
            handler.refuse(_too_many("Your address holds as many connections as one may"))

    def connection_lost(
        self, handler: web.RequestHandler, exc: BaseException | None = None
    ) -> None:
        """Uncount the connection."""
        super().connection_lost(handler, exc)
        address = self.counted.pop(id(handler), None)
        if address is not None:
            self.by_address[address] -= 1
            if self.by_address[address] <= 0:
                del self.by_address[address]
                self.refused_addresses.discard(address)


def _peer_of(transport: asyncio.Transport) -> str | None:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple | list) and peer:
        return str(peer[0])
    return None


def _too_many(what: str) -> DeskpoolError:
    return DeskpoolError(
        f"{what}; retry shortly.",
        status=503,
        code="too_many_connections",
        title="Service Unavailable",
        headers={"Retry-After": str(REFUSED_RETRY_AFTER)},
    )


class ListenerRunner(web.AppRunner):
    """An :class:`aiohttp.web.AppRunner` whose server is a :class:`GuardedServer`.

    :param limits: the connection limits.
    :param listener: the listener's name, for log lines.
    """

    def __init__(
        self, app: web.Application, *, limits: ConnectionLimits, listener: str, **kwargs: Any
    ) -> None:
        super().__init__(app, handle_signals=False, access_log=None, **kwargs)
        self.limits = limits
        self.listener = listener

    async def _make_server(self) -> web.Server:
        # The application's startup runs here, as in AppRunner; then aiohttp's server is
        # replaced by one that makes guarded handlers for the same request handler.
        server = await super()._make_server()
        return GuardedServer(
            server.request_handler,
            request_factory=server.request_factory,
            handler_cancellation=server.handler_cancellation,
            limits=self.limits,
            listener=self.listener,
            # What the application asks of its handlers (the API reads bodies as sent).
            handler_kwargs={
                "access_log": None,
                **{
                    name: value
                    for name, value in server._kwargs.items()
                    if name in ("auto_decompress",)
                },
            },
        )


#: Sockets this process bound ahead of its listeners (:func:`bind_ahead`), by bound address.
_BOUND_AHEAD: dict[tuple[str, int], socket.socket] = {}


def bind_ahead(address: HostPort) -> HostPort:
    """Bind ``address`` now (port 0: a free port the system picks) for a listener to serve later.

    For a process that must name its listeners' addresses before they start (``deskpool dev``
    derives its public URLs from them): :func:`start_listener`, asked for the address returned,
    serves on the socket bound here instead of binding again.
    """
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    sock = socket.create_server((address.host, address.port), family=family)
    bound = HostPort(address.host, int(sock.getsockname()[1]))
    _BOUND_AHEAD[(bound.host, bound.port)] = sock
    return bound


def bound_address(runner: web.AppRunner) -> HostPort:
    """The address ``runner`` listens on: the port the system picked when asked for port 0."""
    host, port = runner.addresses[0][:2]
    return HostPort(str(host), int(port))


async def start_listener(
    app: web.Application,
    address: HostPort,
    *,
    name: str,
    limits: ConnectionLimits,
    shutdown_timeout: float,
) -> web.AppRunner:
    """Serve ``app`` on ``address`` with ``limits``; the returned runner stops it (cleanup)."""
    runner = ListenerRunner(app, limits=limits, listener=name, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    ahead = _BOUND_AHEAD.pop((address.host, address.port), None)
    site = (
        web.SockSite(runner, ahead)
        if ahead is not None
        else web.TCPSite(runner, address.host, address.port)
    )
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


class HttpListenerComponent(ABC):
    """Serves :meth:`create_app` on :attr:`address` until stopped.

    :param runtime: the process runtime.
    """

    name: str = "listener"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._runner: web.AppRunner | None = None
        self._started = False

    @property
    @abstractmethod
    def address(self) -> HostPort:
        """The address to bind."""

    @property
    def shutdown_timeout(self) -> float:
        """Seconds in-flight requests get to finish at stop."""
        return 10.0

    @property
    def limits(self) -> ConnectionLimits:
        """The connection limits (``API_IDLE_TIMEOUT``, ``API_HEADER_TIMEOUT``...)."""
        return ConnectionLimits.from_config(self.runtime.config)

    @abstractmethod
    def create_app(self) -> web.Application:
        """The application to serve."""

    @property
    def started(self) -> bool:
        """Whether the listener is bound."""
        return self._started

    @property
    def runner(self) -> web.AppRunner | None:
        """The runner serving the application while started (its ``addresses`` are bound)."""
        return self._runner

    @property
    def bound(self) -> HostPort:
        """The address bound while started (:attr:`address`, with the port picked for 0)."""
        if self._runner is None:
            raise RuntimeError(f"the {self.name} listener is not started")
        return bound_address(self._runner)

    async def start(self) -> None:
        """Build the application and bind the address."""
        self._runner = await start_listener(
            self.create_app(),
            self.address,
            name=self.name,
            limits=self.limits,
            shutdown_timeout=self.shutdown_timeout,
        )
        self._started = True
        log.info("%s listening on http://%s", self.name, self.bound)

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests drain within the timeout, then close."""
        self._started = False
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
