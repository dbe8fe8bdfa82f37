"""What the gateway reports of its tunnels' transfers, and the client policies it follows.

Each clipboard transfer, file, print job and refused stream the gateway saw
(:class:`~deskpool.client_policy.model.Transfer`) is an audit event of its session,
``session.transfer`` (outcome ``success`` when allowed, ``denied`` when refused or cut), with
the direction, sizes, file name, mimetype and SHA-256: never the content. The session's page
lists them (``GET /api/v1/sessions/{id}/transfers``).

The gateway reads its open tunnels' pools' client policies every second
(:func:`client_policies`): a change reaches an open tunnel within 2 s, without a reconnect.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from deskpool.audit import record_audit_event
from deskpool.audit_query import list_audit_events
from deskpool.client_policy.model import ClientPolicy, Transfer
from deskpool.db.rows import Db
from deskpool.events import AuditEvent
from deskpool.runtime import Runtime
from deskpool.sessions import store, store_policies
from deskpool.sessions.service import get_session

__all__ = ["TRANSFER_ACTION", "client_policies", "record_transfers", "session_transfers"]

#: The audit action of a transfer.
TRANSFER_ACTION = "session.transfer"


async def client_policies(
    db: Db, pool_ids: Sequence[uuid.UUID]
) -> Mapping[uuid.UUID, ClientPolicy]:
    """The client policy of each of ``pool_ids`` now (the default for a pool with none)."""
    policies = await store_policies.policies_of(db, pool_ids)
    return {pool_id: policy.client for pool_id, policy in policies.items()}


async def record_transfers(
    runtime: Runtime, session_id: uuid.UUID, transfers: Sequence[Transfer]
) -> None:
    """Audit ``transfers`` of the session ``session_id`` (as its user), in one transaction."""
    if not transfers:
        return
    async with runtime.db.acquire() as connection, connection.transaction():
        session = await store.get_session(connection, session_id)
        if session is None:
            return
        for transfer in transfers:
            await record_audit_event(
                connection,
                AuditEvent(
                    action=TRANSFER_ACTION,
                    actor=str(session.user_id),
                    resource_type="sessions",
                    resource_id=str(session_id),
                    outcome="success" if transfer.outcome == "allowed" else "denied",
                    occurred_at=transfer.at or datetime.now(UTC),
                    details={
                        **transfer.as_details(),
                        "user_id": str(session.user_id),
                        "pool_id": str(session.pool_id),
                        "desktop_id": str(session.desktop_id),
                    },
                ),
            )


#: The most transfers a session's page lists (the newest).
TRANSFERS_SHOWN = 500


async def session_transfers(runtime: Runtime, session_id: uuid.UUID) -> list[dict[str, Any]]:
    """The transfers audited on a session, oldest first (at most :data:`TRANSFERS_SHOWN`).

    :raises NotFound: no session has the id.
    """
    await get_session(runtime, session_id)
    events = await list_audit_events(
        runtime,
        before=None,
        filters={
            "action": TRANSFER_ACTION,
            "resource_type": "sessions",
            "resource_id": str(session_id),
        },
        limit=TRANSFERS_SHOWN,
    )
    return [{**event["details"], "at": event["occurred_at"]} for event in reversed(events)]
