"""Who makes a change: the signed-in caller of an API call, or the platform itself.

Services receive an :class:`Actor` with every change. It names the actor in the audit trail
(through :meth:`Actor.record`, the one way an event of a change is written) and, for a signed-in
caller, carries the :class:`~deskpool.identity.principal.Principal` whose permissions the
services check (the escalation rule of :mod:`deskpool.identity.service`).

An actor without a principal is the platform acting on the operator's own instructions: the
bootstrap settings read at startup (``system:bootstrap``) or the break-glass command run with
database access (``break-glass:cli``). Those are not callers; no permission limits them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import asyncpg

from deskpool.audit import record_audit_event
from deskpool.events import AuditEvent, Outcome

if TYPE_CHECKING:
    # A type only: identity's services record their changes through the actor, so the actor
    # (a layer below identity, see tests/unit/test_layers.py) never imports identity at run time.
    from deskpool.identity.principal import Principal

#: The actor of changes the bootstrap settings make at startup.
BOOTSTRAP = "system:bootstrap"
#: The actor of the break-glass command (``deskpool admin grant``).
BREAK_GLASS = "break-glass:cli"


@dataclass(frozen=True)
class Actor:
    """Who asks for a change, and from where.

    :param name: the audit trail's actor: a user id, or ``system:<what>``/``break-glass:cli``.
    :param principal: the signed-in caller; ``None`` for the platform acting on the operator's
        configuration or command line.
    :param request_id: the API request that caused the change, if any.
    :param source_address: the client's address, if any.
    """

    name: str
    principal: Principal | None = None
    request_id: str | None = None
    source_address: str | None = None

    @classmethod
    def of_principal(
        cls,
        principal: Principal | None,
        *,
        request_id: str | None = None,
        source_address: str | None = None,
    ) -> Actor:
        """The actor of an API call (``anonymous`` on a public operation)."""
        name = principal.id if principal is not None else "anonymous"
        return cls(name, principal, request_id, source_address)

    @classmethod
    def system(cls, name: str) -> Actor:
        """The platform acting on the operator's instructions (``BOOTSTRAP``, ``BREAK_GLASS``)."""
        return cls(name)

    def audit_event(
        self,
        action: str,
        resource_type: str,
        resource_id: str | None,
        details: dict[str, Any] | None = None,
        outcome: Outcome = "success",
        occurred_at: datetime | None = None,
    ) -> AuditEvent:
        """An audit event of this actor (at ``occurred_at``, by default this process's clock)."""
        return AuditEvent(
            action=action,
            actor=self.name,
            resource_type=resource_type,
            resource_id=resource_id,
            outcome=outcome,
            occurred_at=occurred_at or datetime.now(UTC),
            request_id=self.request_id,
            source_address=self.source_address,
            details=dict(details or {}),
        )

    async def record(
        self,
        connection: asyncpg.Connection,
        action: str,
        resource_type: str,
        resource_id: str | None,
        details: dict[str, Any] | None = None,
        outcome: Outcome = "success",
        occurred_at: datetime | None = None,
    ) -> None:
        """Record :meth:`audit_event` on ``connection``, in the transaction of the change."""
        await record_audit_event(
            connection,
            self.audit_event(action, resource_type, resource_id, details, outcome, occurred_at),
        )
