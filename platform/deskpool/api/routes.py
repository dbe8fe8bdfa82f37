"""The route table: every API operation declared once.

An :class:`Operation` names its method, path, permission, request schemas, response schemas,
summary and tags. The same declaration registers the aiohttp route, validates the request
(webargs, from the marshmallow schemas), checks the permission, dumps the response through its
schema, and writes the operation into the OpenAPI document: the document and the behaviour
cannot drift.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.typedefs import Handler as AiohttpHandler
from marshmallow import Schema

if TYPE_CHECKING:
    from deskpool.api.context import Call

#: A handler receives the validated call and returns data (dumped through the success schema),
#: a :class:`Reply`, or an aiohttp response.
Handler = Callable[["Call"], Awaitable[Any]]

_PERMISSION = re.compile(r"^[a-z_]+:(read|manage|admin)$")


@dataclass(frozen=True)
class Reply:
    """Data with an explicit status and headers."""

    data: Any
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ResponseSpec:
    """One documented response of an operation."""

    description: str
    schema: type[Schema] | Schema | None = None
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Further media types the response comes in (by ``Accept``), as text.
    also: tuple[str, ...] = ()


@dataclass(frozen=True)
class Operation:
    """One API operation, declared once.

    :param permission: ``<resource>:read``, ``<resource>:manage``, ``platform:admin``, or
        ``None`` for a public operation.
    :param body: schema of the JSON request body, if any.
    :param body_optional: the body may be left out (a request without one reads as ``{}``);
        for an operation that had none, given an optional field since.
    :param query: schema of the query parameters, if any.
    :param responses: the success responses by status (problem responses are added for every
        operation from what it can fail with).
    :param paginated: the operation is a cursor-paginated list (``limit`` and ``cursor``).
    :param entitlement: the permission is not required when the caller is entitled to the
        addressed object instead (desktop users opening a pool they are entitled to).
    :param authenticated: with no permission, the operation still needs a valid token (the
        caller's own information, ``/api/v1/me``).
    """

    method: str
    path: str
    handler: Handler
    operation_id: str
    summary: str
    tags: tuple[str, ...]
    permission: str | None
    responses: Mapping[int, ResponseSpec]
    body: type[Schema] | None = None
    body_optional: bool = False
    query: type[Schema] | None = None
    description: str = ""
    paginated: bool = False
    entitlement: bool = False
    authenticated: bool = False

    @property
    def public(self) -> bool:
        """Whether the operation needs no token."""
        return self.permission is None and not self.authenticated

    @property
    def success_status(self) -> int:
        """The first 2xx status declared."""
        return min(status for status in self.responses if 200 <= status < 300)


@dataclass(frozen=True)
class Authentication:
    """What the document's introduction says about authenticating, in the auth provider's words.

    Markdown as it stands in the document (line breaks kept); the platform's sentence on
    permissions goes between the two parts.

    :param credentials: what a protected operation's caller sends, and what is checked.
    :param availability: when protected operations are unavailable, and how ``/docs`` signs a
        person in.
    """

    credentials: str
    availability: str


class RouteTable:
    """Collects operations (built-in and from plugins) and registers them on an application.

    A resource module declares its handlers at module level on a table of its own
    (``ROUTES = RouteTable()``, ``@ROUTES.route(...)``), which the application's table takes
    in with :meth:`include`.
    """

    def __init__(self) -> None:
        self._operations: dict[str, Operation] = {}
        self._security_schemes: dict[str, Mapping[str, Any]] = {}
        #: What the auth provider says about authenticating (:meth:`describe_authentication`).
        self.authentication: Authentication | None = None

    def add(self, operation: Operation) -> Operation:
        """Declare ``operation``; its id and its method+path must be unique."""
        if operation.operation_id in self._operations:
            raise ValueError(f"operation id {operation.operation_id!r} is declared twice")
        key = (operation.method.upper(), operation.path)
        for other in self._operations.values():
            if (other.method.upper(), other.path) == key:
                raise ValueError(f"{operation.method} {operation.path} is declared twice")
        if operation.permission is not None and not _PERMISSION.match(operation.permission):
            raise ValueError(f"invalid permission {operation.permission!r}")
        if not any(200 <= status < 300 for status in operation.responses):
            raise ValueError(f"{operation.operation_id} declares no success response")
        self._operations[operation.operation_id] = operation
        return operation

    def route(
        self,
        method: str,
        path: str,
        *,
        summary: str,
        tags: tuple[str, ...],
        permission: str | None,
        responses: Mapping[int, ResponseSpec],
        body: type[Schema] | None = None,
        body_optional: bool = False,
        query: type[Schema] | None = None,
        description: str = "",
        paginated: bool = False,
        entitlement: bool = False,
        authenticated: bool = False,
        operation_id: str | None = None,
    ) -> Callable[[Handler], Handler]:
        """Decorator form of :meth:`add`; the operation id defaults to the handler's name."""

        def decorate(handler: Handler) -> Handler:
            self.add(
                Operation(
                    method=method.upper(),
                    path=path,
                    handler=handler,
                    operation_id=operation_id or _camel(handler.__name__),
                    summary=summary,
                    tags=tags,
                    permission=permission,
                    responses=responses,
                    body=body,
                    body_optional=body_optional,
                    query=query,
                    description=description,
                    paginated=paginated,
                    entitlement=entitlement,
                    authenticated=authenticated,
                )
            )
            return handler

        return decorate

    def include(self, other: RouteTable) -> None:
        """Declare every operation of ``other`` (a resource module's own table) here too."""
        for operation in other.operations():
            self.add(operation)
        for name, scheme in other.security_schemes().items():
            self.security_scheme(name, scheme)
        if other.authentication is not None:
            self.describe_authentication(other.authentication)

    def security_scheme(self, name: str, scheme: Mapping[str, Any]) -> None:
        """Declare a way callers authenticate: an OpenAPI security scheme object, by name.

        The auth provider plugin declares its own (through ``deskpool_register_routes``); a
        protected operation accepts any of them, in the order they were declared.
        """
        if name in self._security_schemes:
            raise ValueError(f"security scheme {name!r} is declared twice")
        self._security_schemes[name] = scheme

    def describe_authentication(self, authentication: Authentication) -> None:
        """Say, in the document's introduction, how callers authenticate (the auth provider)."""
        if self.authentication is not None:
            raise ValueError("authentication is described twice")
        self.authentication = authentication

    def security_schemes(self) -> dict[str, Mapping[str, Any]]:
        """The declared security schemes, by name, in the order they were declared."""
        return dict(self._security_schemes)

    def operations(self) -> list[Operation]:
        """Every operation, sorted by path then method (the document's order)."""
        return sorted(self._operations.values(), key=lambda op: (op.path, op.method))

    def register(self, app: web.Application, wrap: Callable[[Operation], AiohttpHandler]) -> None:
        """Add every operation to ``app``'s router, each handler wrapped by ``wrap``."""
        for operation in self.operations():
            if operation.method == "GET":
                # HEAD is answered wherever GET is (RFC 9110 §9.3.2).
                app.router.add_get(
                    operation.path, wrap(operation), name=operation.operation_id, allow_head=True
                )
            else:
                app.router.add_route(
                    operation.method, operation.path, wrap(operation), name=operation.operation_id
                )


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
