"""The OpenAPI 3.1 document, generated from the route table and its marshmallow schemas.

apispec is used directly (aiohttp-apispec 2.2.3 fails to import with marshmallow 4 and cannot
write OpenAPI 3.1). ``deskpool openapi write`` writes the document to
``api/openapi/openapi.yaml``; ``deskpool openapi check`` fails when the checked-in file differs,
and a test runs the check, so the document cannot drift from the code. The running instance
serves the file at ``OPENAPI_PATH`` as ``GET /openapi.yaml`` (an operation of the document
itself).

Besides what each operation declares, the document lists every problem response an operation
can give, from what it declares: every operation 400 (text that is not text in its URL, see
:mod:`deskpool.api.inputs`) and 429 (with ``Retry-After``), since all are rate limited; a path
parameter 404; a body 408, 413, 415 and 422; a query 422; a protected operation 401 (with
``WWW-Authenticate``), 403 and 503; a protected change 409. Success responses carry the
RateLimit headers.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from aiohttp import web
from apispec import APISpec, BasePlugin
from apispec.ext.marshmallow import MarshmallowPlugin
from marshmallow import fields

from deskpool import __version__
from deskpool.api.context import Call
from deskpool.api.docs import declare_documentation
from deskpool.api.inputs import MAX_JSON_DEPTH
from deskpool.api.pagination import DEFAULT_LIMIT, MAX_LIMIT
from deskpool.api.problems import PROBLEM_CONTENT_TYPE, ProblemSchema
from deskpool.api.routes import Authentication, Operation, ResponseSpec, RouteTable
from deskpool.errors import ServiceUnavailable
from deskpool.idempotency.model import WRITE_METHODS

_PATH_PARAM = re.compile(r"{([^}:]+)(?::[^}]*)?}")

#: The document the API serves, read from ``OPENAPI_PATH`` at startup.
OPENAPI_DOCUMENT_KEY = web.AppKey("openapi_document", bytes)

_INTRODUCTION = """\
The REST API of deskpool, a virtual desktop administration platform. The web console is one
client of this API and has no private interface.

## Authentication and permissions

"""

#: The platform's part of the authentication section, between the auth provider's two parts.
_PERMISSIONS = """\
Each operation declares the permission it needs in
`x-permission` (`<resource>:read` for reads, `<resource>:manage` for changes); `platform:admin`
overrides every check."""

#: What the section says when no auth provider describes itself.
_NO_AUTHENTICATION = Authentication(
    credentials="Every protected operation needs the credentials the instance's auth provider "
    "accepts.",
    availability="",
)

_SECTIONS = f"""

## Errors

Every error is `application/problem+json` (RFC 9457): `type`, `title`, `status`, `detail`,
`instance`, a stable machine-readable `code` and the `request_id` (also in the `X-Request-Id`
response header; a client may send its own). A 422 lists each invalid field in `errors` with a
JSON pointer; a 401 carries a `WWW-Authenticate: Bearer` challenge (RFC 6750). Unknown paths are
404 and unsupported methods 405, in the same format.

## Limits

- Request bodies are at most `API_MAX_BODY_SIZE` bytes (default 1 MiB); larger ones are 413.
  A body must arrive within `API_BODY_TIMEOUT` (408 otherwise), nest arrays and objects at most
  {MAX_JSON_DEPTH} deep, and may be sent gzip- or deflate-encoded (`Content-Encoding`).
- Strings (in the path, the query and the body) never hold NUL characters, unpaired surrogates
  or percent-encoded bytes that are not UTF-8: such a request is 400 `invalid_text`.
- Lists are paginated: `limit` (default `API_PAGE_SIZE_DEFAULT`, {DEFAULT_LIMIT}; at most
  `API_PAGE_SIZE_MAX`, {MAX_LIMIT}) and `cursor`, the opaque `next` of the previous page, which
  is null on the last page.
- Each caller (the signed-in user; the client address on public operations) may send
  `API_RATE_LIMIT_PER_MINUTE` requests per minute (default 600). Responses carry
  `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` and `RateLimit-Policy`; a request
  over the budget is 429 with `Retry-After`.
