"""The ``gateway`` component: the tunnel between browsers and the remote desktop daemon.

It listens on ``GATEWAY_ADDR`` and serves the WebSocket endpoint that guacamole-common-js's
``Guacamole.WebSocketTunnel`` connects to (:mod:`deskpool_gateway.endpoint`) at
``/websocket-tunnel`` and at the path of ``GATEWAY_PUBLIC_WS_URL``. Each tunnel redeems a
connection token through the platform's session broker, shakes hands with the desktop daemon
(guacd) at ``DESKTOPD_ADDRESS`` and relays instructions both ways
(:mod:`deskpool_gateway.relay`); :mod:`deskpool_gateway.supervisor` watches the timeouts, sends
heartbeats and obeys disconnect requests. Recorded tunnels hand their chunks to a recording
writer process the gateway starts beside itself (:mod:`deskpool_gateway.recording_writer`).
Any gateway process accepts any token.

It refuses to start without ``SECRETS_MASTER_KEY`` (SPEC.md §7): connection tokens are sealed
with it. On SIGTERM it stops accepting, gives open tunnels ``GATEWAY_SHUTDOWN_TIMEOUT`` to end,
then closes the rest (``UPSTREAM_UNAVAILABLE``) and records them as ``gateway_shutdown``.
"""

from __future__ import annotations

import gc
import logging
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import replace

from aiohttp import web

from deskpool.config import HostPort, SettingRegistry
from deskpool.errors import StartupError
from deskpool.identity import access
from deskpool.listener import ConnectionLimits, HttpListenerComponent
from deskpool.outage_brokering.broker import broker_factory
from deskpool.plugins import hookimpl
from deskpool.registry import Registry
from deskpool.revocation import service as revocation
from deskpool.revocation.watch import access_watch
from deskpool.runtime import ComponentFactory, Runtime
from deskpool.sessions.broker import PlatformSessionBroker
from deskpool.sessions.tunnel import SessionBroker
from deskpool_gateway.endpoint import SUPERVISOR, tunnel_handler
from deskpool_gateway.metrics import GatewayMetrics
from deskpool_gateway.recording_writer import RecordingWriter
from deskpool_gateway.settings import GatewaySettings, declare_settings
from deskpool_gateway.supervisor import CLOSE_GRACE, TunnelSupervisor

log = logging.getLogger(__name__)

BrokerFactory = Callable[[Runtime], SessionBroker]


def broker_factory_of_platform(runtime: Runtime) -> SessionBroker:
    """The platform's broker over PostgreSQL and Redis (:mod:`deskpool.sessions.broker`).

    It also redeems the tokens issued while the database was away
    (:mod:`deskpool.outage_brokering.broker`).

    Its redemption judges access through revocation, composed here
    (:mod:`deskpool.identity.access`).
    """
    access.install(revocation)
    return broker_factory(runtime)


def new_gateway_id() -> str:
    """``host:pid:random``: unique per process, and says where a tunnel runs."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


class GatewayComponent(HttpListenerComponent):
    """The tunnel gateway listener.

    :param runtime: the process runtime.
    :param broker_factory: makes the session broker (the platform's by default).
    """

    name = "gateway"

    def __init__(self, runtime: Runtime, *, broker_factory: BrokerFactory | None = None) -> None:
        if not runtime.config["SECRETS_MASTER_KEY"]:
            raise StartupError(
                "the gateway refuses to start without SECRETS_MASTER_KEY (connection tokens are "
                "sealed with it); generate one with `deskpool secrets generate-key`"
            )
        super().__init__(runtime)
        self.settings = GatewaySettings.from_config(runtime.config)
        self.metrics = GatewayMetrics(runtime.metrics)
        self.metrics.max_tunnels.set(self.settings.max_tunnels)
        self.gateway_id = new_gateway_id()
        self._broker_factory: BrokerFactory = broker_factory or broker_factory_of_platform
        self.supervisor: TunnelSupervisor | None = None

    @property
    def address(self) -> HostPort:
        """``GATEWAY_ADDR``."""
        return self.runtime.config.typed("GATEWAY_ADDR", HostPort)

    @property
    def shutdown_timeout(self) -> float:
        """The drain deadline, and the time closed tunnels get to finish closing."""
        return self.settings.shutdown_timeout + CLOSE_GRACE

    @property
    def limits(self) -> ConnectionLimits:
        """The listener's connection limits, with room for ``GATEWAY_MAX_TUNNELS`` tunnels.

        A tunnel holds its connection as long as it lasts, so the cap is
        ``API_MAX_CONNECTIONS`` plus ``GATEWAY_MAX_TUNNELS``: the tunnel limit, refused with a
        status the browser shows, is the one a user meets.
        """
        limits = super().limits
        return replace(limits, max_connections=limits.max_connections + self.settings.max_tunnels)

    def create_app(self) -> web.Application:
        """The gateway application: the tunnel endpoint and a status page."""
        assert self.supervisor is not None
        supervisor = self.supervisor
        app = web.Application()
        app[SUPERVISOR] = supervisor

        async def status(request: web.Request) -> web.Response:
            body = {
                "component": "gateway",
                "status": "ok" if supervisor.accepting else "draining",
                "gateway_id": self.gateway_id,
                "open_tunnels": len(supervisor.tunnels),
            }
            return web.json_response(body)

        app.router.add_get("/gateway/status", status)
        for path in self.settings.paths:
            app.router.add_get(path, tunnel_handler)
        return app

    async def start(self) -> None:
        """Make the broker, start watching tunnels, and listen."""
        broker = self._broker_factory(self.runtime)
        self.supervisor = TunnelSupervisor(
            self.settings,
            broker,
            self.metrics,
            self.gateway_id,
            RecordingWriter(self.runtime.config.environment()),
            # The platform's tunnels are judged again by the access watch (users in its database).
            access_watch(self.runtime) if isinstance(broker, PlatformSessionBroker) else None,
        )
        self.supervisor.start()
        await super().start()
        # What startup made lives as long as the process: keep the cyclic garbage collector
        # from walking it again and again (each full walk would stall every tunnel).
        gc.freeze()
        log.info(
            "gateway %s: tunnel at %s, desktop daemon at %s",
            self.gateway_id,
            ", ".join(self.settings.paths),
            self.settings.daemon,
        )

    async def stop(self) -> None:
        """Stop accepting, drain the tunnels within ``GATEWAY_SHUTDOWN_TIMEOUT``, then close."""
        self._started = False
        if self._runner is not None:
            for site in list(self._runner.sites):
                await site.stop()
        if self.supervisor is not None:
            await self.supervisor.drain(self.settings.shutdown_timeout)
            await self.supervisor.stop()
        await super().stop()


@hookimpl
def deskpool_register_components(registry: Registry[ComponentFactory]) -> None:
    """Register the ``gateway`` component."""
    registry.add("gateway", GatewayComponent)


@hookimpl
def deskpool_declare_settings(registry: SettingRegistry) -> None:
    """Declare the gateway's settings (origins, timeouts, limits, lease)."""
    declare_settings(registry)
