"""The ``gateway`` component: the tunnel between browsers and the remote desktop daemon.

It listens on ``GATEWAY_ADDR``. It refuses to start without ``SECRETS_MASTER_KEY`` (SPEC.md §7):
connection tokens are sealed with it. The tunnel itself (WebSocket to guacd) is built on this
listener.
"""

from __future__ import annotations

from aiohttp import web

from deskpool.config import HostPort
from deskpool.errors import StartupError
from deskpool.listener import HttpListenerComponent
from deskpool.plugins import hookimpl
from deskpool.registry import Registry
from deskpool.runtime import ComponentFactory, Runtime


class GatewayComponent(HttpListenerComponent):
    """The tunnel gateway listener."""

    name = "gateway"

    def __init__(self, runtime: Runtime) -> None:
        if not runtime.config["SECRETS_MASTER_KEY"]:
            raise StartupError(
                "the gateway refuses to start without SECRETS_MASTER_KEY (connection tokens are "
                "sealed with it); generate one with `deskpool secrets generate-key`"
            )
        super().__init__(runtime)

    @property
    def address(self) -> HostPort:
        """``GATEWAY_ADDR``."""
        return self.runtime.config.typed("GATEWAY_ADDR", HostPort)

    def create_app(self) -> web.Application:
        """The gateway application."""
        app = web.Application()

        async def status(request: web.Request) -> web.Response:
            return web.json_response({"component": "gateway", "status": "ok"})

        app.router.add_get("/gateway/status", status)
        return app


@hookimpl
def deskpool_register_components(registry: Registry[ComponentFactory]) -> None:
    """Register the ``gateway`` component."""
    registry.add("gateway", GatewayComponent)
