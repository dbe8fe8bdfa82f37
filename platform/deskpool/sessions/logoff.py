"""A user's log-off from the desktop they hold (``POST /api/v1/me/desktops/{id}/logoff``).

With a tunnel open, its gateway is asked to close it and its end logs the user off; with none,
the user is logged off now (:func:`deskpool.sessions.service.log_off`); with a start on connect
pending for them, the start is cancelled (:mod:`deskpool.sessions.start_cancel`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from deskpool.audit import record_audit_event
from deskpool.desktops import store as store_desktops
from deskpool.errors import NotFound
from deskpool.live.publishers import publish_desktop
from deskpool.pools.model import Desktop
from deskpool.runtime import Runtime
from deskpool.sessions import store
from deskpool.sessions.model import SessionRecord
from deskpool.sessions.service import AuditOf, log_off, publish_disconnect
from deskpool.sessions.start_cancel import cancel_start
from deskpool.sessions.tunnel import SessionEndReason


@dataclass(frozen=True, slots=True)
class LogoffRequest:
    """A user's log-off: their desktop and the sessions asked to close first."""

    desktop: Desktop
    closing: list[SessionRecord]


async def log_off_my_desktop(
    runtime: Runtime, principal: Any, desktop_id: uuid.UUID, audit: AuditOf
) -> LogoffRequest:
    """Log the caller off the desktop they hold, whatever the pool's after-disconnect policy.

    With a tunnel open, its gateway is asked to close it (reason ``user_logoff``), and its end
    logs the user off (:func:`deskpool.sessions.ending.end_session`); with none, the user is
    logged off now. Either way the pool's rule for a desktop after log-off applies: a persistent
    desktop becomes ``ready`` and stays the user's, a non-persistent one is rebuilt. A desktop
    the user is not logged on to (``ready``, being rebuilt) is answered as it is, except that a
    start on connect still pending for the user is cancelled
    (:func:`deskpool.sessions.start_cancel.cancel_start`): the desktop is not handed to them, and is
    released as the pool's rule says.

    :raises NotFound: no such desktop, or it is not the caller's.
    """
    user = str(principal.id)
    async with runtime.db.acquire() as connection, connection.transaction():
        desktop = await store_desktops.get_desktop(connection, desktop_id, for_update=True)
        if desktop is None or desktop.assigned_user != user:
            raise NotFound(f"You hold no desktop with the id {desktop_id}.")
        closing = await store.request_logoff(connection, desktop_id)
        await record_audit_event(
            connection,
            audit(
                "desktop.logoff_request",
                "desktops",
                str(desktop_id),
                {"sessions": [str(session.id) for session in closing]},
            ),
        )
        cancelled = None
        if not closing:
            after = await log_off(connection, desktop_id, "logged off by the user", audit)
            if after is None:
                cancelled = await cancel_start(
                    connection,
                    desktop_id,
                    str(SessionEndReason.USER_LOGOFF),
                    audit,
                    user_id=uuid.UUID(user),
                )
                after = cancelled
            desktop = after or desktop
    for session in closing:
        await publish_disconnect(runtime, session)
    if cancelled is not None:
        await publish_desktop(runtime, cancelled)
    return LogoffRequest(desktop, closing)
