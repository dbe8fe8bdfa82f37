"""The API skeleton against the real stores: protection, the document, problem+json."""

from __future__ import annotations

from typing import Any

PROBLEM = "application/problem+json"


async def test_protected_routes_answer_503_problem_while_oidc_is_unset(api_client: Any) -> None:
    response = await api_client.get("/api/v1/pools")
    assert response.status == 503
    assert response.content_type == PROBLEM
    body = await response.json()
    assert body["code"] == "auth_not_configured"
    assert body["status"] == 503
    assert body["instance"] == "/api/v1/pools"
    assert "AUTH_OIDC_ISSUER_URL" in body["detail"]
    assert response.headers["X-Request-Id"] == body["request_id"]


async def test_openapi_document_is_served_as_yaml(api_client: Any) -> None:
    response = await api_client.get("/openapi.yaml")
    assert response.status == 200
    assert response.content_type == "application/yaml"
    assert (await response.text()).startswith("openapi: 3.1.0")


async def test_unknown_route_and_wrong_method_are_problems(api_client: Any) -> None:
    missing = await api_client.get("/api/v1/nothing-here")
    assert missing.status == 404
    assert missing.content_type == PROBLEM
    assert (await missing.json())["code"] == "not_found"
    wrong = await api_client.delete("/openapi.yaml")
    assert wrong.status == 405
    assert wrong.content_type == PROBLEM
    assert "GET" in wrong.headers["Allow"]


async def test_requests_are_counted_by_route_template(api_client: Any, runtime: Any) -> None:
    await api_client.get("/api/v1/pools")
    value = runtime.metrics.get_sample_value(
        "deskpool_http_requests_total",
        {"route": "/api/v1/pools", "method": "GET", "status": "503"},
    )
    assert value == 1.0
