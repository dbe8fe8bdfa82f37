"""The ``api`` component: serves the REST API on ``API_ADDR``.

Registered through the ``deskpool.components`` entry point like every other component. On stop,
in-flight requests get ``API_SHUTDOWN_TIMEOUT`` to finish before connections are closed.
"""

from __future__ import annotations

from aiohttp import web

from deskpool.api.app import create_app
from deskpool.config import HostPort, Setting, SettingRegistry, parse_duration
from deskpool.listener import HttpListenerComponent
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

    def create_app(self) -> web.Application:
        """The REST API application."""
        return create_app(self.runtime)


@hookimpl
def deskpool_register_components(registry: Registry[ComponentFactory]) -> None:
    """Register the ``api`` component."""
    registry.add("api", ApiComponent)


@hookimpl
def deskpool_declare_settings(registry: SettingRegistry) -> None:
    """Declare ``SESSION_TOKEN_TTL``, the lifetime of the connection tokens the API issues."""
    registry.add(
        Setting(
            "SESSION_TOKEN_TTL",
            parse_duration,
            "60s",
            "How long a desktop connection token may wait to be redeemed at the gateway "
            "(single-use; a browser redeems it within seconds).",
            section="Gateway and desktop daemon",
            type_name="duration",
            owner="api",
        )
    )
