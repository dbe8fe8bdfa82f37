"""The ``web`` component: serves the browser console and its public configuration.

The console is one client of the REST API and has no private interface: this component serves
only static files (``WEB_DIST_PATH``, the build of ``web/``) and ``/config.json``, the
``WEB_PUBLIC_*`` settings the browser needs to sign in and find the API.

Every response carries a strict Content-Security-Policy (:func:`content_security_policy`): the
console's own files only (no inline script or style element, no CDN), and network access to
the API, the OIDC issuer and the gateway's tunnel alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler

from deskpool.config import HostPort, SettingRegistry, parse_listen_address, parse_url
from deskpool.listener import HttpListenerComponent
from deskpool.plugins import hookimpl
from deskpool.registry import Registry
from deskpool.runtime import ComponentFactory

_PLACEHOLDER = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>deskpool</title></head>
<body><h1>deskpool</h1><p>The console build was not found at WEB_DIST_PATH (build it with
<code>make run</code>, which runs <code>npm run build</code> in <code>web/</code>).
The REST API and its documentation are served by the api component at /docs.</p></body></html>
"""

#: Files of the build's root folder served as they are (everything else is under /assets).
_ROOT_FILES = ("favicon.svg",)


def _origin(url: str, *, websocket: bool = False) -> str:
    """``scheme://host[:port]`` of ``url`` (empty when it is not an absolute URL)."""
    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.netloc:
        return ""
    scheme = parts.scheme.lower()
    if websocket and scheme in {"http", "https"}:
        scheme = "ws" if scheme == "http" else "wss"
    return f"{scheme}://{parts.netloc.lower()}"


def content_security_policy(config: Mapping[str, Any]) -> str:
    """The console's policy: its own files, and connections to the API, issuer and gateway."""
    connect = ["'self'"]
    for url, websocket in (
        (config.get("WEB_PUBLIC_API_BASE_URL", ""), False),
        (config.get("WEB_PUBLIC_OIDC_AUTHORITY", ""), False),
        (config.get("WEB_PUBLIC_OIDC_LOGOUT_URL", ""), False),
        (config.get("GATEWAY_PUBLIC_WS_URL", ""), True),
    ):
        origin = _origin(str(url or ""), websocket=websocket)
        if origin and origin not in connect:
            connect.append(origin)
    return "; ".join(
        [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data: blob:",
            "font-src 'self'",
            "media-src 'self' blob:",
            f"connect-src {' '.join(connect)}",
            "manifest-src 'self'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
            "object-src 'none'",
        ]
    )


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
        policy = content_security_policy(self.runtime.config)

        @web.middleware
        async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
            try:
                response = await handler(request)
            except web.HTTPException as error:
                error.headers.update(_security_headers(policy))
                raise
            response.headers.update(_security_headers(policy))
            return response

        app = web.Application(middlewares=[security_headers])
        dist = Path(self.runtime.config["WEB_DIST_PATH"])
        index = dist / "index.html"

        async def config_json(request: web.Request) -> web.Response:
            return web.json_response(self.public_config(), headers={"Cache-Control": "no-store"})

        async def spa(request: web.Request) -> web.StreamResponse:
            if index.is_file():
                return web.FileResponse(index, headers={"Cache-Control": "no-cache"})
            return web.Response(text=_PLACEHOLDER, content_type="text/html")

        async def root_file(request: web.Request) -> web.StreamResponse:
            path = dist / request.match_info["name"]
            if not path.is_file():
                raise web.HTTPNotFound()
            return web.FileResponse(path, headers={"Cache-Control": "public, max-age=3600"})

        async def asset(request: web.Request) -> web.StreamResponse:
            # Vite names every asset after its content hash: cache it for good.
            name = request.match_info["name"]
            path = (dist / "assets" / name).resolve()
            if "/" in name or ".." in name or not path.is_file():
                raise web.HTTPNotFound()
            return web.FileResponse(
                path, headers={"Cache-Control": "public, max-age=31536000, immutable"}
            )

        app.router.add_get("/config.json", config_json)
        app.router.add_get("/assets/{name}", asset)
        for name in _ROOT_FILES:
            app.router.add_get(f"/{{name:{name.replace('.', '[.]')}}}", root_file)
        app.router.add_get("/{tail:.*}", spa)
        return app


def _security_headers(policy: str) -> dict[str, str]:
    return {
        "Content-Security-Policy": policy,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
        "Cross-Origin-Opener-Policy": "same-origin",
    }


@hookimpl
def deskpool_declare_settings(registry: SettingRegistry) -> None:
    """Declare the web component's own settings.

    ``WEB_PUBLIC_API_BASE_URL``, ``WEB_PUBLIC_OIDC_CLIENT_ID`` and ``WEB_PUBLIC_OIDC_SCOPE`` are
    the platform's (:mod:`deskpool.area_settings`): the gateway and the auth provider read them too.
    """
    web = registry.section("Web console (browser side)", owner="web")
    web.add(
        "WEB_PUBLIC_OIDC_AUTHORITY",
        parse_url("http", "https"),
        "",
        "Issuer/authority URL used by the browser; must equal `AUTH_OIDC_ISSUER_URL`.",
        type_name="url",
        required="Yes",
    )
    web.add(
        "WEB_PUBLIC_OIDC_LOGOUT_URL",
        parse_url("http", "https"),
        "",
        "Explicit end-session URL; when empty, the provider's `end_session_endpoint` is used.",
        type_name="url",
    )
    web.add(
        "WEB_ADDR",
        parse_listen_address,
        "127.0.0.1:8082",
        "Listen address of the web console component.",
        type_name="host:port",
    )
    web.add(
        "WEB_DIST_PATH",
        str,
        "web/dist",
        "Folder of the built console that the web component serves.",
        type_name="path",
    )


@hookimpl
def deskpool_register_components(registry: Registry[ComponentFactory]) -> None:
    """Register the ``web`` component."""
    registry.add("web", WebComponent)
