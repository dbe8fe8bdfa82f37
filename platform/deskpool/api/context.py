"""What a handler receives: the validated request of one API call."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import asyncpg
from aiohttp import web

from deskpool.api.problems import REQUEST_ID_KEY
from deskpool.audit import record_audit_event
from deskpool.events import AuditEvent, Outcome

if TYPE_CHECKING:
    from deskpool.api.routes import Operation
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
    principal: Any = None

    def path_param(self, name: str) -> str:
        """A path parameter of the matched route."""
        return self.request.match_info[name]

    def audit_event(
        self,
        action: str,
        resource_type: str,
        resource_id: str | None,
        details: dict[str, Any] | None = None,
        outcome: Outcome = "success",
    ) -> AuditEvent:
        """An audit event of this call, by its caller, with its request id and address."""
        actor = getattr(self.principal, "id", None) or "anonymous"
        return AuditEvent(
            action=action,
            actor=str(actor),
            resource_type=resource_type,
            resource_id=resource_id,
            outcome=outcome,
            occurred_at=datetime.now(UTC),
            request_id=self.request_id or None,
            source_address=self.request.remote,
            details=dict(details or {}),
        )

    async def record_audit(
        self,
        connection: asyncpg.Connection,
        action: str,
        resource_type: str,
        resource_id: str | None,
        details: dict[str, Any] | None = None,
        outcome: Outcome = "success",
    ) -> None:
        """Record :meth:`audit_event` on ``connection``, in the transaction of the change."""
        await record_audit_event(
            connection, self.audit_event(action, resource_type, resource_id, details, outcome)
        )

    @property
    def request_id(self) -> str:
        """The request id (also in the ``X-Request-Id`` response header)."""
        return str(self.request.get(REQUEST_ID_KEY, ""))
