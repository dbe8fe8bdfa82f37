"""A gateway re-asserts the sessions it relays: a session ended as lost by mistake reopens.

A session ends as ``gateway_lost`` when its gateway's lease ran out
(:func:`deskpool.sessions.lost_gateways.end_lost_gateways`). The gateway is the one that knows
whether it still relays the tunnel: every heartbeat carries the ids of the sessions it
relays, and :func:`reassert_sessions` reopens each of them that the database says ended
``gateway_lost``:

- the session record is open again (``ended_at`` and ``end_reason`` cleared), audited
  ``session.reopen`` with the gateway and how long it was thought ended;
- its desktop is ``in_session`` again through the desktop state machine (``SessionOpened``,
  which takes a desktop ``in_use``), provided it is still ``in_use`` by the session's user
  and the user still may hold it (a user disabled meanwhile keeps nothing).

A session that cannot be reopened (its desktop was logged off, rebuilt, deleted or given to
someone else, or its user lost access) is handed back to the gateway, which closes the tunnel
(``SESSION_CLOSED``, reason ``gateway_lost``): the record stays as it ended. A desktop whose
last session ended ``gateway_lost`` is not logged off before
:data:`~deskpool.sessions.model.GATEWAY_LOST_GRACE` has passed
(:func:`~deskpool.sessions.model.logoff_due`), so a gateway that is alive re-asserts first.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection
from datetime import UTC, datetime

import asyncpg

from deskpool.audit import record_audit_event
from deskpool.desktops import store as store_desktops
from deskpool.desktops.states import SessionOpened
from deskpool.errors import error_text
from deskpool.events import AuditEvent
from deskpool.identity.access import holding_of
from deskpool.live.publishers import publish, session_event
from deskpool.pools.model import DesktopState
from deskpool.runtime import Runtime
from deskpool.sessions import store
from deskpool.sessions.model import SessionRecord
from deskpool.sessions.service import SYSTEM_ACTOR
from deskpool.sessions.tunnel import DisconnectRequest, SessionEndReason

log = logging.getLogger(__name__)

LOST = str(SessionEndReason.GATEWAY_LOST)


async def reassert_sessions(
    runtime: Runtime, gateway_id: str, relaying: Collection[uuid.UUID]
) -> list[DisconnectRequest]:
    """Reopen the sessions ``gateway_id`` relays that ended as lost; return those to close."""
    if not relaying:
        return []
    rows = await runtime.db.fetch(
        "SELECT id FROM desktop_sessions"
        " WHERE id = ANY($1::uuid[]) AND gateway_id = $2 AND end_reason = $3",
        list(relaying),
        gateway_id,
        LOST,
    )
    closing: list[DisconnectRequest] = []
    for row in rows:
        try:  # each session alone: one that fails is tried again by the next heartbeat
            reopened = await _reopen(runtime, row["id"])
        except Exception as error:
            log.warning(
                "reopening session %s of gateway %s failed (%s); the others go on",
                row["id"],
                gateway_id,
                error_text(error),
            )
            continue
        if reopened is None:
            log.warning(
                "session %s of gateway %s ended as lost and cannot be reopened (its desktop "
                "is no longer its user's): the gateway closes it",
                row["id"],
                gateway_id,
            )
            closing.append(DisconnectRequest(row["id"], SessionEndReason.GATEWAY_LOST))
        elif reopened.is_open:
            log.warning(
                "session %s ended as lost while gateway %s still relayed it: reopened",
                row["id"],
                gateway_id,
            )
            await publish(runtime=runtime, event=session_event("opened", reopened))
    return closing


async def _reopen(runtime: Runtime, session_id: uuid.UUID) -> SessionRecord | None:
    """The session reopened (or as it is, if no longer ended as lost); ``None``: cannot be."""
    async with runtime.db.acquire() as connection, connection.transaction():
        session = await store.get_session(connection, session_id, for_update=True)
        if session is None:
            return None
        if session.end_reason != LOST:
            return session
        if not await _may_reopen(connection, session):
            return None
        lost_at = session.ended_at
        await connection.execute(
            "UPDATE desktop_sessions SET ended_at = NULL, end_reason = NULL WHERE id = $1",
            session_id,
        )
        if not session.read_only:
            desktop = await store_desktops.get_desktop(connection, session.desktop_id)
            if desktop is not None and not desktop.in_session:
                await store_desktops.apply_event(connection, session.desktop_id, SessionOpened())
        await record_audit_event(connection, _reopened(session, lost_at))
        return await store.get_session(connection, session_id)


async def _may_reopen(connection: asyncpg.Connection, session: SessionRecord) -> bool:
    """Whether the session's desktop is still its user's, and the user may still hold it."""
    holding = await holding_of(connection, session.user_id)
    if not holding.keeps_session(session.pool_id, read_only=session.read_only):
        return False
    if session.read_only:
        watched = (
            None
            if session.shadow_of is None
            else await store.get_session(connection, session.shadow_of)
        )
        return watched is not None and watched.ended_at is None
    desktop = await store_desktops.get_desktop(connection, session.desktop_id, for_update=True)
    return (
        desktop is not None
        and desktop.state is DesktopState.IN_USE
        and desktop.assigned_user == str(session.user_id)
    )


def _reopened(session: SessionRecord, lost_at: datetime | None) -> AuditEvent:
    now = datetime.now(UTC)
    return AuditEvent(
        action="session.reopen",
        actor=SYSTEM_ACTOR,
        resource_type="sessions",
        resource_id=str(session.id),
        outcome="success",
        occurred_at=now,
        details={
            "desktop_id": str(session.desktop_id),
            "pool_id": str(session.pool_id),
            "user_id": str(session.user_id),
            "gateway_id": session.gateway_id,
            "read_only": session.read_only,
            "reason": "gateway still relaying",
            "ended_for_seconds": (
                None if lost_at is None else round((now - lost_at).total_seconds(), 3)
            ),
        },
    )
