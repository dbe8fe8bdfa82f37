"""``/docs``: the page, its locally served assets and the OIDC discovery redirect."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from tests.integration.api.extra_operations import PROBLEM, ApiClientFactory

from deskpool.api.app import RUNTIME_KEY
from deskpool.api.docs import MINIMUM_MAJOR, find_swagger_ui

ISSUER = "http://127.0.0.1:9/realms/deskpool"  # loopback; nothing listens there


def page_config(html: str) -> dict[str, Any]:
    match = re.search(
        r'<script id="deskpool-docs-config" type="application/json">(.*?)</script>', html
    )
    assert match is not None
    config: dict[str, Any] = json.loads(match.group(1))
    return config


def test_the_installed_swagger_ui_renders_openapi_3_1() -> None:
    assets = find_swagger_ui()
    assert assets is not None, "swagger_ui_bundle is not installed"
    assert assets.version[0] >= MINIMUM_MAJOR, (
        f"Swagger UI {assets.version_text} cannot render OpenAPI 3.1: install "
        "swagger-ui-bundle-v2 (Swagger UI 5)"
    )


async def test_the_page_loads_only_local_assets(api_client: Any) -> None:
    response = await api_client.get("/docs")
    assert response.status == 200
    assert response.content_type == "text/html"
    html = await response.text()
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources
    assert all(not source.startswith(("http:", "https:", "//")) for source in sources)
    policy = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    for source in sources:
        if source.startswith("docs/"):
            asset = await api_client.get(f"/{source}")
            assert asset.status == 200, source


async def test_without_oidc_the_page_offers_no_sign_in(api_client: Any) -> None:
    config = page_config(await (await api_client.get("/docs")).text())
    assert config["oidc"] is None
    assert config["documentUrl"] == "openapi.yaml"


async def test_with_oidc_the_page_signs_in_with_pkce_through_the_issuer(
    make_api_client: ApiClientFactory,
) -> None:
    client = await make_api_client(
        AUTH_OIDC_ISSUER_URL=ISSUER,
        AUTH_OIDC_AUDIENCE="deskpool-api",
        WEB_PUBLIC_OIDC_CLIENT_ID="deskpool-console",
    )
    response = await client.get("/docs")
    config = page_config(await response.text())
    assert config["oidc"] == {
        "clientId": "deskpool-console",
        "scopes": "openid profile email groups",
        "discoveryUrl": f"{ISSUER}/.well-known/openid-configuration",
        "documentedDiscoveryPath": "/docs/openid-configuration",
    }
    assert "http://127.0.0.1:9" in response.headers["Content-Security-Policy"]
    redirect = await client.get("/docs/openid-configuration", allow_redirects=False)
    assert redirect.status == 307
    assert redirect.headers["Location"] == f"{ISSUER}/.well-known/openid-configuration"


async def test_the_audience_is_the_client_id_when_the_console_has_none(
    make_api_client: ApiClientFactory,
) -> None:
    client = await make_api_client(AUTH_OIDC_ISSUER_URL=ISSUER, AUTH_OIDC_AUDIENCE="deskpool")
    config = page_config(await (await client.get("/docs")).text())
    assert config["oidc"]["clientId"] == "deskpool"


async def test_the_discovery_redirect_is_503_without_an_issuer(api_client: Any) -> None:
    response = await api_client.get("/docs/openid-configuration", allow_redirects=False)
    assert response.status == 503
    assert response.content_type == PROBLEM


@pytest.mark.parametrize("name", ["index.html", "..%2Fdocs.py", "swagger-ui.js.map", "nothing"])
async def test_only_the_listed_assets_are_served(api_client: Any, name: str) -> None:
    response = await api_client.get(f"/docs/{name}")
    assert response.status == 404
    assert response.content_type == PROBLEM


async def test_the_oauth2_redirect_page_is_served_locally(api_client: Any) -> None:
    response = await api_client.get("/docs/oauth2-redirect.html")
    assert response.status == 200
    assert response.content_type == "text/html"


async def test_the_discovery_redirect_is_logged_and_counted_as_a_307(
    make_api_client: ApiClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """An aiohttp redirect raised as an exception is what it is in the log and metrics, not 500."""
    client = await make_api_client(AUTH_OIDC_ISSUER_URL=ISSUER, AUTH_OIDC_AUDIENCE="deskpool")
    route = "/docs/openid-configuration"
    with caplog.at_level("INFO", logger="deskpool.api.access"):
        redirect = await client.get(route, allow_redirects=False, headers={"X-Request-Id": "r307"})
    assert redirect.status == 307
    assert redirect.headers["X-Request-Id"] == "r307"
    (line,) = [r for r in caplog.records if r.name == "deskpool.api.access"]
    assert (line.route, line.status, line.request_id) == (route, 307, "r307")
    metrics = client.app[RUNTIME_KEY].metrics
    counted = {"route": route, "method": "GET"}
    assert metrics.get_sample_value("deskpool_http_requests_total", {**counted, "status": "307"})
    assert not metrics.get_sample_value(
        "deskpool_http_requests_total", {**counted, "status": "500"}
    )
