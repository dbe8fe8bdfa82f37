"""RFC 9457 problem details: the one place errors become HTTP responses.

:func:`problem_middleware` catches every :class:`deskpool.errors.DeskpoolError`, aiohttp's own
HTTP errors (unknown route, wrong method, body too large) and anything unexpected, and answers
``application/problem+json``:

- a store lost under the request (PostgreSQL or Redis, see :mod:`deskpool.outages`): 503
  ``dependency_unavailable`` with ``Retry-After``, its detail naming the store, logged as one
  line;
- a transaction PostgreSQL still ended for a deadlock or a serialization failure after the
  operation was run again (see :func:`deskpool.outages.contended`): 503 ``contention`` with
  ``Retry-After``, logged as one line;
- a value PostgreSQL refuses to store that validation let through: 400 ``invalid_value``,
  logged as a warning naming the route (a schema rule is missing there);
- the client's connection closed while its response was written: logged as one line saying
  the client left (not as a dependency failure), and nothing is sent;
- anything else is a bug: logged with its traceback and answered 500 with only the request id.

No traceback or HTML error page ever reaches a client.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from aiohttp.web_protocol import RequestPayloadError
from asyncpg import exceptions as pg
from marshmallow import INCLUDE, Schema, fields, validate

from deskpool.errors import (
    BadRequest,
    DependencyUnavailable,
    DeskpoolError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    UnsupportedMediaType,
    problem_document,
)
from deskpool.outages import (
    CONTENTION_ATTEMPTS,
    RETRY_AFTER_SECONDS,
    contended,
    outage_of,
    unavailable_detail,
)

log = logging.getLogger(__name__)

PROBLEM_CONTENT_TYPE = "application/problem+json"
REQUEST_ID_KEY = web.RequestKey("request_id", str)


class FieldErrorSchema(Schema):
    """One invalid field: a JSON pointer into the request and what is wrong with it."""

    pointer = fields.String(
        required=True,
        metadata={
            "description": (
                "JSON pointer (RFC 6901) to the field: from the body's root for body fields "
                '(`/name`; `""` is the body itself), under `/query` for query parameters and '
                "under `/path` for path parameters."
            ),
            "example": "/name",
        },
    )
    detail = fields.String(required=True, metadata={"description": "What is wrong with it."})
    location = fields.String(
        validate=validate.OneOf(["body", "query", "path"]),
        metadata={"description": "The part of the request the field is in."},
    )


class ProblemSchema(Schema):
    """An RFC 9457 problem details object with deskpool's stable ``code``.

    Extension members beyond those listed may appear (RFC 9457 §3.2); clients ignore the ones
    they do not know.
    """

    class Meta:
        """Extension members are allowed."""

        unknown = INCLUDE

    type = fields.String(
        required=True, metadata={"description": "URI identifying the problem type."}
    )
    title = fields.String(required=True)
    status = fields.Integer(required=True)
    detail = fields.String(required=True)
    instance = fields.String(required=True, metadata={"description": "The request path."})
    code = fields.String(required=True, metadata={"description": "Stable machine-readable code."})
    request_id = fields.String(required=True)
    errors = fields.List(
        fields.Nested(FieldErrorSchema), metadata={"description": "Field errors (422)."}
    )
    allowed = fields.List(fields.String(), metadata={"description": "Allowed methods (405)."})
    installed = fields.List(
        fields.String(), metadata={"description": "Installed choices, where one was unknown."}
    )
    max_size = fields.Integer(
        metadata={"description": "The largest request body accepted, in bytes (413)."}
    )
    resource = fields.String(
        metadata={"description": "What a license limit counts: desktops, pools or sessions."}
    )
    limit = fields.Integer(metadata={"description": "The license limit reached."})
    in_use = fields.Integer(metadata={"description": "How many exist (license limits)."})
    edition = fields.String(metadata={"description": "The edition whose limits apply."})


def problem_body(error: DeskpoolError, request: web.Request) -> dict[str, Any]:
    """The problem+json body for ``error`` raised while serving ``request``."""
    return problem_document(error, request.path, request.get(REQUEST_ID_KEY, ""))


#: The challenge a 401 carries when the error that caused it named none (RFC 6750 §3).
BEARER_CHALLENGE = 'Bearer realm="deskpool"'


def problem_response(error: DeskpoolError, request: web.Request) -> web.Response:
    """Render ``error`` as an ``application/problem+json`` response.

    An error whose headers say ``Connection: close`` (a body that could not be read to its end)
    closes the connection after the response.
    """
    headers = dict(error.headers)
    if error.status == 401:
        headers.setdefault("WWW-Authenticate", BEARER_CHALLENGE)
    close = headers.pop("Connection", "").lower() == "close"
    response = web.Response(
        status=error.status,
        text=json.dumps(problem_body(error, request)),
        content_type=PROBLEM_CONTENT_TYPE,
        headers=headers,
    )
    if close:
        response.force_close()
    return response


def from_http_exception(exc: web.HTTPException) -> DeskpoolError:
    """Translate an aiohttp HTTP error into the error hierarchy."""
    if isinstance(exc, web.HTTPNotFound):
        return NotFound("No operation matches this path.")
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = sorted(exc.allowed_methods)
        return MethodNotAllowed(
            f"{exc.method} is not allowed here; allowed: {', '.join(allowed)}.",
            headers={"Allow": ", ".join(allowed)},
            extra={"allowed": allowed},
        )
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return PayloadTooLarge(
            f"{exc.text} (API_MAX_BODY_SIZE)."
            if exc.text
            else "The request body is larger than this server accepts (API_MAX_BODY_SIZE)."
        )
    if isinstance(exc, web.HTTPUnsupportedMediaType):
        return UnsupportedMediaType(exc.text or None)
    if exc.status == 400:
        return BadRequest(exc.text if exc.text and exc.text != exc.reason else None)
    # Keep the status aiohttp chose, with a code derived from its reason phrase.
    return DeskpoolError(
        exc.reason,
        status=exc.status,
        code=exc.reason.lower().replace(" ", "_"),
        title=exc.reason,
    )


#: Values PostgreSQL refuses to store (SQLSTATE class 22) that an input can carry.
_REFUSED_VALUES = (
    pg.CharacterNotInRepertoireError,
    pg.UntranslatableCharacterError,
    pg.NumericValueOutOfRangeError,
    pg.InvalidTextRepresentationError,
    pg.StringDataRightTruncationError,
    pg.InvalidDatetimeFormatError,
    pg.DatetimeFieldOverflowError,
)


class ClientLeft(DeskpoolError):
    """The client closed its connection while its response was written (never sent)."""

    status = 400
    code = "client_closed_request"
    title = "Client closed the connection"


def client_left(request: web.Request, error: Exception) -> bool:
    """Whether ``error`` is the client's connection going away (a write to a closed socket).

    aiohttp's ``ClientConnectionResetError`` is a ``ConnectionResetError``; a reset from a
    database or key-value store connection leaves the client's transport open, so it is still
    told from this by the transport.
    """
    if not isinstance(error, ConnectionResetError | BrokenPipeError):
        return False
    transport = request.transport
    return transport is None or transport.is_closing()


def unexpected_error(error: Exception, request: web.Request) -> DeskpoolError:
    """What to answer for an exception no handler expected, logging it once."""
    route = request.match_info.route.resource
    where = f"{request.method} {route.canonical if route is not None else request.path}"
    request_id = {"request_id": request.get(REQUEST_ID_KEY, "")}
    if client_left(request, error):
        # Not a dependency: the client closed the connection while the response was written.
        log.info("the client left %s before its response was sent", where, extra=request_id)
        return ClientLeft("The client closed the connection.")
    dependency = outage_of(error)
    if dependency is not None:
        log.warning(
            "%s unavailable serving %s: %s: %.200s",
            dependency,
            where,
            type(error).__name__,
            error,
            extra=request_id,
        )
        return DependencyUnavailable(
            unavailable_detail(dependency), headers={"Retry-After": str(RETRY_AFTER_SECONDS)}
        )
    if contended(error):
        log.warning(
            "the database ended the transaction serving %s %d times (%s)",
            where,
            CONTENTION_ATTEMPTS,
            type(error).__name__,
            extra=request_id,
        )
        return ServiceUnavailable(
            "The database ended this request's transaction to resolve a conflict with "
            "concurrent changes, each time it was tried; nothing was changed; retry it.",
            code="contention",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
    if isinstance(error, RequestPayloadError):
        return BadRequest(
            "The request body could not be read to its end.", headers={"Connection": "close"}
        )
    if isinstance(error, _REFUSED_VALUES) or type(error) is pg.DataError:
        log.warning(
            "PostgreSQL refused a value serving %s (%s): a validation rule is missing",
            where,
            type(error).__name__,
            extra=request_id,
        )
        return BadRequest("A value of the request cannot be stored.", code="invalid_value")
    log.exception("unhandled error serving %s", where, extra=request_id)
    return DeskpoolError("An unexpected error occurred; quote the request id to an operator.")


@web.middleware
async def problem_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer every error as problem+json; log unexpected ones with their traceback."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except DeskpoolError as error:
        return problem_response(error, request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise  # redirects and the like pass through
        return problem_response(from_http_exception(exc), request)
    except Exception as error:
        return problem_response(unexpected_error(error, request), request)
