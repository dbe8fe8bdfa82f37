"""The ``web`` component: the console's files, ``/config.json`` and the security headers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from deskpool.runtime import Runtime
from deskpool_web import WebComponent, content_security_policy


def _web_app(make_config: Callable[..., Any], dist: Path, **settings: str) -> Any:
    process = make_config(["web"], WEB_DIST_PATH=str(dist), **settings)
    return WebComponent(Runtime(process.config, process.plugins)).create_app()


def _dist(tmp_path: Path) -> Path:
    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text("<!doctype html><title>console</title>")
    (dist / "assets" / "index-abc123.js").write_text("console.log(1)")
    (dist / "favicon.svg").write_text("<svg/>")
    return dist


async def test_serves_the_build_with_a_strict_policy(
    make_config: Callable[..., Any], aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await aiohttp_client(
        _web_app(
            make_config,
            _dist(tmp_path),
            WEB_PUBLIC_API_BASE_URL="https://api.example.org",
            WEB_PUBLIC_OIDC_AUTHORITY="https://id.example.org/realms/x",
            WEB_PUBLIC_OIDC_CLIENT_ID="console",
            GATEWAY_PUBLIC_WS_URL="wss://gw.example.org/tunnel",
        )
    )
    page = await client.get("/pools/123")  # any path is the single-page application
    assert page.status == 200
    assert "console" in await page.text()
    policy = page.headers["Content-Security-Policy"]
    assert "script-src 'self';" in policy
    assert "'unsafe-inline'" not in policy
    assert "frame-ancestors 'none'" in policy
    assert (
        "connect-src 'self' https://api.example.org https://id.example.org wss://gw.example.org"
        in policy
    )
    assert page.headers["X-Content-Type-Options"] == "nosniff"

    asset = await client.get("/assets/index-abc123.js")
    assert asset.status == 200
    assert "immutable" in asset.headers["Cache-Control"]
    assert asset.headers["Content-Security-Policy"] == policy
    assert (await client.get("/assets/missing.js")).status == 404
    assert (await client.get("/assets/..%2Findex.html")).status == 404
    assert (await client.get("/favicon.svg")).status == 200

    config = await client.get("/config.json")
    assert await config.json() == {
        "apiBaseUrl": "https://api.example.org",
        "oidcAuthority": "https://id.example.org/realms/x",
        "oidcClientId": "console",
        "oidcScope": "openid profile email groups",
        "oidcLogoutUrl": "",
    }


async def test_without_a_build_a_placeholder_says_how_to_build(
    make_config: Callable[..., Any], aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await aiohttp_client(_web_app(make_config, tmp_path / "missing"))
    page = await client.get("/")
    assert page.status == 200
    assert "make run" in await page.text()
    assert "Content-Security-Policy" in page.headers


def test_policy_lists_each_origin_once() -> None:
    policy = content_security_policy(
        {
            "WEB_PUBLIC_API_BASE_URL": "http://127.0.0.1:8080/",
            "WEB_PUBLIC_OIDC_AUTHORITY": "http://127.0.0.1:8080/issuer",
            "GATEWAY_PUBLIC_WS_URL": "",
        }
    )
    assert "connect-src 'self' http://127.0.0.1:8080;" in policy
