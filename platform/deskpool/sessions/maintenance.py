"""The worker's session check: what no gateway is left to do, done once per interval.

Registered by the ``worker`` component as the periodic task ``session_check`` (every
``SESSION_CHECK_INTERVAL``). Each run:

1. ends the sessions of gateways whose lease expired (``gateway_lost``), in case no other
   gateway is left to notice in its heartbeat;
2. asks the gateway of each open session that is past its pool's maximum length or idle
   timeout, or whose desktop is no longer its user's (deleted, reassigned), to close it;
3. logs off desktops whose user disconnected and whose pool's ``logoff_delay`` has passed (a
   non-persistent desktop is then rebuilt before anyone else gets it);
4. records the logons whose token expired unused as failed (``token_expired``), and deletes
   connection tokens that expired more than an hour ago;
5. ends the starts on connect (:mod:`deskpool.starts`) whose desktop failed, was deleted or
   given to someone else, or whose user never connected to it: their logons record why.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from deskpool.jobs.periodic import each_alone
from deskpool.runtime import Runtime
from deskpool.sessions import store, store_logons, store_policies, store_tokens
from deskpool.sessions.lost_gateways import end_lost_gateways
from deskpool.sessions.model import logoff_due, over_limits
from deskpool.sessions.service import log_off, publish_disconnect
from deskpool.sessions.tunnel import SessionEndReason

log = logging.getLogger(__name__)

#: The name of the periodic task, and the setting of its interval.
SESSION_CHECK_TASK = "session_check"
SESSION_CHECK_SETTING = "SESSION_CHECK_INTERVAL"

#: How long expired tokens are kept (for the rejection reason ``expired`` rather than unknown).
EXPIRED_TOKEN_RETENTION = timedelta(hours=1)


#: Ends the starts on connect that will not be handed over (step 5):
#: :func:`deskpool.provisioning.starts.end_stale_starts`, which the worker passes in. Start on
#: connect's worker side sits above sessions in the layer order (``tests/unit/test_layers.py``),
#: so the session check takes it as a handler rather than importing it.
StartSweep = Callable[[Runtime], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class SessionCheck:
    """What one run did."""

    lost_sessions: int
    disconnects_requested: int
    logged_off: int
    tokens_pruned: int


def _end_reason(reason: str | None) -> SessionEndReason | None:
    try:
        return None if reason is None else SessionEndReason(reason)
    except ValueError:
        return None


async def check_sessions(runtime: Runtime, *, sweep_starts: StartSweep) -> SessionCheck:
    """Run the session check once (see the module's description).

    Each session, desktop and start is handled alone (:func:`~deskpool.jobs.periodic.each_alone`):
    one that fails is one warning line, and the others are checked as if it did not exist.
    """
    lost = await end_lost_gateways(runtime)
    db = runtime.db
    now: datetime = await db.fetchval("SELECT now()")

    async def close_if_over(item: store_policies.OpenSession) -> bool:
        session = item.session
        if session.disconnect_requested_at is not None:
            return False
        reason = over_limits(
            item.policy,
            started_at=session.started_at,
            last_activity_at=session.last_activity_at,
            now=now,
        )
        if reason is None and not item.desktop_held:
            reason = SessionEndReason.ADMIN_DISCONNECT
        if reason is None:
            return False
        marked = await store.request_disconnect(db, session.id, str(reason))
        if marked is None:
            return False
        log.info(
            "asking gateway %s to close session %s: %s", session.gateway_id, session.id, reason
        )
        await publish_disconnect(runtime, marked)
        return True

    async def log_off_if_due(desktop: store_policies.DisconnectedDesktop) -> bool:
        due = logoff_due(
            desktop.policy,
            disconnected_since=desktop.disconnected_since,
            last_end_reason=_end_reason(desktop.last_end_reason),
            now=now,
        )
        if not due:
            return False
        async with db.acquire() as connection:
            done = await log_off(
                connection, desktop.desktop_id, "disconnected past the logoff delay"
            )
        return done is not None

    requested = await each_alone(
        SESSION_CHECK_TASK,
        await store_policies.open_sessions(db),
        close_if_over,
        lambda item: f"session {item.session.id}",
    )
    logged_off = await each_alone(
        SESSION_CHECK_TASK,
        await store_policies.disconnected_desktops(db),
        log_off_if_due,
        lambda desktop: f"logging off desktop {desktop.desktop_id}",
    )
    async with db.acquire() as connection:
        # Before the tokens go: a logon whose token expired unused stopped there.
        await store_logons.fail_unused_tokens(connection)
        pruned = await store_tokens.prune_tokens(connection, now - EXPIRED_TOKEN_RETENTION)
    await sweep_starts(runtime)
    return SessionCheck(lost, sum(requested.done), sum(logged_off.done), pruned)
