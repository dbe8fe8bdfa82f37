"""Gateways lost: their lease ran out, so their open sessions end as ``gateway_lost``.

:func:`end_lost_gateways` is called by every gateway's heartbeat
(:meth:`deskpool.sessions.broker.PlatformSessionBroker.heartbeat`) and by the worker's session
check (:mod:`deskpool.sessions.maintenance`), so a gateway killed with SIGKILL leaves no
session open for long. A lease that ran out while nobody could reach the database restarts
instead (:mod:`deskpool.sessions.lease_clock`); a session ended here while its gateway was in
fact relaying it is reopened by that gateway (:mod:`deskpool.sessions.reassert`).
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

import asyncpg

from deskpool.audit import record_audit_event
from deskpool.errors import error_text
from deskpool.events import AuditEvent
from deskpool.recordings import store as recordings_store
from deskpool.runtime import Runtime
from deskpool.sessions import lease_clock, store, store_logons
from deskpool.sessions.model import SessionRecord
from deskpool.sessions.service import SYSTEM_ACTOR, close_desktop_session, log_off
from deskpool.sessions.tunnel import SessionEndReason

log = logging.getLogger(__name__)


def session_end_event(session: SessionRecord) -> AuditEvent:
    """``session.end`` of a session of a lost gateway."""
    return AuditEvent(
        action="session.end",
        actor=SYSTEM_ACTOR,
        resource_type="sessions",
        resource_id=str(session.id),
        outcome="success",
        occurred_at=datetime.now(UTC),
        details={
            "desktop_id": str(session.desktop_id),
            "pool_id": str(session.pool_id),
            "user_id": str(session.user_id),
            "gateway_id": session.gateway_id,
            "read_only": session.read_only,
            "reason": str(SessionEndReason.GATEWAY_LOST),
        },
    )


async def end_lost_gateways(runtime: Runtime) -> int:
    """End the sessions of gateways whose lease expired (``gateway_lost``); return how many.

    Each lost gateway is claimed with ``FOR UPDATE SKIP LOCKED``, so concurrent callers (every
    gateway's heartbeat, the worker's session task) never end the same sessions twice. A lease
    that ran out while nobody could reach the database restarts instead (:mod:`lease_clock`).
    """
    ended = 0
    async with runtime.db.acquire() as connection, connection.transaction():
        await lease_clock.restart_silenced_leases(connection)
        lost = await store.claim_lost_gateways(connection)
        lost += [g for g in await store.orphaned_gateways(connection) if g not in lost]
        for gateway_id in lost:
            for session_id in await store.open_session_ids_of_gateway(connection, gateway_id):
                try:  # each session alone: its savepoint rolls back, the others go on
                    ended += await _end_in(connection, runtime, session_id)
                except Exception as error:
                    log.warning(
                        "ending session %s of lost gateway %s failed (%s); the others go on",
                        session_id,
                        gateway_id,
                        error_text(error),
                    )
            await store.drop_lease(connection, gateway_id)
    if lost:
        log.warning("gateway(s) %s lost their lease: %d session(s) ended", ", ".join(lost), ended)
    return ended


async def _end_in(connection: asyncpg.Connection, runtime: Runtime, session_id: uuid.UUID) -> bool:
    """End a session of a lost gateway inside the caller's transaction."""
    async with connection.transaction():
        ended = await store.end_session(connection, session_id, str(SessionEndReason.GATEWAY_LOST))
        if ended is None:
            return False
        await store_logons.fail_session_logon(
            connection, session_id, str(SessionEndReason.GATEWAY_LOST)
        )
        await record_audit_event(
            connection,
            session_end_event(ended),
        )
        await recordings_store.finish_session_recording(connection, session_id)
        if not ended.read_only:
            await close_desktop_session(connection, ended.desktop_id)
            if ended.disconnect_reason == SessionEndReason.ACCESS_REVOKED:
                # The gateway was lost before it closed a tunnel whose access was taken away:
                # its user is logged off all the same.
                await log_off(connection, ended.desktop_id, "access revoked")
    return True
