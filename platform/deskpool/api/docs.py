"""``/docs``: interactive API documentation served by the API itself, with no request leaving it.

The page is Swagger UI (5 or newer, which renders OpenAPI 3.1), whose assets come from the
``swagger_ui_bundle`` package and are served under ``/docs/`` by this process: no CDN, so the
page works on a machine with no internet. It reads the same ``/openapi.yaml`` the instance
serves, so it shows the contract of the running version.

Sign-in ("Authorize", then "Try it out") is whatever the auth provider offers a browser
(:meth:`deskpool.auth.AuthProvider.browser_sign_in`): the authorization code flow with PKCE as a
public client, through the discovery document, client and scopes the provider names (the
``oidc`` provider: ``AUTH_OIDC_ISSUER_URL``'s discovery, ``WEB_PUBLIC_OIDC_CLIENT_ID`` and
``WEB_PUBLIC_OIDC_SCOPE``). The identity provider must allow
``<API origin>/docs/oauth2-redirect.html`` as a redirect URI of that client. A provider that
offers no browser flow gets a page without sign-in.

The document's ``openIdConnect`` scheme names ``/docs/openid-configuration``, which this module
answers with a redirect to that discovery document, so any tool that resolves the URL finds the
instance's issuer; the page itself asks the issuer directly.
"""

from __future__ import annotations

import importlib.resources
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from deskpool.api.context import Call
from deskpool.api.problems import PROBLEM_CONTENT_TYPE, ProblemSchema
from deskpool.api.routes import Handler, ResponseSpec, RouteTable
from deskpool.auth import AuthProvider, BrowserSignIn
from deskpool.errors import AuthNotConfigured, NotFound, ServiceUnavailable

log = logging.getLogger(__name__)

#: Where the document's ``openIdConnect`` scheme points (answered by :func:`serve_discovery`).
DISCOVERY_PATH = "/docs/openid-configuration"
#: The package that ships Swagger UI's built assets.
ASSET_PACKAGE = "swagger_ui_bundle"
#: The oldest Swagger UI major version that renders OpenAPI 3.1.
MINIMUM_MAJOR = 5

_VERSION_DIR = re.compile(r"^swagger-ui-(\d+)\.(\d+)\.(\d+)$")
_SWAGGER_ASSETS = (
    "swagger-ui.css",
    "swagger-ui-bundle.js",
    "oauth2-redirect.html",
    "oauth2-redirect.js",
    "favicon-16x16.png",
    "favicon-32x32.png",
)
_OWN_ASSETS = ("deskpool-docs.js", "deskpool-docs.css")
_STATIC = Path(__file__).parent / "static"

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>deskpool API</title>
<link rel="stylesheet" href="docs/swagger-ui.css">
<link rel="stylesheet" href="docs/deskpool-docs.css">
<link rel="icon" type="image/png" href="docs/favicon-32x32.png" sizes="32x32">
</head>
<body>
<noscript>This page needs JavaScript; the document itself is at
<a href="openapi.yaml">openapi.yaml</a>.</noscript>
<div id="swagger-ui"></div>
<script id="deskpool-docs-config" type="application/json">__CONFIG__</script>
<script src="docs/swagger-ui-bundle.js"></script>
<script src="docs/deskpool-docs.js"></script>
</body>
</html>
"""


@dataclass(frozen=True)
class SwaggerUiAssets:
    """The installed Swagger UI build: its folder and version."""

    folder: Path
    version: tuple[int, int, int]

    @property
    def version_text(self) -> str:
        """``5.31.0``."""
        return ".".join(str(part) for part in self.version)


def find_swagger_ui() -> SwaggerUiAssets | None:
    """The newest Swagger UI build that ``swagger_ui_bundle`` ships, if the package is there."""
    try:
        vendor = Path(str(importlib.resources.files(ASSET_PACKAGE))) / "vendor"
    except ModuleNotFoundError:
        return None
    builds = []
    for folder in vendor.iterdir() if vendor.is_dir() else ():
        match = _VERSION_DIR.match(folder.name)
        if match and (folder / "swagger-ui-bundle.js").is_file():
            major, minor, patch = (int(part) for part in match.groups())
            builds.append(SwaggerUiAssets(folder, (major, minor, patch)))
    return max(builds, key=lambda build: build.version, default=None)


@dataclass(frozen=True)
class DocsSettings:
    """How the page signs in: the auth provider's browser flow, or none."""

    sign_in: BrowserSignIn | None = None

    @property
    def discovery_url(self) -> str:
        """The sign-in discovery document (empty when the page offers no sign-in)."""
        return self.sign_in.discovery_url if self.sign_in is not None else ""

    def page_config(self) -> dict[str, Any]:
        """The configuration the page's script reads."""
        oidc = None
        if self.sign_in is not None:
            oidc = {
                "clientId": self.sign_in.client_id,
                "scopes": self.sign_in.scopes,
                "discoveryUrl": self.sign_in.discovery_url,
                "documentedDiscoveryPath": DISCOVERY_PATH,
            }
        return {
            "documentUrl": "openapi.yaml",
            "redirectPath": "docs/oauth2-redirect.html",
            "oidc": oidc,
        }

    def content_security_policy(self) -> str:
        """Scripts and styles from this origin only; network calls to this origin and sign-in's."""
        origins = "".join(f" {origin}" for origin in self.sign_in.origins) if self.sign_in else ""
        return (
            "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
            f"img-src 'self' data:; font-src 'self' data:; connect-src 'self' https:{origins}; "
            f"form-action 'self'{origins}; base-uri 'none'; frame-ancestors 'none'"
        )


