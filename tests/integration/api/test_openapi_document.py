"""The OpenAPI document: generated from the route table, checked in, valid, served as is."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from openapi_spec_validator import validate
from tests.integration.api.extra_operations import ExtraOperations
from tests.support.paths import REPO

from deskpool.api.app import build_route_table
from deskpool.api.openapi import build_document, render_document
from deskpool.api.routes import Authentication, ResponseSpec, RouteTable
from deskpool.host import discover
from deskpool.plugins import load_plugins

DOCUMENT = REPO / "api" / "openapi" / "openapi.yaml"
RunDeskpool = Callable[..., subprocess.CompletedProcess[str]]


def checked_in() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(DOCUMENT.read_text(encoding="utf-8"))
    return document


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    ]


def test_deskpool_openapi_check_passes(run_deskpool: RunDeskpool, tmp_path: Path) -> None:
    result = run_deskpool("openapi", "check", env={"XDG_CACHE_HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stdout


def test_deskpool_openapi_check_fails_when_the_file_differs(
    run_deskpool: RunDeskpool, tmp_path: Path
) -> None:
    stale = tmp_path / "openapi.yaml"
    stale.write_text(DOCUMENT.read_text(encoding="utf-8").replace("deskpool API", "old API"))
    result = run_deskpool(
        "openapi", "check", "--path", str(stale), env={"XDG_CACHE_HOME": str(tmp_path)}
    )
    assert result.returncode != 0
    assert "deskpool openapi write" in result.stderr


def test_the_checked_in_document_is_what_the_code_generates() -> None:
    assert DOCUMENT.read_text(encoding="utf-8") == render_document(build_route_table(discover({})))


def test_the_document_is_a_valid_openapi_3_1_document() -> None:
    assert DOCUMENT.read_text(encoding="utf-8").startswith("openapi: 3.1.0\n")
    validate(checked_in())


def test_every_operation_states_its_permission_and_security() -> None:
    for path, method, operation in operations(checked_in()):
        where = f"{method.upper()} {path}"
        permission = operation.get("x-permission")
        if operation["security"] == []:
            assert permission is None, where
            assert "Public" in operation["description"], where
        else:
            assert operation["security"] == [{"bearerAuth": []}, {"openIdConnect": []}], where
            if permission is not None:
                assert f"`{permission}`" in operation["description"], where
                assert permission.split(":")[1] in {"read", "manage", "admin"}, where


def test_every_operation_lists_its_problem_responses() -> None:
    for path, method, operation in operations(checked_in()):
        where = f"{method.upper()} {path}"
        responses = operation["responses"]
        assert "429" in responses, where
        if operation["security"]:
            assert {"401", "403", "503"} <= set(responses), where
        if "requestBody" in operation:
            assert {"400", "413", "415", "422"} <= set(responses), where
        if "{" in path:
            assert "404" in responses, where
        for status, response in responses.items():
            if int(status) >= 400 and "$ref" not in response:
                assert "application/problem+json" in response["content"], f"{where} {status}"


def test_problem_responses_and_headers_are_described_once() -> None:
    components = checked_in()["components"]
    unauthenticated = components["responses"]["Unauthenticated"]
    assert unauthenticated["headers"]["WWW-Authenticate"] == {
        "$ref": "#/components/headers/WWW-Authenticate"
    }
    assert components["headers"]["WWW-Authenticate"]["required"] is True
    limited = components["responses"]["RateLimited"]
    assert set(limited["headers"]) >= {"Retry-After", "RateLimit-Limit", "RateLimit-Remaining"}
    problem = components["schemas"]["Problem"]
    assert set(problem["required"]) >= {"type", "title", "status", "detail", "instance", "code"}


def test_lists_document_their_limit_and_cursor() -> None:
    for path, method, operation in operations(checked_in()):
        success = operation["responses"].get("200", {})
        schema_ref = success.get("content", {}).get("application/json", {}).get("schema", {})
        if not str(schema_ref.get("$ref", "")).endswith("Page"):
            continue
        names = {parameter["name"]: parameter for parameter in operation["parameters"]}
        assert names["limit"]["schema"]["maximum"] == 500, f"{method} {path}"
        assert names["limit"]["schema"]["default"] == 50, f"{method} {path}"
        assert "cursor" in names, f"{method} {path}"


def test_security_schemes_are_bearer_jwt_and_openid_connect() -> None:
    schemes = checked_in()["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": schemes["bearerAuth"]["description"],
    }
    assert schemes["openIdConnect"]["type"] == "openIdConnect"
    assert schemes["openIdConnect"]["openIdConnectUrl"] == "/docs/openid-configuration"


def test_the_security_schemes_are_the_ones_declared_on_the_route_table() -> None:
    """The platform names no scheme and no issuer: the auth provider plugin declares them."""

    async def probe(call: Any) -> None:
        return None

    routes = RouteTable()
    routes.route(
        "GET",
        "/test/probe",
        summary="Probe",
        tags=("test",),
        permission="pools:read",
        responses={200: ResponseSpec("Probed.")},
    )(probe)
    routes.security_scheme("apiKey", {"type": "apiKey", "in": "header", "name": "X-Key"})
    routes.describe_authentication(
        Authentication(credentials="Send `X-Key`.", availability="Ask for a key.")
    )
    document = build_document(routes)
    assert "Send `X-Key`. Each operation declares" in document["info"]["description"]
    assert "overrides every check. Ask for a key.\n\n## Errors" in document["info"]["description"]
    assert document["components"]["securitySchemes"] == {
        "apiKey": {"type": "apiKey", "in": "header", "name": "X-Key"}
    }
    assert document["paths"]["/test/probe"]["get"]["security"] == [{"apiKey": []}]


def test_a_plugins_operations_are_in_the_document() -> None:
    plugins = load_plugins_with(ExtraOperations())
    document = build_document(build_route_table(plugins))
    operation = document["paths"]["/test/desktops"]["post"]
    assert operation["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/DesktopDraft"
    }
    schema = document["components"]["schemas"]["DesktopDraft"]
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["name"]
    validate(document)


def load_plugins_with(plugin: object) -> Any:
    from deskpool.plugins import PluginSelection

    host = load_plugins(PluginSelection.from_environ({}))
    host.pm.register(plugin, name="extra-operations")
    return host


async def test_get_openapi_yaml_serves_the_checked_in_document(api_client: Any) -> None:
    response = await api_client.get("/openapi.yaml")
    assert response.status == 200
    assert response.content_type == "application/yaml"
    assert await response.read() == DOCUMENT.read_bytes()


async def test_an_unreadable_document_is_a_503_problem(
    make_api_client: Any, tmp_path: Path
) -> None:
    client = await make_api_client(OPENAPI_PATH=str(tmp_path / "missing.yaml"))
    response = await client.get("/openapi.yaml")
    assert response.status == 503
    assert response.content_type == "application/problem+json"
