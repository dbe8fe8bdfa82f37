"""The ``api`` component: serves the REST API on ``API_ADDR``.

Registered through the ``deskpool.components`` entry point like every other component. On stop,
in-flight requests get ``API_SHUTDOWN_TIMEOUT`` to finish before connections are closed.
"""

from __future__ import annotations

from dataclasses import replace

from aiohttp import web

from deskpool.api.app import create_app
from deskpool.api.client_address import TrustedProxies
from deskpool.config import (
    HostPort,
    SettingRegistry,
    parse_duration,
    parse_int,
    parse_listen_address,
)
from deskpool.listener import ConnectionLimits, HttpListenerComponent
from deskpool.plugins import hookimpl
from deskpool.registry import Registry
from deskpool.runtime import ComponentFactory


class ApiComponent(HttpListenerComponent):
    """The REST API listener."""

    name = "api"

    @property
    def address(self) -> HostPort:
        """``API_ADDR``."""
        return self.runtime.config.typed("API_ADDR", HostPort)

    @property
    def shutdown_timeout(self) -> float:
        """``API_SHUTDOWN_TIMEOUT``."""
        return self.runtime.config.duration("API_SHUTDOWN_TIMEOUT")

    @property
    def limits(self) -> ConnectionLimits:
        """The listener's limits, with ``API_MAX_CONNECTIONS_PER_ADDRESS``.

        The cap applies to every client address but the trusted proxies' (``API_TRUSTED_PROXIES``).
        """
        config = self.runtime.config
        proxies = config.typed("API_TRUSTED_PROXIES", TrustedProxies)
        return replace(
            super().limits,
            max_per_address=int(config["API_MAX_CONNECTIONS_PER_ADDRESS"]),
            exempt=proxies.networks,
        )

    def create_app(self) -> web.Application:
        """The REST API application."""
        return create_app(self.runtime)


@hookimpl
def deskpool_register_components(registry: Registry[ComponentFactory]) -> None:
    """Register the ``api`` component."""
    registry.add("api", ApiComponent)


@hookimpl
def deskpool_declare_settings(registry: SettingRegistry) -> None:
    """Declare the API's settings: its listener, its request limits and pages, its document."""
    api = registry.section("General, API and ops", owner="api")
    api.add(
        "API_ADDR",
        parse_listen_address,
        "127.0.0.1:8080",
        "API listen address. Use 0.0.0.0:8080 in a container.",
        type_name="host:port",
    )
    api.add(
        "API_SHUTDOWN_TIMEOUT",
        parse_duration,
        "10s",
        "Graceful shutdown deadline for in-flight HTTP requests.",
        type_name="duration",
    )
    api.add(
        "OPENAPI_PATH",
        str,
        "api/openapi/openapi.yaml",
        "Filesystem path of the document served at `GET /openapi.yaml`.",
        type_name="path",
    )
    api.add(
        "API_MAX_BODY_SIZE",
        parse_int(1024, 64 * 1024 * 1024),
        "1048576",
        "Largest request body accepted, in bytes; larger bodies are answered 413.",
        type_name="integer",
    )
    api.add(
        "API_RATE_LIMIT_PER_MINUTE",
        parse_int(0),
        "600",
        "Requests per minute allowed to one principal (or one client address before "
        "authentication); 0 disables rate limiting.",
        type_name="integer",
    )
    api.add(
        "API_EVENT_STREAMS_PER_USER",
        parse_int(1, 1000),
        "5",
        "Live event streams (`GET /api/v1/events`) one user may hold open at once across every "
        "api process (counted in the key-value store; while it is unavailable, in each process); "
        "one more is answered 429 `too_many_streams` with `Retry-After`.",
        type_name="integer",
    )
    api.add(
        "API_MAX_CONNECTIONS_PER_ADDRESS",
        parse_int(0, 1_000_000),
        "100",
        "Open connections one client address may hold on the api listener; one more is "
        "answered 503 `too_many_connections` with `Retry-After` and closed. The addresses of "
        "`API_TRUSTED_PROXIES` are exempt. 0 turns the cap off.",
        type_name="integer",
    )
    api.add(
        "API_TRUSTED_PROXIES",
        TrustedProxies.parse,
        "",
        "Comma-separated addresses or networks (CIDR) of the proxies in front of the api. Only "
        "a request from one of them has its `X-Forwarded-For` read: its client is the rightmost "
        "address there that is not a trusted proxy. The rate limits and the audit's source "
        "address use that client; empty: every request's client is its peer.",
        type_name="list",
    )
    api.add(
        "API_PAGE_SIZE_DEFAULT",
        parse_int(1, 500),
        "50",
        "Items per page of a list when the client gives no `limit`.",
        type_name="integer",
    )
    api.add(
        "API_PAGE_SIZE_MAX",
        parse_int(1, 500),
        "500",
        "Largest `limit` a list accepts.",
        type_name="integer",
    )
    registry.section("Gateway and desktop daemon", owner="api").add(
        "SESSION_TOKEN_TTL",
        parse_duration,
        "60s",
        "How long a desktop connection token may wait to be redeemed at the gateway "
        "(single-use; a browser redeems it within seconds).",
        type_name="duration",
    )
