"""Hostile input against every operation of the route table: 4xx problem+json, never a 500.

The cases are generated from the route table, so an operation added later is covered without
touching this file: every path parameter, every declared query parameter and every declared
body field receives a NUL character and an unpaired surrogate, as a platform administrator
would send them (so nothing but the input itself can refuse the request). Each must be refused
by the one input guard (``invalid_text``) before any handler runs.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest

from deskpool.api.app import build_route_table
from deskpool.api.inputs import MAX_JSON_DEPTH
from deskpool.api.routes import Operation
from deskpool.testing.pytest_plugin import served

PROBLEM = "application/problem+json"
ADMIN = "hostile-input-admin"

#: A NUL character and an unpaired surrogate, as JSON decodes them.
BAD_TEXT = {"nul": "a\x00b", "surrogate": "a\ud800b"}
#: The same, percent-encoded in a URL (a lone surrogate can only arrive as its UTF-8-like bytes).
BAD_URL_TEXT = {
    "nul": "a%00b",
    "surrogate": quote("a\ud800b", errors="surrogatepass"),
}
#: The percent-encoded NUL in a query parameter's name.
BAD_QUERY_NAME = "a%00b"


@dataclass
class Hostile:
    """A client of an API application whose platform administrator is ``headers``."""

    client: Any
    headers: dict[str, str]
    operations: list[Operation]


@pytest.fixture
async def hostile(
    secure_environ: dict[str, str], identity_provider: Any, aiohttp_client: Any
) -> AsyncIterator[Hostile]:
    environ = secure_environ | {
        "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": ADMIN,
        "API_RATE_LIMIT_PER_MINUTE": "0",
    }
    async with served(environ, aiohttp_client) as (runtime, client):
        token = identity_provider.issue_token(ADMIN, expires_in=3600)
        headers = {"Authorization": f"Bearer {token}"}
        me = await client.get("/api/v1/me", headers=headers)
        assert me.status == 200, await me.text()
        operations = build_route_table(runtime.plugins).operations()
        yield Hostile(client, headers, operations)


def path_parameters(operation: Operation) -> list[str]:
    return re.findall(r"{([^}:]+)[^}]*}", operation.path)


def fill_path(operation: Operation, values: dict[str, str]) -> str:
    return re.sub(
        r"{([^}:]+)[^}]*}",
        lambda match: values.get(match.group(1), "00000000-0000-4000-8000-000000000000"),
        operation.path,
    )


def declared_fields(schema: Any) -> list[str]:
    """The names a client sends for ``schema``'s fields (their data keys)."""
    if schema is None:
        return []
    instance = schema() if isinstance(schema, type) else schema
    fields = instance.fields.items()
    return [field.data_key or name for name, field in fields if not field.dump_only]


@dataclass(frozen=True)
class Case:
    """One hostile request."""

    operation: Operation
    where: str
    name: str
    variant: str

    @property
    def id(self) -> str:
        return f"{self.operation.operation_id}-{self.where}-{self.name}-{self.variant}"


def cases(operations: list[Operation]) -> Iterator[Case]:
    for operation in operations:
        for variant in BAD_TEXT:
            for name in path_parameters(operation):
                yield Case(operation, "path", name, variant)
            for name in declared_fields(operation.query):
                yield Case(operation, "query", name, variant)
            if operation.query is not None or operation.method == "GET":
                yield Case(operation, "query-name", BAD_QUERY_NAME, variant)
            for name in declared_fields(operation.body):
                yield Case(operation, "body", name, variant)
            if operation.body is not None:
                yield Case(operation, "body-key", "key", variant)


async def send(hostile: Hostile, case: Case) -> Any:
    operation = case.operation
    url = fill_path(operation, {})
    kwargs: dict[str, Any] = {"headers": dict(hostile.headers)}
    if case.where == "path":
        url = fill_path(operation, {case.name: BAD_URL_TEXT[case.variant]})
    elif case.where == "query":
        url += f"?{case.name}={BAD_URL_TEXT[case.variant]}"
    elif case.where == "query-name":
        url += f"?{case.name}=1"
    if case.where == "body":
        body: Any = {case.name: BAD_TEXT[case.variant]}
    elif case.where == "body-key":
        body = {"nested": [{BAD_TEXT[case.variant]: 1}]}
    else:
        body = {} if operation.body is not None else None
    if body is not None:
        kwargs["data"] = json.dumps(body).encode()
        kwargs["headers"]["Content-Type"] = "application/json"
    from yarl import URL

    return await hostile.client.request(operation.method, URL(url, encoded=True), **kwargs)


