"""The API application: middlewares, the operation wrapper, and the documentation routes.

Order of the middlewares, outermost first: request id, logging, metrics and RateLimit headers;
CORS; problem+json; the input guard (text that is not text in the path or query, see
:mod:`deskpool.api.inputs`). CORS sits outside the problem middleware so error responses carry its
headers too. Each operation of the route table is wrapped by :func:`operation_handler`, which
refuses an oversized body, authenticates (protected operations) and checks the declared
permission, applies the rate limit (by principal after authentication; by client address on
public operations), validates the query and body with webargs, calls the handler (a read whose
database connection was lost is served once more on another; an operation whose transaction
PostgreSQL ended for a deadlock or a serialization failure is run again, a bounded number of
times) and dumps its result through the
response schema.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.typedefs import Handler
from marshmallow import EXCLUDE, RAISE, Schema
from prometheus_client import Counter, Histogram

from deskpool.api import docs, openapi, resources
from deskpool.api.client_address import TRUSTED_PROXIES_KEY, TrustedProxies
from deskpool.api.context import Call
from deskpool.api.cors import CorsPolicy, cors_middleware, cors_on_prepare
from deskpool.api.idempotency import UNPUBLISHED, idempotent, key_of
from deskpool.api.inputs import input_guard_middleware
from deskpool.api.openapi import OPENAPI_DOCUMENT_KEY
from deskpool.api.pagination import (
    CursorSeals,
    PageLimits,
    check_page_contract,
    cursor_binding,
    seal_next,
)
from deskpool.api.problems import REQUEST_ID_KEY, problem_middleware
from deskpool.api.ratelimit import RateLimiter, add_rate_limit_headers
from deskpool.api.resources import events
from deskpool.api.routes import Operation, Reply, RouteTable
from deskpool.api.security import AUTHENTICATOR_KEY, authenticate, install_authentication
from deskpool.api.validation import DeskpoolParser, check_body_size, parse_body, parse_query
from deskpool.clusters import service as clusters_service
from deskpool.identity import access
from deskpool.live.bus import LiveHub
from deskpool.live.slots import SharedStreamSlots
from deskpool.outage_brokering import service as brokering
from deskpool.outages import (
    CONTENTION_ATTEMPTS,
    DATABASE,
    contended,
    contention_pause,
    outage_of,
)
from deskpool.revocation import service as revocation
from deskpool.runtime import Runtime
from deskpool.sessions import service as sessions_service

if TYPE_CHECKING:
    from deskpool.plugins import PluginHost

log = logging.getLogger("deskpool.api.access")
startup_log = logging.getLogger(__name__)

RUNTIME_KEY = web.AppKey("runtime", Runtime)
ROUTES_KEY = web.AppKey("routes", RouteTable)
RATE_LIMITER_KEY = web.AppKey("rate_limiter", RateLimiter)
PAGE_LIMITS_KEY = web.AppKey("page_limits", PageLimits)
CURSOR_SEALS_KEY = web.AppKey("cursor_seals", CursorSeals)
PARSER_KEY = web.AppKey("request_parser", DeskpoolParser)

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")

#: Methods whose handler is run a second time when the database was lost under the first.
_RETRIED_METHODS = frozenset({"GET", "HEAD"})


class HttpMetrics:
    """HTTP request count and latency, labelled by route template, method and status."""

    def __init__(self, runtime: Runtime) -> None:
        self.requests = Counter(
            "deskpool_http_requests",
            "HTTP requests served by the API.",
            ["route", "method", "status"],
            registry=runtime.metrics,
        )
        self.latency = Histogram(
            "deskpool_http_request_duration_seconds",
            "Time to serve an API request.",
            ["route", "method"],
            registry=runtime.metrics,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        # Children by label values: looking them up in prometheus_client on every request
        # costs more than the rest of the bookkeeping.
        self._counted: dict[tuple[str, str, int], Any] = {}
        self._timed: dict[tuple[str, str], Any] = {}

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count one answered request and its latency."""
        counter = self._counted.get((route, method, status))
        if counter is None:
            counter = self.requests.labels(route, method, str(status))
            self._counted[(route, method, status)] = counter
        counter.inc()
        timer = self._timed.get((route, method))
        if timer is None:
            timer = self.latency.labels(route, method)
            self._timed[(route, method)] = timer
        timer.observe(seconds)


METRICS_KEY = web.AppKey("http_metrics", HttpMetrics)


