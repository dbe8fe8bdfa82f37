"""CORS from API_CORS_ALLOWED_ORIGINS: exact origins, preflights, no credentials with ``*``."""

from __future__ import annotations

from typing import Any

import pytest
from tests.integration.api.extra_operations import PROBLEM, ApiClientFactory

from deskpool.api.cors import CorsPolicy
from deskpool.errors import ConfigError

CONSOLE = "https://console.example.test"
PREFLIGHT = {
    "Origin": CONSOLE,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type",
}


async def test_a_preflight_from_an_allowed_origin_is_answered(
    make_api_client: ApiClientFactory,
) -> None:
    client = await make_api_client(API_CORS_ALLOWED_ORIGINS=f"{CONSOLE},http://localhost:5173")
    response = await client.options("/test/desktops", headers=PREFLIGHT)
    assert response.status == 204
    assert response.headers["Access-Control-Allow-Origin"] == CONSOLE
    assert response.headers["Access-Control-Allow-Credentials"] == "true"
    assert "POST" in response.headers["Access-Control-Allow-Methods"]
    allowed = response.headers["Access-Control-Allow-Headers"].lower()
    assert "authorization" in allowed
    assert "content-type" in allowed
    assert int(response.headers["Access-Control-Max-Age"]) > 0
    assert "Origin" in response.headers["Vary"]


async def test_a_preflight_from_another_origin_is_a_403_problem(
    make_api_client: ApiClientFactory,
) -> None:
    client = await make_api_client(API_CORS_ALLOWED_ORIGINS=CONSOLE)
    response = await client.options(
        "/test/desktops", headers={**PREFLIGHT, "Origin": "https://evil.example.test"}
    )
    assert response.status == 403
    assert response.content_type == PROBLEM
    assert "Access-Control-Allow-Origin" not in response.headers


async def test_responses_to_an_allowed_origin_carry_cors_headers(
    make_api_client: ApiClientFactory,
) -> None:
    client = await make_api_client(API_CORS_ALLOWED_ORIGINS=CONSOLE)
    response = await client.post(
        "/test/desktops", json={"name": "kiosk"}, headers={"Origin": CONSOLE}
    )
    assert response.status == 201
    assert response.headers["Access-Control-Allow-Origin"] == CONSOLE
    exposed = response.headers["Access-Control-Expose-Headers"]
    assert "X-Request-Id" in exposed
    assert "Retry-After" in exposed
    assert "RateLimit-Remaining" in exposed


async def test_problem_responses_carry_cors_headers_too(make_api_client: ApiClientFactory) -> None:
    client = await make_api_client(API_CORS_ALLOWED_ORIGINS=CONSOLE)
    response = await client.get("/api/v1/pools", headers={"Origin": CONSOLE})
    assert response.status == 503
    assert response.headers["Access-Control-Allow-Origin"] == CONSOLE


async def test_other_origins_get_no_cors_headers(make_api_client: ApiClientFactory) -> None:
    client = await make_api_client(API_CORS_ALLOWED_ORIGINS=CONSOLE)
    response = await client.get("/test/numbers", headers={"Origin": "https://evil.example.test"})
    assert response.status == 200
    assert "Access-Control-Allow-Origin" not in response.headers
    assert "Origin" in response.headers["Vary"]


async def test_a_wildcard_allows_every_origin_without_credentials(
    make_api_client: ApiClientFactory,
) -> None:
    client = await make_api_client(API_CORS_ALLOWED_ORIGINS="*")
    preflight = await client.options(
        "/test/desktops", headers={**PREFLIGHT, "Origin": "https://any.example.test"}
    )
    assert preflight.status == 204
    assert preflight.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in preflight.headers
    response = await client.get("/test/numbers", headers={"Origin": "https://any.example.test"})
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in response.headers


async def test_without_origins_preflights_are_not_answered(
    make_api_client: ApiClientFactory,
) -> None:
    client = await make_api_client()
    response = await client.options("/test/desktops", headers=PREFLIGHT)
    assert response.status == 405
    assert response.content_type == PROBLEM
    assert "Access-Control-Allow-Origin" not in response.headers


def test_origins_are_matched_exactly_after_normalizing_default_ports() -> None:
    policy = CorsPolicy.from_setting(["https://Console.Example.test:443", "http://127.0.0.1:5173"])
    assert policy.allows("https://console.example.test")
    assert policy.allows("http://127.0.0.1:5173")
    assert not policy.allows("http://127.0.0.1:5174")
    assert not policy.allows("https://console.example.test.evil.test")
    assert not policy.allows("null")


@pytest.mark.parametrize(
    "setting",
    [["console.example.test"], ["https://console.example.test/app"], ["*", CONSOLE]],
)
def test_a_setting_that_is_not_a_list_of_origins_is_refused_by_name(setting: list[str]) -> None:
    with pytest.raises(ConfigError, match="API_CORS_ALLOWED_ORIGINS"):
        CorsPolicy.from_setting(setting)


async def test_the_api_refuses_to_start_with_a_bad_origin(make_config: Any) -> None:
    from deskpool.api.app import create_app
    from deskpool.runtime import Runtime

    process = make_config(API_CORS_ALLOWED_ORIGINS="console.example.test")
    with pytest.raises(ConfigError, match="API_CORS_ALLOWED_ORIGINS"):
        create_app(Runtime(process.config, process.plugins))
