"""How a session ends: its record, ``in_session``, ``session.end`` and the pool's rule after it.

:func:`end_session` is what a gateway reports when a tunnel closes
(:meth:`deskpool.sessions.broker.PlatformSessionBroker.session_ended`), and what ends the
sessions of a lost gateway or an outage's replayed end. :func:`session_audit_event` is the
audit event of any act of a session (its start, its end).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from deskpool.audit import record_audit_event
from deskpool.events import AuditEvent
from deskpool.live.publishers import publish, session_event
from deskpool.runtime import Runtime
from deskpool.sessions import store, store_logons, store_policies
from deskpool.sessions.model import SessionRecord, logs_off_at_end
from deskpool.sessions.service import (
    SYSTEM_ACTOR,
    close_desktop_session,
    log_off,
    publish_disconnect,
)
from deskpool.sessions.tunnel import SessionEndReason, TunnelCounters
from deskpool.sessions.watchers import publish_watch


def session_audit_event(
    action: str, actor: str, session_id: uuid.UUID, session: Mapping[str, Any], **details: Any
) -> AuditEvent:
    """The audit event of a session: ``session`` holds its columns (a record's, or to insert)."""
    return AuditEvent(
        action=action,
        actor=actor,
        resource_type="sessions",
        resource_id=str(session_id),
        outcome="success",
        occurred_at=datetime.now(UTC),
        details={
            "desktop_id": str(session["desktop_id"]),
            "pool_id": str(session["pool_id"]),
            "user_id": str(session["user_id"]),
            "gateway_id": session["gateway_id"],
            "read_only": session["read_only"],
            **details,
        },
    )


async def end_session(
    runtime: Runtime,
    session_id: uuid.UUID,
    reason: SessionEndReason,
    counters: TunnelCounters | None,
) -> SessionRecord | None:
    """End an open session: record, ``in_session``, audit, after-disconnect policy.

    A session an administrator or a policy asked to close records the reason it was asked
    for. Read-only viewers of the session are asked to close too. Idempotent: ``None`` when
    the session is unknown or has ended already.
    """
    async with runtime.db.acquire() as connection, connection.transaction():
        current = await store.get_session(connection, session_id, for_update=True)
        if current is None or not current.is_open:
            return None
        recorded = reason
        if current.disconnect_reason == SessionEndReason.ACCESS_REVOKED:
            # However the tunnel ended once access was taken away, its user is logged off.
            recorded = SessionEndReason.ACCESS_REVOKED
        elif reason is SessionEndReason.ADMIN_DISCONNECT and current.disconnect_reason:
            try:
                recorded = SessionEndReason(current.disconnect_reason)
            except ValueError:
                recorded = reason
        ended = await store.end_session(connection, session_id, str(recorded), counters)
        assert ended is not None
        await store_logons.fail_session_logon(connection, session_id, str(recorded))
        actor = str(ended.user_id) if recorded is SessionEndReason.CLIENT_CLOSED else SYSTEM_ACTOR
        await record_audit_event(
            connection,
            session_audit_event(
                "session.end",
                actor,
                ended.id,
                dataclasses.asdict(ended),
                reason=str(recorded),
                bytes_to_desktop=ended.bytes_to_desktop,
                bytes_to_browser=ended.bytes_to_browser,
                duration_seconds=round(
                    ((ended.ended_at or ended.started_at) - ended.started_at).total_seconds(), 3
                ),
            ),
        )
        shadows: list[uuid.UUID] = []
        if not ended.read_only:
            await close_desktop_session(connection, ended.desktop_id)
            shadows = await store.open_shadows_of(connection, ended.id)
            policy = await store_policies.get_policy(connection, ended.pool_id)
            if logs_off_at_end(policy, recorded):
                await log_off(connection, ended.desktop_id, f"session ended ({recorded})")
        watching = [
            await store.request_disconnect(connection, s, "desktop_closed") for s in shadows
        ]
    for viewer in watching:
        if viewer is not None:
            await publish_disconnect(runtime, viewer)
    await publish(runtime=runtime, event=session_event("ended", ended))
    if ended.shadow_of is not None:
        await publish_watch(runtime, ended.shadow_of)
    return ended
