"""The one error hierarchy of deskpool.

Every error a request can meet derives from :class:`DeskpoolError`, which the driver contract
defines (``deskpool_driver_api.errors``) so that drivers' errors share the root, and which is
re-exported here. Each class carries the HTTP status and the stable ``code`` that the
problem+json middleware writes, so a handler raises the domain error and never builds a
response for it. Errors that only happen at
startup (configuration, plugin loading) derive from :class:`StartupError`; the command line
turns those into one clear message and a non-zero exit, never a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from deskpool_driver_api.errors import DeskpoolError as DeskpoolError

#: How much of an error's message :func:`error_text` keeps.
_MESSAGE_LENGTH = 200

#: Errors whose message describes the computation that failed (and so the data), not a place
#: or a credential: :func:`error_text` quotes it.
_QUOTED = (ArithmeticError, LookupError, TypeError, ValueError, AttributeError)


def error_text(error: BaseException) -> str:
    """An unexpected error in one line, for a log or a record.

    Its type, and its message when it is safe to quote (errors of computation, whose text says
    what went wrong in the data). No traceback: an expected fault of one object is one warning line.
    """
    name = type(error).__name__
    if not isinstance(error, _QUOTED):
        return name
    message = " ".join(str(error).split())
    if len(message) > _MESSAGE_LENGTH:
        message = message[: _MESSAGE_LENGTH - 1] + "…"
    return f"{name}: {message}" if message else name


#: Where a problem's ``type`` points: this base and the error's ``code``.
PROBLEM_TYPE_BASE = "https://deskpool.dev/problems/"


def problem_document(error: DeskpoolError, instance: str, request_id: str) -> dict[str, Any]:
    """The problem+json body (RFC 9457) for ``error``, about ``instance`` (the request path).

    Here rather than in :mod:`deskpool.api.problems`, which answers with it, because the
    runtime core's listener answers requests it could not read with it too, and the runtime
    core never imports the API.
    """
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + error.code,
        "title": error.title,
        "status": error.status,
        "detail": error.detail,
        "instance": instance,
        "code": error.code,
        "request_id": request_id,
    }
    body.update(error.extra)
    return body


@dataclass(frozen=True)
class FieldError:
    """One invalid field of a request: where it is (a JSON pointer) and what is wrong."""

    pointer: str
    message: str

    def as_dict(self) -> dict[str, str]:
        """Return the field error as it appears in a problem+json body."""
        return {"pointer": self.pointer, "detail": self.message}


#: The part of a request a field error is in by default: its JSON body.
BODY = "body"


@dataclass(frozen=True)
class LocatedFieldError(FieldError):
    """A field error that also says which part of the request it is in."""

    location: str = BODY

    def as_dict(self) -> dict[str, str]:
        """Return the field error as it appears in a problem+json body."""
        return {"pointer": self.pointer, "detail": self.message, "location": self.location}


class BadRequest(DeskpoolError):
    """The request cannot be read at all (malformed JSON, a bad cursor)."""

    status = 400
    code = "bad_request"
    title = "Bad request"


class InvalidCursor(BadRequest):
    """A list was sent a ``cursor`` it did not issue (tampered, from another list, garbage)."""

    code = "invalid_cursor"
    title = "Invalid cursor"

    def __init__(self, detail: str = "The cursor is not one this list issued.") -> None:
        super().__init__(detail)


class InvalidText(BadRequest):
    """A string of the request is not text PostgreSQL and the logs can hold.

    NUL characters, unpaired surrogates and bytes that are not UTF-8 are refused wherever they
    come (path, query, body), before any handler reads them; ``errors`` points to each one.
    """

    code = "invalid_text"
    title = "Invalid text"

    def __init__(self, errors: Sequence[FieldError]) -> None:
        super().__init__(
            "The request holds text that is not valid: NUL characters, unpaired surrogates "
            "and bytes that are not UTF-8 are never accepted."
        )
        self.errors = list(errors)
        self.extra["errors"] = [error.as_dict() for error in self.errors]


class Unauthenticated(DeskpoolError):
    """No valid bearer token came with a protected call (RFC 6750)."""

    status = 401
    code = "unauthenticated"
    title = "Authentication required"

    def __init__(self, detail: str | None = None, *, error: str | None = "invalid_token") -> None:
        challenge = 'Bearer realm="deskpool"'
        if error:
            safe = (detail or self.title).replace('"', "'")
            challenge += f', error="{error}", error_description="{safe}"'
        super().__init__(detail, headers={"WWW-Authenticate": challenge})


class Forbidden(DeskpoolError):
    """The caller is known but lacks the permission the operation declares."""

    status = 403
    code = "forbidden"
    title = "Permission denied"


class NotFound(DeskpoolError):
    """The addressed resource, or route, does not exist."""

    status = 404
    code = "not_found"
    title = "Not found"


_T = TypeVar("_T")


def found(value: _T | None, kind: str, ident: object, field: str = "id") -> _T:
    """``value``, unless it is ``None``: then :class:`NotFound` ("No user has the id ...")."""
    if value is None:
        raise NotFound(f"No {kind} has the {field} {ident}.")
    return value


class MethodNotAllowed(DeskpoolError):
    """The route exists but not with this method."""

    status = 405
    code = "method_not_allowed"
    title = "Method not allowed"


class Conflict(DeskpoolError):
    """The request conflicts with the current state (an illegal transition, a duplicate)."""

    status = 409
    code = "conflict"
    title = "Conflict"


class RequestTimeout(DeskpoolError):
    """The client did not send its request body in time; the connection is closed."""

    status = 408
    code = "request_timeout"
    title = "Request timeout"


class PayloadTooLarge(DeskpoolError):
    """The request body is over the configured limit."""

    status = 413
    code = "payload_too_large"
    title = "Payload too large"


class UnsupportedMediaType(DeskpoolError):
    """The request body is not JSON."""

    status = 415
    code = "unsupported_media_type"
    title = "Unsupported media type"


class ValidationFailed(DeskpoolError):
    """The request is well formed but some fields are invalid."""

    status = 422
    code = "validation_failed"
    title = "Validation failed"

    def __init__(self, errors: Sequence[FieldError], detail: str | None = None) -> None:
        super().__init__(detail or "One or more fields are invalid.")
        self.errors = list(errors)
        self.extra["errors"] = [error.as_dict() for error in self.errors]


class RateLimited(DeskpoolError):
    """The caller sent more requests than its budget allows."""

    status = 429
    code = "rate_limited"
    title = "Too many requests"


class ServiceUnavailable(DeskpoolError):
    """A dependency or a required setting is missing; retrying later may help."""

    status = 503
    code = "service_unavailable"
    title = "Service unavailable"


class DependencyUnavailable(ServiceUnavailable):
    """A store the request needs (PostgreSQL, Redis) was lost or did not answer in time.

    Always answered with ``Retry-After``: the request may be retried as it was sent.
    """

    code = "dependency_unavailable"
    title = "A dependency is unavailable"


class CommitOutcomeUnknown(ServiceUnavailable):
    """The connection to PostgreSQL was lost while a change was being committed.

    The change may or may not have been applied. Sent again with the same ``Idempotency-Key``,
    the request is answered what the committed change answered, or runs again if it was not
    committed: it is never applied twice.
    """

    code = "commit_outcome_unknown"
    title = "The outcome of the change is unknown"


class IdempotencyKeyReused(DeskpoolError):
    """An ``Idempotency-Key`` the caller used for another request (another body or target)."""

    status = 422
    code = "idempotency_key_reused"
    title = "Idempotency key reused"


class AuthNotConfigured(ServiceUnavailable):
    """Protected routes answer this while the OIDC issuer or audience is unset (SPEC §5.1.4)."""

    code = "auth_not_configured"
    title = "Authentication is not configured"


class StartupError(Exception):
    """A process cannot start; the message says why and what to do, with no traceback."""


class ConfigError(StartupError):
    """One or more configuration variables are missing or invalid.

    :param problems: one line per problem, each naming its variable.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"invalid configuration:\n{lines}")


class PluginLoadError(StartupError):
    """An installed plugin could not be imported or registered."""


class PluginNotFound(StartupError):
    """A plugin chosen by a setting or argument is not installed."""


class SchemaOutOfDate(StartupError):
    """The database schema is behind the code; ``deskpool migrate`` brings it up to date."""