async def test_nul_and_unpaired_surrogates_are_refused_everywhere(hostile: Hostile) -> None:
    failures = []
    all_cases = list(cases(hostile.operations))
    # Every kind of place a string can come in is exercised.
    assert {case.where for case in all_cases} >= {"path", "query", "body", "body-key"}
    for case in all_cases:
        response = await send(hostile, case)
        text = await response.text()
        if response.status != 400 or response.content_type != PROBLEM:
            failures.append(f"{case.id}: {response.status} {text[:200]}")
            continue
        body = json.loads(text)
        if body["code"] != "invalid_text":
            failures.append(f"{case.id}: {body['code']}")
    assert failures == [], "\n".join(failures)
    assert len(all_cases) > 100


async def test_the_refusal_points_to_the_string(hostile: Hostile) -> None:
    response = await hostile.client.post(
        "/api/v1/groups",
        data=json.dumps({"key": "ok", "name": ["fine", {"x": "a\x00"}]}),
        headers={**hostile.headers, "Content-Type": "application/json"},
    )
    body = await response.json()
    assert response.status == 400
    assert body["errors"] == [
        {"pointer": "/name/1/x", "detail": "contains a NUL character", "location": "body"}
    ]
    response = await hostile.client.get("/api/v1/audit-events?actor=%00", headers=hostile.headers)
    body = await response.json()
    assert response.status == 400
    assert body["errors"][0]["location"] == "query"
    assert body["errors"][0]["pointer"] == "/query/actor"


async def test_deep_json_is_refused_at_parse_time(hostile: Hostile) -> None:
    for operation in hostile.operations:
        if operation.body is None:
            continue
        url = fill_path(operation, {})
        for depth in (MAX_JSON_DEPTH + 1, 300, 100_000):
            nested = "[" * depth + "]" * depth
            document = '{"options": ' + nested + ', "name": ' + nested + "}"
            response = await hostile.client.request(
                operation.method,
                url,
                data=document.encode(),
                headers={**hostile.headers, "Content-Type": "application/json"},
            )
            text = await response.text()
            assert response.status in (400, 413), f"{operation.operation_id} {depth}: {text}"
            assert response.content_type == PROBLEM
            if response.status == 400:
                assert json.loads(text)["code"] == "json_too_deep", text


async def test_json_at_the_depth_limit_is_read(hostile: Hostile) -> None:
    nested: Any = "x"
    for _ in range(MAX_JSON_DEPTH - 1):
        nested = [nested]
    response = await hostile.client.post(
        "/api/v1/groups",
        json={"key": "deep", "name": nested},
        headers=hostile.headers,
    )
    # Read, then refused by the schema: the name is not a string.
    assert response.status == 422, await response.text()


@pytest.mark.parametrize(
    ("encoding", "data", "status", "code"),
    [
        ("gzip", b'{"key": "plain", "name": "Plain"}', 400, "invalid_content_encoding"),
        ("deflate", b'{"key": "plain", "name": "Plain"}', 400, "invalid_content_encoding"),
        ("x-unknown", b'{"key": "plain", "name": "Plain"}', 415, "unsupported_content_encoding"),
        ("gzip, gzip", b'{"key": "plain", "name": "Plain"}', 415, "unsupported_content_encoding"),
    ],
)
async def test_a_content_encoding_the_body_does_not_match_is_4xx(
    hostile: Hostile, encoding: str, data: bytes, status: int, code: str
) -> None:
    response = await hostile.client.post(
        "/api/v1/groups",
        data=data,
        headers={
            **hostile.headers,
            "Content-Type": "application/json",
            "Content-Encoding": encoding,
        },
        compress=False,
    )
    text = await response.text()
    assert response.status == status, text
    assert response.content_type == PROBLEM
    assert json.loads(text)["code"] == code
    if status == 415:
        assert response.headers["Accept-Encoding"] == "gzip, deflate"


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("identity", lambda data: data)],
)
async def test_a_body_in_a_supported_content_encoding_is_read(
    hostile: Hostile, encoding: str, compress: Any
) -> None:
    key = f"enc-{encoding}"
    response = await hostile.client.post(
        "/api/v1/groups",
        data=compress(json.dumps({"key": key, "name": key}).encode()),
        headers={
            **hostile.headers,
            "Content-Type": "application/json",
            "Content-Encoding": encoding,
        },
    )
    assert response.status == 201, await response.text()


async def test_every_body_is_refused_in_a_coding_it_does_not_match(hostile: Hostile) -> None:
    failures = []
    for operation in hostile.operations:
        if operation.body is None:
            continue
        for encoding, status, code in (
            ("gzip", 400, "invalid_content_encoding"),
            ("x-unknown", 415, "unsupported_content_encoding"),
        ):
            response = await hostile.client.request(
                operation.method,
                fill_path(operation, {}),
                data=b'{"name": "plain"}',
                headers={
                    **hostile.headers,
                    "Content-Type": "application/json",
                    "Content-Encoding": encoding,
                },
                compress=False,
            )
            text = await response.text()
            if response.status != status or json.loads(text).get("code") != code:
                failures.append(f"{operation.operation_id} {encoding}: {response.status} {text}")
    assert failures == [], "\n".join(failures)


