"""The ``web`` component: serves the browser console and its public configuration.

The console is one client of the REST API and has no private interface: this component serves
only static files (``WEB_DIST_PATH``, the build of ``web/``) and ``/config.json``, the
``WEB_PUBLIC_*`` settings the browser needs to sign in and find the API.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from deskpool.config import HostPort, Setting, SettingRegistry, parse_host_port
from deskpool.listener import HttpListenerComponent
from deskpool.plugins import hookimpl
from deskpool.registry import Registry
from deskpool.runtime import ComponentFactory

_PLACEHOLDER = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>deskpool</title></head>
<body><h1>deskpool</h1><p>The console build was not found at WEB_DIST_PATH.
The REST API and its documentation are served by the api component at /docs.</p></body></html>
"""


class WebComponent(HttpListenerComponent):
    """The console's static file server."""

    name = "web"

    @property
    def address(self) -> HostPort:
        """``WEB_ADDR``."""
        return self.runtime.config.typed("WEB_ADDR", HostPort)

    def public_config(self) -> dict[str, str]:
        """The ``WEB_PUBLIC_*`` settings, as the browser reads them from ``/config.json``."""
        config = self.runtime.config
        return {
            "apiBaseUrl": config["WEB_PUBLIC_API_BASE_URL"],
            "oidcAuthority": config["WEB_PUBLIC_OIDC_AUTHORITY"],
            "oidcClientId": config["WEB_PUBLIC_OIDC_CLIENT_ID"],
            "oidcScope": config["WEB_PUBLIC_OIDC_SCOPE"],
            "oidcLogoutUrl": config["WEB_PUBLIC_OIDC_LOGOUT_URL"],
        }

    def create_app(self) -> web.Application:
        """Static files, ``/config.json``, and the index for every other path (SPA routing)."""
        app = web.Application()
        dist = Path(self.runtime.config["WEB_DIST_PATH"])
        index = dist / "index.html"

        async def config_json(request: web.Request) -> web.Response:
            return web.json_response(self.public_config())

        async def spa(request: web.Request) -> web.StreamResponse:
            if index.is_file():
                return web.FileResponse(index)
            return web.Response(text=_PLACEHOLDER, content_type="text/html")

        app.router.add_get("/config.json", config_json)
        if (dist / "assets").is_dir():
            app.router.add_static("/assets", dist / "assets")
        app.router.add_get("/{tail:.*}", spa)
        return app


@hookimpl
def deskpool_declare_settings(registry: SettingRegistry) -> None:
    """Declare the web component's own settings."""
    section = "Web console (browser side)"
    registry.add(
        Setting(
            "WEB_ADDR",
            parse_host_port,
            "127.0.0.1:8082",
            "Listen address of the web console component.",
            section=section,
            type_name="host:port",
            owner="web",
        )
    )
    registry.add(
        Setting(
            "WEB_DIST_PATH",
            str,
            "web/dist",
            "Folder of the built console that the web component serves.",
            section=section,
            type_name="path",
            owner="web",
        )
    )


@hookimpl
def deskpool_register_components(registry: Registry[ComponentFactory]) -> None:
    """Register the ``web`` component."""
    registry.add("web", WebComponent)
