"""What a handler receives: the validated request of one API call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import asyncpg
from aiohttp import web

from deskpool.actor import Actor
from deskpool.api.problems import REQUEST_ID_KEY
from deskpool.errors import Unauthenticated
from deskpool.events import AuditEvent, Outcome

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
        """Who makes this call, for the services it calls and the audit trail."""
        return Actor.of_principal(
            self.principal,
            request_id=self.request_id or None,
            source_address=self.request.remote,
        )

    def audit_event(
        self,
        action: str,
        resource_type: str,
        resource_id: str | None,
        details: dict[str, Any] | None = None,
        outcome: Outcome = "success",
    ) -> AuditEvent:
        """An audit event of this call's actor (see :meth:`deskpool.actor.Actor.audit_event`)."""
        return self.actor.audit_event(action, resource_type, resource_id, details, outcome)

    async def record_audit(
        self,
        connection: asyncpg.Connection,
        action: str,
        resource_type: str,
        resource_id: str | None,
        details: dict[str, Any] | None = None,
        outcome: Outcome = "success",
    ) -> None:
        """Record an event of this call's actor on ``connection``, in the change's transaction."""
        await self.actor.record(connection, action, resource_type, resource_id, details, outcome)

    @property
    def request_id(self) -> str:
        """The request id (also in the ``X-Request-Id`` response header)."""
        return str(self.request.get(REQUEST_ID_KEY, ""))