def route_template(request: web.Request) -> str:
    """The matched route's template (``/api/v1/pools/{id}``), or ``unmatched``."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


#: The status counted for a request whose client closed the connection before the answer.
CLIENT_CLOSED_REQUEST = 499


@web.middleware
async def request_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Give the request an id, then log one line and record metrics when it is answered.

    The status logged and counted is the one sent: a response's, or an HTTP exception's (a
    redirect raised as ``web.HTTPTemporaryRedirect``); 499 when the client left and its
    handler was cancelled; 500 only when nothing answered.
    """
    supplied = request.headers.get("X-Request-Id", "")
    # 128 random bits in hex, as a UUID4's were: building the UUID object around them was 2 %
    # of a cold GET /me (py-spy, issue 39).
    request_id = supplied if _REQUEST_ID.match(supplied) else os.urandom(16).hex()
    request[REQUEST_ID_KEY] = request_id
    started = time.perf_counter()
    status = 500
    try:
        response: web.StreamResponse = await handler(request)
        status = response.status
        if not response.prepared:
            response.headers["X-Request-Id"] = request_id
            add_rate_limit_headers(request, response)
        return response
    except web.HTTPException as answer:
        # What the problem middleware lets through (a redirect, below 400) is an answer that
        # aiohttp sends, not a failure: it is logged and counted with its own status.
        status = answer.status
        answer.headers["X-Request-Id"] = request_id
        raise
    except asyncio.CancelledError:
        # aiohttp cancels the handler of a connection the client closed (handler
        # cancellation): the client left, nothing failed (499, as proxies count it).
        if request.transport is None or request.transport.is_closing():
            status = CLIENT_CLOSED_REQUEST
            log.info("the client left %s %s before its response was sent", request.method,
                     route_template(request))  # fmt: skip
        raise
    finally:
        elapsed = time.perf_counter() - started
        route = route_template(request)
        request.app[METRICS_KEY].observe(route, request.method, status, elapsed)
        if log.isEnabledFor(logging.INFO):
            log.info(
                "%s %s %s %.1fms",
                request.method,
                route,
                status,
                elapsed * 1000,
                extra={
                    "request_id": request_id,
                    "method": request.method,
                    "route": route,
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 2),
                },
            )


def response_schemas(operation: Operation) -> dict[int, Schema]:
    """One schema instance per documented response, made once (instances are reusable)."""
    schemas = {}
    for status, spec in operation.responses.items():
        if spec.schema is not None:
            schemas[status] = spec.schema() if isinstance(spec.schema, type) else spec.schema
    return schemas


async def run_handler(operation: Operation, call: Call) -> Any:
    """Run ``operation``'s handler, again when what failed it says it may be run again.

    - A read that met a dead connection (cut, or the server restarted) is served once more on
      another; a change is not: it may have been committed.
    - A transaction PostgreSQL ended to break a deadlock or a serialization failure was rolled
      back whole (services change in one transaction): the operation is run again, after a
      short random pause, up to :data:`CONTENTION_ATTEMPTS` times in all; then the error goes
      to the problem middleware (503 with ``Retry-After``).

    Nothing is run again once the response has started (a stream).
    """
    request = call.request
    outage_retried = False
    attempt = 1
    while True:
        try:
            return await operation.handler(call)
        except Exception as error:
            if request.writer is not None and request.writer.output_size > 0:
                raise
            if contended(error) and attempt < CONTENTION_ATTEMPTS:
                attempt += 1
                await asyncio.sleep(contention_pause(attempt))
                continue
            if (
                request.method in _RETRIED_METHODS
                and not outage_retried
                and outage_of(error) == DATABASE
            ):
                outage_retried = True
                continue
            raise


def operation_handler(operation: Operation) -> Handler:
    """Wrap ``operation``'s handler with the limits, authentication and validation it declares."""
    # Schemas are built once per operation: building one costs more than serving a request.
    dumpers = response_schemas(operation)
    query_schema = operation.query(unknown=EXCLUDE) if operation.query is not None else None
    body_schema = operation.body(unknown=RAISE) if operation.body is not None else None

    async def handle(request: web.Request) -> web.StreamResponse:
        app = request.app
        runtime = app[RUNTIME_KEY]
        limiter = app[RATE_LIMITER_KEY]
        parser = app[PARSER_KEY]
        if operation.body is not None:
            check_body_size(request, runtime.config["API_MAX_BODY_SIZE"])
        principal = None
        if operation.public:
            await limiter.check(request, None)
        else:
            principal = await authenticate(
                request, runtime, operation, throttle=lambda: limiter.check(request, None)
            )
            await limiter.check(request, principal)
        call = Call(request=request, operation=operation, runtime=runtime, principal=principal)
        if query_schema is not None:
            call.query = await parse_query(request, query_schema, parser)
        seal = None
        if operation.paginated:
            call.query["limit"] = app[PAGE_LIMITS_KEY].resolve(call.query.get("limit"))
            # One cursor codec: a list opens only the cursors it sealed (else 400).
            seal = await app[CURSOR_SEALS_KEY].get(runtime.db)
            binding = cursor_binding(operation.operation_id, request.match_info)
            cursor = call.query.get("cursor")
            call.query["cursor"] = seal.open(binding, cursor) if cursor else None
        if body_schema is not None and (request.body_exists or not operation.body_optional):
            call.body = await parse_body(request, body_schema, parser)
        key = key_of(call)

        async def respond() -> tuple[web.StreamResponse, Any]:
            """The operation's response, and what to publish of it (``UNPUBLISHED``: nothing)."""
            result = await run_handler(operation, call)
            if seal is not None:
                result = seal_next(result, seal, binding)
            if isinstance(result, web.StreamResponse):
                return result, UNPUBLISHED
            reply = result if isinstance(result, Reply) else Reply(result, operation.success_status)
            changed = request.method != "GET" and reply.status < 400
            if reply.status == 204:
                return web.Response(status=204, headers=reply.headers), (
                    None if changed else UNPUBLISHED
                )
            dumper = dumpers.get(reply.status)
            data = (
                dumper.dump(reply.data)
                if dumper is not None and reply.data is not None
                else reply.data
            )
            response = web.json_response(data, status=reply.status, headers=reply.headers)
            return response, data if changed else UNPUBLISHED

        if key is None:
            response, published = await respond()
        else:
            response, published = await idempotent(call, key, respond)
        if published is not UNPUBLISHED:
            await events.publish_api_change(call, published)
        return response

    handle.__name__ = operation.operation_id
    return handle


