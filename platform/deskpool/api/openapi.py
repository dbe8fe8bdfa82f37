"""The OpenAPI 3.1 document, generated from the route table and its marshmallow schemas.

apispec is used directly (aiohttp-apispec 2.2.3 fails to import with marshmallow 4 and cannot
write OpenAPI 3.1). ``deskpool openapi write`` writes the document to
``api/openapi/openapi.yaml``; ``deskpool openapi check`` fails when the checked-in file differs,
and a test runs the check, so the document cannot drift from the code.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin

from deskpool import __version__
from deskpool.api.problems import PROBLEM_CONTENT_TYPE, ProblemSchema
from deskpool.api.routes import Operation, ResponseSpec, RouteTable

_PATH_PARAM = re.compile(r"{([^}:]+)(?::[^}]*)?}")

DESCRIPTION = """\
The REST API of deskpool, a virtual desktop administration platform. The web console is one
client of this API and has no private interface.

Every protected operation needs `Authorization: Bearer <access token>`: an OIDC access token
from the identity provider configured for this instance (issuer and audience are validated on
every request). Each operation declares the permission it needs in `x-permission`
(`<resource>:read` for reads, `<resource>:manage` for changes); `platform:admin` overrides
every check. While the instance has no OIDC issuer and audience configured, protected
operations answer 503.

Errors are `application/problem+json` (RFC 9457) with a stable `code`. Lists are paginated
with a bounded `limit` and an opaque `next` cursor.
"""

_STANDARD_PROBLEMS = {
    400: "The request cannot be read (malformed JSON, a bad cursor).",
    401: "No valid bearer token (see the WWW-Authenticate header).",
    403: "The caller lacks the operation's permission.",
    404: "The resource does not exist.",
    409: "The request conflicts with the resource's current state.",
    413: "The request body is larger than the server accepts.",
    415: "The request body is not application/json.",
    422: "One or more fields are invalid (see `errors`).",
    429: "Rate limit exceeded (see the Retry-After and RateLimit-* headers).",
    503: "Authentication is not configured, or a dependency is unavailable.",
}

_RATE_LIMIT_HEADERS = {
    "RateLimit-Limit": "Requests allowed in the current window.",
    "RateLimit-Remaining": "Requests left in the current window.",
    "RateLimit-Reset": "Seconds until the window resets.",
}


def problem_statuses(operation: Operation) -> list[int]:
    """The problem responses an operation can answer, from what it declares."""
    statuses = {404 if _PATH_PARAM.search(operation.path) else 0}
    if operation.body is not None:
        statuses |= {400, 413, 415, 422}
    if operation.query is not None:
        statuses |= {400, 422}
    if not operation.public:
        statuses |= {401, 403, 429, 503}
    if operation.method in {"PUT", "PATCH", "DELETE", "POST"} and not operation.public:
        statuses.add(409)
    statuses.discard(0)
    statuses -= set(operation.responses)
    return sorted(statuses)


def _response(spec: ResponseSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"description": spec.description}
    if spec.schema is not None:
        out["content"] = {spec.content_type: {"schema": spec.schema}}
    elif spec.content_type != "application/json":
        out["content"] = {spec.content_type: {"schema": {"type": "string"}}}
    if spec.headers:
        out["headers"] = {
            name: {"description": text, "schema": {"type": "string"}}
            for name, text in spec.headers.items()
        }
    return out


def _operation(operation: Operation) -> dict[str, Any]:
    description = operation.description
    if operation.permission:
        needed = f"Requires the permission `{operation.permission}`"
        if operation.entitlement:
            needed += ", or an entitlement to the addressed pool"
        description = f"{description}\n\n{needed} (or `platform:admin`).".strip()
    else:
        description = f"{description}\n\nPublic: no token needed.".strip()
    parameters: list[Any] = [
        {"in": "path", "name": name, "required": True, "schema": {"type": "string"}}
        for name in _PATH_PARAM.findall(operation.path)
    ]
    if operation.query is not None:
        parameters.append({"in": "query", "schema": operation.query})
    responses: dict[str, Any] = {
        str(status): _response(spec) for status, spec in sorted(operation.responses.items())
    }
    for status in problem_statuses(operation):
        problem: dict[str, Any] = {
            "description": _STANDARD_PROBLEMS[status],
            "content": {PROBLEM_CONTENT_TYPE: {"schema": "Problem"}},
        }
        if status == 429:
            problem["headers"] = {
                "Retry-After": {"description": "Seconds to wait.", "schema": {"type": "integer"}},
                **{
                    name: {"description": text, "schema": {"type": "integer"}}
                    for name, text in _RATE_LIMIT_HEADERS.items()
                },
            }
        if status == 401:
            problem["headers"] = {
                "WWW-Authenticate": {
                    "description": "The bearer challenge (RFC 6750).",
                    "schema": {"type": "string"},
                }
            }
        responses[str(status)] = problem
    out: dict[str, Any] = {
        "operationId": operation.operation_id,
        "summary": operation.summary,
        "description": description,
        "tags": list(operation.tags),
        "responses": responses,
        "security": [] if operation.public else [{"bearerAuth": []}, {"openIdConnect": []}],
    }
    if operation.permission:
        out["x-permission"] = operation.permission
    if parameters:
        out["parameters"] = parameters
    if operation.body is not None:
        out["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": operation.body}},
        }
    return out


def build_document(routes: RouteTable) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes`` as a mapping."""
    spec = APISpec(
        title="deskpool API",
        version=__version__,
        openapi_version="3.1.0",
        plugins=[MarshmallowPlugin()],
        info={
            "description": DESCRIPTION,
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
    )
    spec.components.schema("Problem", schema=ProblemSchema)
    spec.components.security_scheme(
        "bearerAuth",
        {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "An OIDC access token from the instance's identity provider.",
        },
    )
    spec.components.security_scheme(
        "openIdConnect",
        {
            "type": "openIdConnect",
            "openIdConnectUrl": "/.well-known/openid-configuration",
            "description": (
                "Sign in through the instance's OIDC issuer (AUTH_OIDC_ISSUER_URL); "
                "authorization code with PKCE. The interactive documentation at /docs "
                "points this at the configured issuer."
            ),
        },
    )
    tags = sorted({tag for op in routes.operations() for tag in op.tags})
    for tag in tags:
        spec.tag({"name": tag})
    by_path: dict[str, dict[str, Any]] = {}
    for operation in routes.operations():
        path = _PATH_PARAM.sub(r"{\1}", operation.path)
        by_path.setdefault(path, {})[operation.method.lower()] = _operation(operation)
    for path, operations in by_path.items():
        spec.path(path=path, operations=operations)
    document = spec.to_dict()
    order = ["openapi", "info", "servers", "tags", "paths", "components"]
    return {key: document[key] for key in order if key in document} | {
        key: value for key, value in document.items() if key not in order
    }


class _DocumentDumper(yaml.SafeDumper):
    """Writes multi-line strings as literal blocks, so descriptions stay readable."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_DocumentDumper.add_representer(str, _represent_str)


def render_document(routes: RouteTable) -> str:
    """The document as YAML, in a stable order."""
    return yaml.dump(
        build_document(routes),
        Dumper=_DocumentDumper,
        sort_keys=False,
        allow_unicode=True,
        width=100,
    )
