"""Every error is application/problem+json, with the status the document gives it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.integration.api.extra_operations import PROBLEM, ApiClientFactory

PROBLEM_MEMBERS = {"type", "title", "status", "detail", "instance", "code", "request_id"}


async def problem(response: Any, status: int, code: str) -> dict[str, Any]:
    """Check ``response`` is a problem with ``status`` and ``code``; return its body."""
    text = await response.text()
    assert response.status == status, text
    assert response.content_type == PROBLEM
    body: dict[str, Any] = json.loads(text)
    assert set(body) >= PROBLEM_MEMBERS
    assert body["status"] == status
    assert body["code"] == code
    assert body["type"].endswith(f"/{code}")
    assert body["instance"] == response.url.path
    assert body["request_id"] == response.headers["X-Request-Id"]
    assert "Traceback" not in text
    return body


@pytest.fixture
async def client(make_api_client: ApiClientFactory) -> Any:
    return await make_api_client(API_MAX_BODY_SIZE="2048")


async def test_a_valid_body_is_read_with_its_defaults(client: Any) -> None:
    response = await client.post("/test/desktops", json={"name": "kiosk"})
    assert response.status == 201
    assert await response.json() == {"name": "kiosk", "cpus": 2, "disks": []}


async def test_malformed_json_is_400(client: Any) -> None:
    response = await client.post(
        "/test/desktops", data=b'{"name": "kiosk",', headers={"Content-Type": "application/json"}
    )
    body = await problem(response, 400, "bad_request")
    assert "not valid JSON" in body["detail"]


async def test_a_body_that_is_not_utf8_is_400(client: Any) -> None:
    response = await client.post(
        "/test/desktops", data=b'{"name": "\xff"}', headers={"Content-Type": "application/json"}
    )
    await problem(response, 400, "bad_request")


async def test_json_nested_too_deeply_is_400_not_500(client: Any) -> None:
    response = await client.post(
        "/test/desktops",
        data=b"[" * 1020 + b"]" * 1020,
        headers={"Content-Type": "application/json"},
    )
    await problem(response, 400, "json_too_deep")


async def test_a_body_over_the_declared_limit_is_413_before_it_is_read(client: Any) -> None:
    response = await client.post("/test/desktops", json={"name": "x" * 4096})
    body = await problem(response, 413, "payload_too_large")
    assert body["max_size"] == 2048
    assert "API_MAX_BODY_SIZE" in body["detail"]


async def test_a_chunked_body_over_the_limit_is_413_as_it_is_read(client: Any) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"name": "'
        for _ in range(8):
            yield b"x" * 512
        yield b'"}'

    response = await client.post(
        "/test/desktops", data=chunks(), headers={"Content-Type": "application/json"}
    )
    assert "Content-Length" not in response.request_info.headers
    await problem(response, 413, "payload_too_large")


async def test_an_unknown_field_is_422_with_its_pointer(client: Any) -> None:
    response = await client.post("/test/desktops", json={"name": "kiosk", "colour": "red"})
    body = await problem(response, 422, "validation_failed")
    assert body["errors"] == [
        {"pointer": "/colour", "detail": "Unknown field.", "location": "body"}
    ]


async def test_a_wrong_type_is_422_with_its_pointer(client: Any) -> None:
    response = await client.post("/test/desktops", json={"name": "kiosk", "cpus": "many"})
    body = await problem(response, 422, "validation_failed")
    assert body["errors"] == [
        {"pointer": "/cpus", "detail": "Not a valid integer.", "location": "body"}
    ]


async def test_every_invalid_field_is_listed_with_a_pointer_into_lists(client: Any) -> None:
    response = await client.post(
        "/test/desktops", json={"cpus": 0, "disks": [{"size_gb": 10}, {"size_gb": -1}]}
    )
    body = await problem(response, 422, "validation_failed")
    pointers = sorted(error["pointer"] for error in body["errors"])
    assert pointers == ["/cpus", "/disks/1/size_gb", "/name"]


async def test_a_body_that_is_not_an_object_is_422_at_the_root(client: Any) -> None:
    response = await client.post("/test/desktops", json=["kiosk"])
    body = await problem(response, 422, "validation_failed")
    assert [error["pointer"] for error in body["errors"]] == [""]


async def test_a_missing_body_is_422(client: Any) -> None:
    response = await client.post("/test/desktops")
    body = await problem(response, 422, "validation_failed")
    assert body["errors"][0]["pointer"] == ""


async def test_a_body_that_is_not_json_is_415(client: Any) -> None:
    response = await client.post("/test/desktops", data="name=kiosk")
    body = await problem(response, 415, "unsupported_media_type")
    assert "application/json" in body["detail"]


async def test_a_json_suffix_media_type_is_accepted(client: Any) -> None:
    response = await client.post(
        "/test/desktops",
        data=json.dumps({"name": "kiosk"}),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status == 201


async def test_an_unknown_route_is_404(client: Any) -> None:
    response = await client.get("/api/v1/no-such-thing")
    await problem(response, 404, "not_found")


async def test_a_wrong_method_is_405_with_allow(client: Any) -> None:
    response = await client.delete("/test/desktops")
    body = await problem(response, 405, "method_not_allowed")
    assert body["allowed"] == ["POST"]
    assert response.headers["Allow"] == "POST"


async def test_an_unexpected_error_is_500_without_details(client: Any) -> None:
    response = await client.get("/test/crash")
    body = await problem(response, 500, "internal_error")
    assert "secret" not in json.dumps(body)
    assert "request id" in body["detail"]


async def test_a_deadlocked_operation_is_run_again(client: Any) -> None:
    response = await client.post("/test/contended/3")
    assert response.status == 200, await response.text()
    assert await response.json() == {"runs": 4}


async def test_an_operation_deadlocked_every_time_is_503_with_retry_after(client: Any) -> None:
    response = await client.post("/test/contended/100")
    body = await problem(response, 503, "contention")
    assert response.headers["Retry-After"].isdigit()
    assert "retry" in body["detail"]


async def test_a_protected_operation_is_503_while_oidc_is_unset(client: Any) -> None:
    response = await client.get("/api/v1/pools")
    body = await problem(response, 503, "auth_not_configured")
    assert "AUTH_OIDC_ISSUER_URL" in body["detail"]


async def test_a_client_request_id_is_kept(client: Any) -> None:
    response = await client.get("/api/v1/no-such-thing", headers={"X-Request-Id": "trace-42"})
    assert response.headers["X-Request-Id"] == "trace-42"
    assert (await response.json())["request_id"] == "trace-42"


async def test_an_unusable_request_id_is_replaced(client: Any) -> None:
    response = await client.get("/api/v1/no-such-thing", headers={"X-Request-Id": "a b\tc"})
    assert response.headers["X-Request-Id"] != "a b\tc"


async def test_a_missing_token_is_401_with_a_bare_bearer_challenge(secure_api_client: Any) -> None:
    response = await secure_api_client.get("/api/v1/pools")
    await problem(response, 401, "unauthenticated")
    challenge = response.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer ")
    assert "error=" not in challenge


async def test_a_refused_token_is_401_with_invalid_token(secure_api_client: Any) -> None:
    response = await secure_api_client.get(
        "/api/v1/pools", headers={"Authorization": "Bearer not.a.token"}
    )
    await problem(response, 401, "unauthenticated")
    assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]
