"""What a handler receives: the validated request of one API call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from deskpool.actor import Actor
from deskpool.api.client_address import client_address
from deskpool.api.problems import REQUEST_ID_KEY
from deskpool.errors import Unauthenticated

if TYPE_CHECKING:
    from deskpool.api.routes import Operation
    from deskpool.identity.principal import Principal
    from deskpool.runtime import Runtime


@dataclass
class Call:
    """One API call after validation and authorization.

    :param request: the aiohttp request.
    :param operation: the operation being served.
    :param runtime: the process runtime (database, key-value store, plugins).
    :param body: the validated JSON body (``{}`` when the operation takes none).
    :param query: the validated query parameters.
    :param principal: the authenticated caller, or ``None`` on public operations.
    """

    request: web.Request
    operation: Operation
    runtime: Runtime
    body: dict[str, Any] = field(default_factory=dict)
    query: dict[str, Any] = field(default_factory=dict)
    principal: Principal | None = None

    @property
    def caller(self) -> Principal:
        """The signed-in caller of a protected operation.

        :raises Unauthenticated: the operation is public, so there is none (a programming
            error in the route table).
        """
        if self.principal is None:
            raise Unauthenticated("This operation has no signed-in caller.")
        return self.principal

    def path_param(self, name: str) -> str:
        """A path parameter of the matched route."""
        return self.request.match_info[name]

    @property
    def actor(self) -> Actor:
        """Who makes this call, for the services it calls and the audit trail.

        The services record their events through it (:meth:`deskpool.actor.Actor.record`).
        """
        return Actor.of_principal(
            self.principal,
            request_id=self.request_id or None,
            source_address=client_address(self.request),
        )

    @property
    def request_id(self) -> str:
        """The request id (also in the ``X-Request-Id`` response header)."""
        return str(self.request.get(REQUEST_ID_KEY, ""))