def boolean_fields(schema: Any) -> Iterator[tuple[str, Any]]:
    """(pointer, body) for every boolean a client sends in ``schema``, nested ones included.

    ``body`` holds just the path to that boolean, whose value is the placeholder ``...``.
    """
    from marshmallow import fields

    instance = schema() if isinstance(schema, type) else schema
    for name, field in instance.fields.items():
        if field.dump_only:
            continue
        key = field.data_key or name
        inner, many = field, False
        if isinstance(field, fields.List):
            inner, many = field.inner, True
        if isinstance(inner, fields.Nested):
            many = many or inner.many
            for pointer, body in boolean_fields(inner.schema):
                yield (
                    (f"/{key}/0{pointer}", {key: [body]})
                    if many
                    else (
                        f"/{key}{pointer}",
                        {key: body},
                    )
                )
        elif isinstance(inner, fields.Boolean):
            yield (f"/{key}/0", {key: [...]}) if many else (f"/{key}", {key: ...})


def with_value(body: Any, value: Any) -> Any:
    if body is ...:
        return value
    if isinstance(body, list):
        return [with_value(item, value) for item in body]
    return {key: with_value(item, value) for key, item in body.items()}


async def test_every_boolean_of_every_body_takes_only_true_or_false(hostile: Hostile) -> None:
    """``{"disabled": 0}`` and its kind are 422 at the boolean's pointer, on every operation."""
    failures, checked = [], 0
    for operation in hostile.operations:
        if operation.body is None:
            continue
        for pointer, body in boolean_fields(operation.body):
            for value in (0, 1, "true", "false", "yes", [], {}):
                checked += 1
                response = await hostile.client.request(
                    operation.method,
                    fill_path(operation, {}),
                    json=with_value(body, value),
                    headers=hostile.headers,
                )
                text = await response.text()
                if response.status != 422 or response.content_type != PROBLEM:
                    failures.append(f"{operation.operation_id} {pointer}={value!r}: {text[:200]}")
                    continue
                problem = json.loads(text)
                pointers = [error["pointer"] for error in problem["errors"]]
                if problem["code"] != "validation_failed" or pointer not in pointers:
                    failures.append(f"{operation.operation_id} {pointer}={value!r}: {text[:200]}")
    assert failures == [], "\n".join(failures)
    # PATCH /users/{id} {"disabled"} and the clusters' TLS "verify" (created and changed).
    assert checked >= 7 * 3


async def test_every_boolean_query_parameter_takes_only_true_or_false(hostile: Hostile) -> None:
    """``?disabled=1`` and its kind are 422 at ``/query/<name>``; ``true`` and ``false`` pass."""
    from marshmallow import fields

    failures, checked = [], 0
    for operation in hostile.operations:
        if operation.query is None:
            continue
        instance = operation.query() if isinstance(operation.query, type) else operation.query
        for name, field in instance.fields.items():
            if not isinstance(field, fields.Boolean) or field.dump_only:
                continue
            key = field.data_key or name
            url = fill_path(operation, {})
            for value in ("1", "0", "yes", "on", "True", ""):
                checked += 1
                response = await hostile.client.request(
                    operation.method, url, params={key: value}, headers=hostile.headers
                )
                text = await response.text()
                pointers = (
                    [error["pointer"] for error in json.loads(text).get("errors", [])]
                    if response.content_type == PROBLEM
                    else []
                )
                if response.status != 422 or f"/query/{key}" not in pointers:
                    failures.append(f"{operation.operation_id} ?{key}={value}: {text[:200]}")
            for value in ("true", "false"):
                response = await hostile.client.request(
                    operation.method, url, params={key: value}, headers=hostile.headers
                )
                if response.status >= 400:
                    failures.append(f"{operation.operation_id} ?{key}={value}: {response.status}")
    assert failures == [], "\n".join(failures)
    assert checked >= 6  # GET /api/v1/users?disabled=


async def test_a_json_boolean_passes_the_boolean_check(hostile: Hostile) -> None:
    me = await hostile.client.get("/api/v1/me", headers=hostile.headers)
    user = (await me.json())["id"]
    for value in (0, "false", None):
        response = await hostile.client.patch(
            f"/api/v1/users/{user}", json={"disabled": value}, headers=hostile.headers
        )
        assert response.status == 422, await response.text()
    response = await hostile.client.patch(
        f"/api/v1/users/{user}", json={"disabled": False}, headers=hostile.headers
    )
    assert response.status == 200, await response.text()
    assert (await response.json())["disabled"] is False