class DocsSite:
    """Serves the page, its assets and the discovery redirect.

    :param settings: how the page signs in.
    :param assets: the Swagger UI build, or ``None`` when the package is missing.
    """

    def __init__(self, settings: DocsSettings, assets: SwaggerUiAssets | None) -> None:
        self.settings = settings
        self.assets = assets
        config = json.dumps(settings.page_config(), separators=(",", ":"))
        # Inside <script>, "</" would end the element: keep the JSON inert.
        self._page = _PAGE.replace("__CONFIG__", config.replace("<", "\\u003c"))

    @classmethod
    def for_provider(cls, provider: AuthProvider) -> DocsSite:
        """The site signing in through ``provider``; a missing or old Swagger UI is logged here."""
        assets = find_swagger_ui()
        if assets is None:
            log.error(
                "GET /docs will answer 503: the %s package (Swagger UI assets) is not installed",
                ASSET_PACKAGE,
            )
        elif assets.version[0] < MINIMUM_MAJOR:
            log.error(
                "GET /docs cannot render the OpenAPI 3.1 document: the installed Swagger UI is "
                "%s and %s or newer is needed (install swagger-ui-bundle-v2)",
                assets.version_text,
                MINIMUM_MAJOR,
            )
        return cls(DocsSettings(provider.browser_sign_in()), assets)

    def page(self) -> web.Response:
        """The documentation page."""
        if self.assets is None:
            raise ServiceUnavailable(
                f"The interactive documentation needs the {ASSET_PACKAGE} package; the document "
                "itself is at /openapi.yaml."
            )
        return web.Response(
            text=self._page,
            content_type="text/html",
            headers={
                "Content-Security-Policy": self.settings.content_security_policy(),
                "Cache-Control": "no-cache",
                "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer",
            },
        )

    async def asset(self, request: web.Request) -> web.StreamResponse:
        """``GET /docs/{asset}``: a Swagger UI file or one of ours, from this machine."""
        name = request.match_info["asset"]
        if name in _OWN_ASSETS:
            path = _STATIC / name
        elif name in _SWAGGER_ASSETS and self.assets is not None:
            path = self.assets.folder / name
        else:
            raise NotFound(f"/docs has no asset named {name}.")
        if not path.is_file():
            raise NotFound(f"/docs has no asset named {name}.")
        return web.FileResponse(
            path,
            headers={"Cache-Control": "public, max-age=3600", "X-Content-Type-Options": "nosniff"},
        )

    async def discovery(self, request: web.Request) -> web.StreamResponse:
        """``GET /docs/openid-configuration``: redirect to the issuer's discovery document."""
        if not self.settings.discovery_url:
            raise AuthNotConfigured(
                "The auth provider offers no browser sign-in (for OIDC: AUTH_OIDC_ISSUER_URL is "
                "not set), so there is no discovery document to point to."
            )
        raise web.HTTPTemporaryRedirect(self.settings.discovery_url)


#: The documentation site of the application.
DOCS_SITE_KEY = web.AppKey("docs_site", DocsSite)


async def get_docs(call: Call) -> web.Response:
    """``GET /docs``: the documentation page."""
    return call.request.app[DOCS_SITE_KEY].page()


def declare_documentation(
    routes: RouteTable,
    path: str,
    handler: Handler,
    *,
    summary: str,
    description: str,
    content: ResponseSpec,
    unavailable: str,
) -> None:
    """Declare a public ``GET`` of the documentation: ``content``, or 503 ``unavailable``."""
    routes.route(
        "GET",
        path,
        summary=summary,
        description=description,
        tags=("documentation",),
        permission=None,
        responses={
            200: content,
            503: ResponseSpec(unavailable, ProblemSchema, content_type=PROBLEM_CONTENT_TYPE),
        },
    )(handler)


def register(routes: RouteTable) -> None:
    """Declare ``GET /docs`` in the route table (a public operation of the document)."""
    declare_documentation(
        routes,
        "/docs",
        get_docs,
        summary="Interactive API documentation",
        description=(
            "Swagger UI for this instance's OpenAPI document, with sign-in through the "
            "configured OIDC issuer (authorization code with PKCE) to try requests. Its assets "
            "are served by the instance under `/docs/`, so the page needs no internet access."
        ),
        content=ResponseSpec("The documentation page.", content_type="text/html"),
        unavailable="The Swagger UI assets are not installed.",
    )


def install_docs(app: web.Application, provider: AuthProvider) -> None:
    """Give ``app`` its documentation site and the routes that are not operations.

    Those are the discovery redirect and the page's assets; ``GET /docs`` itself is in the
    route table (:func:`register`).

    :param provider: the auth provider whose browser sign-in the page offers.
    """
    site = DocsSite.for_provider(provider)
    app[DOCS_SITE_KEY] = site
    app.router.add_get(DISCOVERY_PATH, site.discovery, allow_head=False)
    app.router.add_get("/docs/{asset}", site.asset, allow_head=False)
