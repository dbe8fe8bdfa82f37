"""Start on connect, on the worker's side: hand a started desktop over, end starts that failed.

Here, with the desktop jobs that call it (:mod:`deskpool.provisioning.recorder`), above sessions
and revocation, whose logons and access it records and asks; the session check runs
:func:`end_stale_starts` as the handler the worker passes it
(:func:`deskpool.sessions.maintenance.check_sessions`).

The open itself (reserving a powered-off desktop to the user, enqueuing its power-on and
answering a pending connection) is a session use case:
:func:`deskpool.sessions.opening.open_pool_desktop` and
:func:`~deskpool.sessions.service.reconnect_desktop` use :mod:`deskpool.starts.model` and
:mod:`deskpool.starts.store` in their transaction. Here:

- :func:`hand_over`, in the transaction of the job that made the desktop ready: the desktop
  goes to its user (``in_use``) and the logon records ``powered_on``;
- :func:`end_start`, when the desktop failed on its way: the logon records why;
- :func:`end_stale_starts`, the session check's sweep: starts whose desktop failed, was
  deleted or given to someone else, or that the user never connected to.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg

from deskpool.audit import record_audit_event
from deskpool.desktops import store as store_desktops
from deskpool.desktops.states import Allocated
from deskpool.events import AuditEvent
from deskpool.identity.access import holding_of
from deskpool.jobs.periodic import each_alone
from deskpool.pools.model import Desktop, DesktopState, Pool
from deskpool.runtime import Runtime
from deskpool.sessions import logon_timing
from deskpool.sessions import store_logons as session_store_logons
from deskpool.sessions.logons import LogonPhase
from deskpool.sessions.start_cancel import cancel_start
from deskpool.sessions.tunnel import SessionEndReason
from deskpool.starts import store
from deskpool.starts.store import StaleStart

log = logging.getLogger(__name__)

#: Who hands a started desktop over, in the audit trail.
STARTS_ACTOR = "system:starts"

#: The logon's failure reason when its desktop failed on the way (or was deleted).
START_FAILED = "desktop_start_failed"
#: The logon's failure reason when the user never connected to the desktop started for him.
START_ABANDONED = "start_abandoned"


def _starts_audit(
    action: str, resource_type: str, resource_id: str | None, details: dict[str, Any]
) -> AuditEvent:
    return AuditEvent(
        action=action,
        actor=STARTS_ACTOR,
        resource_type=resource_type,
        resource_id=resource_id,
        outcome="success",
        occurred_at=datetime.now(UTC),
        details=details,
    )


async def hand_over(
    runtime: Runtime, connection: asyncpg.Connection, desktop: Desktop, pool: Pool
) -> Desktop:
    """Give a desktop that just became ready to the user it was started for, if any.

    Called in the transaction that recorded ``ready``, so nobody sees the desktop ready and
    free in between. The logon waiting for it records ``powered_on``. A user who no longer may
    use the pool's desktops is not handed it: the start is cancelled
    (:func:`deskpool.sessions.start_cancel.cancel_start`).

    :returns: the desktop after (``in_use``), or as it was when no start waits for it.
    """
    user = desktop.assigned_user
    if desktop.state is not DesktopState.READY or user is None:
        return desktop
    start = await store.start_of(connection, desktop.id, for_update=True)
    if start is None or str(start.user_id) != user or start.powered_on_at is not None:
        return desktop
    # Access is read again (shared lock: a revocation committing now is seen, or waits): a
    # start whose user lost it since is cancelled, not handed over.
    if not (await holding_of(connection, start.user_id)).keeps_desktop(pool.id):
        cancelled = await cancel_start(
            connection, desktop.id, str(SessionEndReason.ACCESS_REVOKED), _starts_audit
        )
        return cancelled or desktop
    after = await store_desktops.apply_event(connection, desktop.id, Allocated(user), pool=pool)
    await store.mark_powered_on(connection, desktop.id)
    if start.logon_id is not None:
        await logon_timing.mark_phase(runtime, connection, start.logon_id, LogonPhase.POWERED_ON)
    await record_audit_event(
        connection,
        AuditEvent(
            action="desktop.allocate",
            actor=STARTS_ACTOR,
            resource_type="desktops",
            resource_id=str(desktop.id),
            outcome="success",
            occurred_at=datetime.now(UTC),
            details={"pool_id": str(pool.id), "user_id": user, "start_on_connect": True},
        ),
    )
    return after


async def end_start(connection: asyncpg.Connection, desktop_id: uuid.UUID, reason: str) -> bool:
    """Forget the start of ``desktop_id``; its logon (if still waiting) failed for ``reason``.

    :returns: whether there was a start.
    """
    start = await store.remove_start(connection, desktop_id)
    if start is None:
        return False
    if start.logon_id is not None:
        await session_store_logons.fail_logon(connection, start.logon_id, reason)
    return True


def stale_reason(stale: StaleStart) -> str:
    """Why a stale start ended: its desktop failed or went, or its user never connected."""
    if stale.start.powered_on_at is not None and stale.desktop_state not in (None, "failed"):
        return START_ABANDONED
    return START_FAILED


async def end_stale_starts(runtime: Runtime) -> int:
    """End the starts no desktop is on its way to or waiting in for its user; return how many.

    Each start is ended alone: one that fails is one warning line, and the others go on.
    """

    async def end_one(stale: store.StaleStart) -> bool:
        async with runtime.db.acquire() as connection, connection.transaction():
            current = await store.start_of(connection, stale.start.desktop_id, for_update=True)
            if current is None or current.logon_id != stale.start.logon_id:
                return False  # gone, or started again since it was read
            await end_start(connection, stale.start.desktop_id, stale_reason(stale))
        log.info(
            "the start of desktop %s for user %s ended: %s",
            stale.start.desktop_id,
            stale.start.user_id,
            stale_reason(stale),
        )
        return True

    outcome = await each_alone(
        "session_check",
        await store.stale_starts(runtime.db),
        end_one,
        lambda stale: f"ending the start of desktop {stale.start.desktop_id}",
    )
    return sum(outcome.done)