- Browsers may call the API from the origins in `API_CORS_ALLOWED_ORIGINS`.
"""

#: The problem responses, written once under ``components/responses``: status, name, text.
_STANDARD_PROBLEMS: dict[int, tuple[str, str]] = {
    400: (
        "BadRequest",
        "The request cannot be read: malformed JSON, JSON nested too deeply (`json_too_deep`), "
        "text with a NUL character, an unpaired surrogate or bytes that are not UTF-8 "
        "(`invalid_text`, with `errors`), a body not in its Content-Encoding, a bad cursor.",
    ),
    401: ("Unauthenticated", "No valid bearer token (see the WWW-Authenticate header)."),
    403: ("Forbidden", "The caller lacks the operation's permission."),
    404: ("NotFound", "The resource does not exist."),
    408: ("RequestTimeout", "The request body did not arrive within API_BODY_TIMEOUT."),
    409: ("Conflict", "The request conflicts with the resource's current state."),
    413: ("PayloadTooLarge", "The request body is larger than API_MAX_BODY_SIZE."),
    415: (
        "UnsupportedMediaType",
        "The request body is not application/json, or its Content-Encoding is not gzip or "
        "deflate (see Accept-Encoding).",
    ),
    422: ("ValidationFailed", "One or more fields are invalid (see `errors`)."),
    429: ("RateLimited", "Rate limit exceeded (see the Retry-After and RateLimit-* headers)."),
    503: (
        "ServiceUnavailable",
        "Authentication is not configured, or a dependency (the database, the key-value store) "
        "was lost or did not answer in time (`dependency_unavailable`, the detail naming it), or "
        "the database ended the request's transaction for contention each time it was tried "
        "(`contention`); both with Retry-After: send it again. A change sent with an "
        "Idempotency-Key whose commit was interrupted is `commit_outcome_unknown` (it may have "
        "been applied): send it again with the same key.",
    ),
}

#: The ``Idempotency-Key`` header of a write (docs/api.md, "Retrying a change").
_IDEMPOTENCY_KEY: dict[str, Any] = {
    "in": "header",
    "name": "Idempotency-Key",
    "required": False,
    "description": (
        "A key of the caller's choosing (1 to 255 visible ASCII characters, a UUID say) that "
        "makes the change safe to send again: the change, its response and the key are "
        "committed together, and the same request sent again with the same key within 24 hours "
        "is answered the stored response (with `Idempotent-Replayed: true`) instead of being "
        "applied twice. The same key with another body or target is 422 "
        "`idempotency_key_reused`. Send it again this way after a 503 "
        "`commit_outcome_unknown` (the connection to the database was lost while the change "
        "was committed) or when the answer was lost."
    ),
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"},
}

#: Response headers, written once under ``components/headers``.
_HEADERS: dict[str, dict[str, Any]] = {
    "RateLimit-Limit": {
        "description": "Requests the caller may send in one window (API_RATE_LIMIT_PER_MINUTE).",
        "schema": {"type": "integer", "minimum": 1},
    },
    "RateLimit-Remaining": {
        "description": "Requests the caller has left in the current window.",
        "schema": {"type": "integer", "minimum": 0},
    },
    "RateLimit-Reset": {
        "description": "Seconds until the current window ends.",
        "schema": {"type": "integer", "minimum": 0},
    },
    "RateLimit-Policy": {
        "description": "The quota and its window in seconds, `<limit>;w=<seconds>`.",
        "schema": {"type": "string"},
    },
    "Retry-After": {
        "description": "Seconds to wait before the next request.",
        "required": True,
        "schema": {"type": "integer", "minimum": 0},
    },
    "WWW-Authenticate": {
        "description": (
            'The bearer challenge (RFC 6750): `Bearer realm="deskpool"`, with '
            '`error="invalid_token"` and an `error_description` when a token was sent and '
            "refused."
        ),
        "required": True,
        "schema": {"type": "string"},
    },
}
_RATE_LIMIT_HEADERS = (
    "RateLimit-Limit",
    "RateLimit-Remaining",
    "RateLimit-Reset",
    "RateLimit-Policy",
)


#: Media types of documents a client parses into a structure (the OpenAPI document itself).
_STRUCTURED_TYPES = {"application/yaml", "application/openapi+yaml"}


class SchemaRulesPlugin(BasePlugin):
    """States rules across fields that a schema declares in its ``Meta``.

    ``exactly_one_of = ("a", "b")`` (enforced by
    :func:`deskpool.api.validation.require_exactly_one`) becomes ``oneOf`` with one ``required``
    branch per field, so a generated client never sends none or both.
    """

    def schema_helper(
        self, name: str, definition: dict[str, Any], **kwargs: Any
    ) -> dict[str, Any] | None:
        """The ``oneOf`` of a schema declaring ``Meta.exactly_one_of``; nothing otherwise."""
        schema = kwargs.get("schema")
        meta = getattr(schema, "Meta", None)
        names = getattr(meta, "exactly_one_of", None)
        if not names:
            return None
        return {"oneOf": [{"required": [field]} for field in names]}


#: JSON Schema keywords a field states through its metadata that apispec does not pass on.
_FIELD_KEYWORDS = ("propertyNames",)


def json_schema_keywords(
    converter: Any, field: fields.Field[Any], ret: dict[str, Any], **kwargs: Any
) -> dict[str, Any]:
    """The :data:`_FIELD_KEYWORDS` of a field's metadata (``propertyNames`` of a dict)."""
    return {key: field.metadata[key] for key in _FIELD_KEYWORDS if key in field.metadata}


