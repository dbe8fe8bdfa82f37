"""Authentication and authorization of protected operations.

The API application holds one :class:`~deskpool.identity.authenticator.Authenticator`, built
from the auth provider that ``AUTH_PROVIDER`` chooses. While the provider lacks its settings
(for OIDC, the issuer and the audience), every protected operation answers 503 (SPEC.md §5.1
rule 4). A caller
without the permission an operation declares gets 403; both 401 and 403 are recorded in the
audit trail.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from aiohttp import web

from deskpool.api.client_address import client_address as forwarded_client_address
from deskpool.audit import record_audit_event
from deskpool.errors import DeskpoolError, Forbidden, Unauthenticated
from deskpool.events import AuditEvent
from deskpool.identity.authenticator import Authenticator
from deskpool.identity.principal import Principal
from deskpool.outage_brokering.claims import journal_audit
from deskpool.outage_brokering.snapshot import PrincipalMemory, keys_of
from deskpool.outages import DATABASE, outage_of

if TYPE_CHECKING:
    from deskpool.api.routes import Operation
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

AUTHENTICATOR_KEY = web.AppKey("authenticator", Authenticator)


def install_authentication(app: web.Application, runtime: Runtime) -> None:
    """Give ``app`` an authenticator, started and closed with the application."""
    factory = runtime.plugins.auth_providers().get(runtime.config["AUTH_PROVIDER"])
    authenticator = Authenticator(runtime, factory(runtime.config))
    # A known user signs in from what the snapshot remembers while the database is away.
    authenticator.memory = PrincipalMemory(runtime)
    app[AUTHENTICATOR_KEY] = authenticator

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await authenticator.start()
        yield
        await authenticator.close()

    app.cleanup_ctx.append(lifecycle)


def client_address(request: web.Request) -> str | None:
    """The client's address (behind a trusted proxy, the one it forwards)."""
    return forwarded_client_address(request)


async def record_denial(
    request: web.Request,
    runtime: Runtime,
    operation: Operation,
    error: DeskpoolError,
    actor: str,
) -> None:
    """Record a refused call (401 or 403) in the audit trail; never fails the request."""
    from deskpool.api.problems import REQUEST_ID_KEY

    event = AuditEvent(
        action="auth.denied",
        actor=actor,
        resource_type=(operation.permission or "").split(":")[0] or "api",
        resource_id=None,
        outcome="denied",
        occurred_at=datetime.now(UTC),
        request_id=request.get(REQUEST_ID_KEY),
        source_address=client_address(request),
        details={
            "operation": operation.operation_id,
            "status": error.status,
            "code": error.code,
            "permission": operation.permission,
        },
    )
    try:
        async with runtime.db.acquire() as connection:
            await record_audit_event(connection, event)
    except Exception as error:  # the refusal stands whether or not it could be recorded
        if outage_of(error) != DATABASE:
            log.exception("could not record a denied call in the audit trail")
            return
        # The database is away: the event waits in the outage journal.
        try:
            await journal_audit(runtime.kv, keys_of(runtime), event)
        except Exception as lost:
            log.warning(
                "could not record a denied call (the database and the %s are unavailable)",
                outage_of(lost) or type(lost).__name__,
            )


async def authenticate(
    request: web.Request,
    runtime: Runtime,
    operation: Operation,
    *,
    throttle: Callable[[], Awaitable[None]] | None = None,
) -> Principal:
    """Authenticate the caller of a protected operation and check its declared permission.

    Operations marked ``entitlement`` let the handler decide when the permission is missing
    (a desktop user opening a pool they are entitled to).

    :param throttle: counts a refused caller against its address's rate limit before the
        refusal is recorded, so a flood of bad tokens is answered 429 and costs no audit write.
    """
    authenticator = request.app[AUTHENTICATOR_KEY]
    try:
        principal = await authenticator.authenticate(request.headers.get("Authorization"))
    except (Unauthenticated, Forbidden) as error:
        if throttle is not None:
            await throttle()
        await record_denial(request, runtime, operation, error, "anonymous")
        raise
    permission = operation.permission
    if permission is not None and not operation.entitlement and not principal.may(permission):
        refusal = Forbidden(f"This operation requires the permission {permission}.")
        await record_denial(request, runtime, operation, refusal, principal.id)
        raise refusal
    return principal
