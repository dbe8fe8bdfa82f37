"""Cross-origin requests from the browser origins in ``API_CORS_ALLOWED_ORIGINS``.

Origins are matched exactly (scheme, host and port, as the browser sends them in ``Origin``).
The single value ``*`` allows every origin, but then without credentials: the response says
``Access-Control-Allow-Origin: *`` and never ``Access-Control-Allow-Credentials``, as the Fetch
standard requires. With exact origins the allowed origin is echoed, with credentials allowed and
``Vary: Origin`` so caches keep one answer per origin.

A preflight (``OPTIONS`` with ``Access-Control-Request-Method``) from an allowed origin is
answered 204 here, before routing; from any other origin it is a 403 problem. Actual requests
from other origins are served as usual but without CORS headers, so the browser withholds the
response from the calling page. The middleware sits outside the problem middleware, so error
responses carry the same headers as successful ones and a page can read the problem.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from deskpool.api.problems import problem_response
from deskpool.errors import ConfigError, Forbidden

SETTING = "API_CORS_ALLOWED_ORIGINS"

#: Methods a cross-origin page may use.
ALLOWED_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
#: Request headers a cross-origin page may send beyond the CORS-safelisted ones.
ALLOWED_HEADERS = (
    "Authorization",
    "Content-Type",
    "X-Request-Id",
    "If-Match",
    "If-None-Match",
    "Last-Event-ID",
)
#: Response headers a cross-origin page may read beyond the CORS-safelisted ones.
EXPOSED_HEADERS = (
    "X-Request-Id",
    "Location",
    "ETag",
    "Allow",
    "Retry-After",
    "WWW-Authenticate",
    "RateLimit-Limit",
    "RateLimit-Remaining",
    "RateLimit-Reset",
    "RateLimit-Policy",
)
#: How long a browser may reuse a preflight answer, in seconds.
PREFLIGHT_MAX_AGE = 600


def _normalize_origin(value: str) -> str:
    """``scheme://host[:port]`` in lower case, or raise ``ValueError`` saying what is wrong."""
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValueError(f"{value!r} is not an origin (expected scheme://host[:port])")
    if parts.path not in {"", "/"} or parts.query or parts.fragment or parts.username:
        raise ValueError(f"{value!r} is not an origin: it has more than scheme, host and port")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{value!r} has an invalid port") from None
    default_port = {"http": 80, "https": 443}[parts.scheme]
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    suffix = f":{port}" if port is not None and port != default_port else ""
    return f"{parts.scheme}://{host}{suffix}"


@dataclass(frozen=True)
class CorsPolicy:
    """Which browser origins may call the API.

    :param origins: exact allowed origins, normalized.
    :param any_origin: ``*`` was configured: every origin, without credentials.
    """

    origins: frozenset[str] = frozenset()
    any_origin: bool = False

    @classmethod
    def from_setting(cls, values: Sequence[str]) -> CorsPolicy:
        """Build the policy from the parsed ``API_CORS_ALLOWED_ORIGINS`` list.

        :raises ConfigError: an entry is not an origin, or ``*`` is mixed with origins.
        """
        entries = [value.strip() for value in values if value.strip()]
        if "*" in entries:
            if len(entries) > 1:
                raise ConfigError(
                    [f"{SETTING}: `*` allows every origin and cannot be combined with others"]
                )
            return cls(any_origin=True)
        problems = []
        origins = set()
        for entry in entries:
            try:
                origins.add(_normalize_origin(entry))
            except ValueError as error:
                problems.append(f"{SETTING}: {error}")
        if problems:
            raise ConfigError(problems)
        return cls(origins=frozenset(origins))

    @property
    def enabled(self) -> bool:
        """Whether any cross-origin caller is allowed."""
        return self.any_origin or bool(self.origins)

    def allows(self, origin: str) -> bool:
        """Whether a page served from ``origin`` may call the API."""
        if self.any_origin:
            return True
        try:
            return _normalize_origin(origin) in self.origins
        except ValueError:
            return False

    def response_headers(self, origin: str) -> dict[str, str]:
        """The CORS headers of a response to an allowed ``origin``."""
        if self.any_origin:
            return {"Access-Control-Allow-Origin": "*"}
        return {"Access-Control-Allow-Origin": origin, "Access-Control-Allow-Credentials": "true"}


def _is_preflight(request: web.Request) -> bool:
    return (
        request.method == hdrs.METH_OPTIONS
        and hdrs.ORIGIN in request.headers
        and hdrs.ACCESS_CONTROL_REQUEST_METHOD in request.headers
    )


def _add_vary_origin(response: web.StreamResponse) -> None:
    vary = response.headers.get(hdrs.VARY, "")
    names = {part.strip().lower() for part in vary.split(",") if part.strip()}
    if "origin" not in names and "*" not in names:
        response.headers[hdrs.VARY] = f"{vary}, Origin" if vary else "Origin"


def cors_middleware(policy: CorsPolicy) -> Middleware:
    """The middleware that applies ``policy`` to every request."""

    @web.middleware
    async def cors(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not policy.enabled:
            return await handler(request)
        origin = request.headers.get(hdrs.ORIGIN)
        if _is_preflight(request):
            assert origin is not None
            if not policy.allows(origin):
                refused = problem_response(
                    Forbidden(f"The origin {origin} may not call this API ({SETTING})."),
                    request,
                )
                _add_vary_origin(refused)
                return refused
            preflight = web.Response(
                status=204,
                headers={
                    **policy.response_headers(origin),
                    "Access-Control-Allow-Methods": ", ".join(ALLOWED_METHODS),
                    "Access-Control-Allow-Headers": ", ".join(ALLOWED_HEADERS),
                    "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE),
                },
            )
            if not policy.any_origin:
                _add_vary_origin(preflight)
            return preflight
        response = await handler(request)
        if not policy.any_origin:
            _add_vary_origin(response)
        if origin is not None and policy.allows(origin) and not response.prepared:
            response.headers.update(policy.response_headers(origin))
            response.headers["Access-Control-Expose-Headers"] = ", ".join(EXPOSED_HEADERS)
        return response

    return cors


def cors_on_prepare(policy: CorsPolicy) -> Callable[[web.Request, web.StreamResponse], Any]:
    """An ``on_response_prepare`` signal that gives streamed responses their CORS headers.

    A handler that streams (the live event stream) sends its headers before the middleware
    sees the response; this adds the same headers just before they are sent.
    """

    async def add(request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get(hdrs.ORIGIN)
        if not policy.enabled or origin is None or not policy.allows(origin):
            return
        if "Access-Control-Allow-Origin" not in response.headers:
            response.headers.update(policy.response_headers(origin))
            response.headers["Access-Control-Expose-Headers"] = ", ".join(EXPOSED_HEADERS)
            if not policy.any_origin:
                _add_vary_origin(response)

    return add