def problem_statuses(operation: Operation) -> list[int]:
    """The problem responses an operation can answer, from what it declares."""
    statuses = {400, 429}
    if _PATH_PARAM.search(operation.path):
        statuses.add(404)
    if operation.body is not None:
        statuses |= {408, 413, 415, 422}
    if operation.query is not None:
        statuses.add(422)
    if not operation.public:
        statuses |= {401, 403, 503}
        if operation.method in {"PUT", "PATCH", "DELETE", "POST"}:
            statuses.add(409)
    statuses -= set(operation.responses)
    return sorted(statuses)


def _response(status: int, spec: ResponseSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"description": spec.description}
    if spec.schema is not None:
        out["content"] = {spec.content_type: {"schema": spec.schema}}
    elif spec.content_type in _STRUCTURED_TYPES:
        out["content"] = {spec.content_type: {"schema": {"type": "object"}}}
    elif spec.content_type != "application/json":
        out["content"] = {spec.content_type: {"schema": {"type": "string"}}}
    for other in spec.also:
        out.setdefault("content", {})[other] = {"schema": {"type": "string"}}
    headers: dict[str, Any] = {}
    if 200 <= status < 300:
        headers |= {name: name for name in _RATE_LIMIT_HEADERS}
    headers |= {
        name: {"description": text, "schema": {"type": "string"}}
        for name, text in spec.headers.items()
    }
    if headers:
        out["headers"] = headers
    return out


def _problem(status: int) -> dict[str, Any]:
    problem: dict[str, Any] = {
        "description": _STANDARD_PROBLEMS[status][1],
        "content": {PROBLEM_CONTENT_TYPE: {"schema": "Problem"}},
    }
    if status == 429:
        problem["headers"] = {"Retry-After": "Retry-After"} | {
            name: name for name in _RATE_LIMIT_HEADERS
        }
    if status == 401:
        problem["headers"] = {"WWW-Authenticate": "WWW-Authenticate"}
    if status == 503:
        problem["headers"] = {
            "Retry-After": {
                "description": "Seconds to wait before sending the request again (outages).",
                "schema": {"type": "integer", "minimum": 0},
            }
        }
    if status == 415:
        problem["headers"] = {
            "Accept-Encoding": {
                "description": "The content codings a request body may use (RFC 9110 §12.5.3).",
                "schema": {"type": "string"},
            }
        }
    return problem


def _description(operation: Operation) -> str:
    if operation.permission:
        needed = f"Requires the permission `{operation.permission}`"
        if operation.entitlement:
            needed += ", or an entitlement to the addressed pool"
        needed += " (or `platform:admin`)."
    elif operation.public:
        needed = "Public: no token needed."
    else:
        needed = "Requires a valid access token; no particular permission."
    return f"{operation.description}\n\n{needed}".strip()