def load_openapi_document(path: str) -> bytes | None:
    """Read the document served at ``/openapi.yaml``; report an unreadable file once, here."""
    try:
        return Path(path).read_bytes()
    except OSError as error:
        startup_log.error(
            "OPENAPI_PATH %s cannot be read (%s); GET /openapi.yaml will answer 503",
            path,
            error.strerror or error,
        )
        return None


def build_route_table(plugins: PluginHost) -> RouteTable:
    """The built-in operations plus every plugin's, through ``deskpool_register_routes``.

    :raises ValueError: an operation breaks a rule of the table (a list that does not page).
    """
    routes = RouteTable()
    openapi.register(routes)
    docs.register(routes)
    resources.register(routes)
    plugins.register_routes(routes)
    for operation in routes.operations():
        check_page_contract(operation)
    return routes


def create_app(runtime: Runtime) -> web.Application:
    """The API application of ``runtime``.

    :raises ConfigError: ``API_CORS_ALLOWED_ORIGINS`` holds something that is not an origin.
    """
    # The identity services end what a change of access took away through revocation.
    access.install(revocation)
    # A desktop handed out through the database leaves the outage snapshot before the commit.
    sessions_service.install_withhold(brokering.withhold)
    config = runtime.config
    cors = CorsPolicy.from_setting(config["API_CORS_ALLOWED_ORIGINS"])
    app = web.Application(
        middlewares=[
            request_middleware,
            cors_middleware(cors),
            problem_middleware,
            input_guard_middleware,
        ],
        client_max_size=config["API_MAX_BODY_SIZE"],
        # Bodies are read as sent and decoded by the API (deskpool.api.validation.decode_body):
        # aiohttp's decoding takes a gzip body without its trailer.
        handler_args={"auto_decompress": False},
    )
    app[RUNTIME_KEY] = runtime
    app[TRUSTED_PROXIES_KEY] = config.typed("API_TRUSTED_PROXIES", TrustedProxies)
    app.on_response_prepare.append(cors_on_prepare(cors))
    app[METRICS_KEY] = HttpMetrics(runtime)
    limiter = RateLimiter(
        runtime.kv, config["KVSTORE_KEY_PREFIX"], config["API_RATE_LIMIT_PER_MINUTE"]
    )
    app[RATE_LIMITER_KEY] = limiter

    async def close_limiter(app: web.Application) -> None:
        await limiter.close()

    app.on_cleanup.append(close_limiter)

    async def seal_secret_options(app: web.Application) -> None:
        # Secret option values stored in plain text before the driver contract 0.4.
        try:
            sealed = await clusters_service.seal_plain_secret_options(runtime)
        except Exception as error:  # the API serves all the same; the next start tries again
            startup_log.warning(
                "could not seal secret cluster options stored in plain text: %s",
                type(error).__name__,
            )
            return
        if sealed:
            startup_log.info("sealed the secret options of %d cluster(s)", sealed)

    app.on_startup.append(seal_secret_options)
    hub = LiveHub(runtime.kv, config["KVSTORE_KEY_PREFIX"])
    app[events.HUB_KEY] = hub

    async def close_hub(app: web.Application) -> None:
        await hub.close()  # ends the open event streams before the graceful shutdown waits

    app.on_shutdown.append(close_hub)
    app[events.STREAM_SLOTS_KEY] = SharedStreamSlots(
        runtime.kv, config["KVSTORE_KEY_PREFIX"], int(config["API_EVENT_STREAMS_PER_USER"])
    )
    app[PAGE_LIMITS_KEY] = PageLimits.from_config(config)
    app[CURSOR_SEALS_KEY] = CursorSeals()
    app[PARSER_KEY] = DeskpoolParser(
        body_timeout=config.duration("API_BODY_TIMEOUT"),
        max_body_size=config["API_MAX_BODY_SIZE"],
    )
    install_authentication(app, runtime)
    routes = build_route_table(runtime.plugins)
    app[ROUTES_KEY] = routes
    document = load_openapi_document(config["OPENAPI_PATH"])
    if document is not None:
        app[OPENAPI_DOCUMENT_KEY] = document
    docs.install_docs(app, app[AUTHENTICATOR_KEY].provider)
    routes.register(app, operation_handler)
    return app