def _operation(operation: Operation, schemes: list[str]) -> dict[str, Any]:
    parameters: list[Any] = [
        {"in": "path", "name": name, "required": True, "schema": {"type": "string"}}
        for name in _PATH_PARAM.findall(operation.path)
    ]
    if operation.query is not None:
        parameters.append({"in": "query", "schema": operation.query})
    if operation.method.upper() in WRITE_METHODS and not operation.public:
        parameters.append(_IDEMPOTENCY_KEY)
    responses: dict[str, Any] = {
        str(status): _response(status, spec) for status, spec in sorted(operation.responses.items())
    }
    for status in problem_statuses(operation):
        responses[str(status)] = _STANDARD_PROBLEMS[status][0]
    out: dict[str, Any] = {
        "operationId": operation.operation_id,
        "summary": operation.summary,
        "description": _description(operation),
        "tags": list(operation.tags),
        "responses": dict(sorted(responses.items())),
        "security": [] if operation.public else [{name: []} for name in schemes],
    }
    if operation.permission:
        out["x-permission"] = operation.permission
    if parameters:
        out["parameters"] = parameters
    if operation.body is not None:
        out["requestBody"] = {
            "required": not operation.body_optional,
            "content": {"application/json": {"schema": operation.body}},
        }
    return out


def description(authentication: Authentication) -> str:
    """The document's introduction, with what the auth provider says about authenticating."""
    parts = (authentication.credentials, _PERMISSIONS, authentication.availability)
    return _INTRODUCTION + " ".join(part for part in parts if part) + _SECTIONS


def build_document(routes: RouteTable) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes`` as a mapping."""
    marshmallow = MarshmallowPlugin()
    spec = APISpec(
        title="deskpool API",
        version=__version__,
        openapi_version="3.1.0",
        plugins=[marshmallow, SchemaRulesPlugin()],
        info={
            "description": description(routes.authentication or _NO_AUTHENTICATION),
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
    )
    assert marshmallow.converter is not None
    marshmallow.converter.add_attribute_function(json_schema_keywords)  # type: ignore[no-untyped-call]
    spec.components.schema("Problem", schema=ProblemSchema)
    for name, header in _HEADERS.items():
        spec.components.header(name, header)
    for status, (name, _) in sorted(_STANDARD_PROBLEMS.items()):
        spec.components.response(name, _problem(status))
    # The auth provider plugin declares how callers authenticate (deskpool_register_routes).
    schemes = routes.security_schemes()
    for name, scheme in schemes.items():
        spec.components.security_scheme(name, dict(scheme))
    tags = sorted({tag for op in routes.operations() for tag in op.tags})
    for tag in tags:
        spec.tag({"name": tag})
    by_path: dict[str, dict[str, Any]] = {}
    for operation in routes.operations():
        path = _PATH_PARAM.sub(r"{\1}", operation.path)
        by_path.setdefault(path, {})[operation.method.lower()] = _operation(
            operation, list(schemes)
        )
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


# --------------------------------------------------------------------------- GET /openapi.yaml


async def get_openapi_document(call: Call) -> web.Response:
    """``GET /openapi.yaml``: the document at ``OPENAPI_PATH``, as read at startup."""
    document = call.request.app.get(OPENAPI_DOCUMENT_KEY)
    if document is None:
        raise ServiceUnavailable(
            "The OpenAPI document could not be read at startup (OPENAPI_PATH); see the log."
        )
    return web.Response(
        body=document, content_type="application/yaml", headers={"Cache-Control": "no-cache"}
    )


def register(routes: RouteTable) -> None:
    """Declare ``GET /openapi.yaml`` in the route table (the document lists itself)."""
    declare_documentation(
        routes,
        "/openapi.yaml",
        get_openapi_document,
        summary="The OpenAPI document",
        description=(
            "The OpenAPI 3.1 document of the running version, in YAML: the authoritative "
            "source of every request and response shape."
        ),
        content=ResponseSpec("The document.", content_type="application/yaml"),
        unavailable="The document could not be read at startup (OPENAPI_PATH).",
    )
