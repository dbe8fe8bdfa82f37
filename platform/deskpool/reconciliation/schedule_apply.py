"""Applying a phase's warnings and forced log-offs, in the reconciliation's transaction.

The reconciliation service (:mod:`deskpool.reconciliation.reconciler`) calls
:func:`apply_logoff_action`
for each action :func:`deskpool.schedules.logoffs.plan_logoffs` planned, each in a savepoint of
its fenced transaction under the pool's reconciliation lock. An action is applied only if what
it was planned from still holds (the desktop unchanged, the warning still open and due);
otherwise it is left to the next pass. A warning never moves an open one
(:func:`deskpool.notices.service.warn_once`), so its deadline survives any number of passes,
workers and crashes. What must be sent after the commit is returned as a
:class:`~deskpool.notices.service.Delivery`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from uuid import UUID

import asyncpg

from deskpool.actor import Actor
from deskpool.desktops.store import get_desktop
from deskpool.notices import service as notices
from deskpool.notices import store as notice_store
from deskpool.notices.service import Delivery, NoticeRequest
from deskpool.pools.model import Desktop, Pool
from deskpool.schedules.logoffs import (
    NOTICE_REASON,
    ClearWarning,
    LogoffAction,
    WarnSession,
)

#: Who acts for a schedule in the audit trail.
ACTOR = "system:reconciler"

_audit = Actor.system(ACTOR).audit_event


async def apply_logoff_action(
    connection: asyncpg.Connection,
    pool: Pool,
    desktops: Mapping[UUID, Desktop],
    action: LogoffAction,
    now: datetime,
) -> Delivery | None:
    """Apply one action; ``None`` when it is left to the next pass (something moved on)."""
    if isinstance(action, ClearWarning):
        return await notices.clear(connection, source=action.source, desktop_id=action.desktop_id)
    planned = desktops.get(action.desktop_id)
    if planned is None or await get_desktop(connection, planned.id, for_update=True) != planned:
        return None
    if isinstance(action, WarnSession):
        request = NoticeRequest(
            planned.id,
            pool.id,
            UUID(action.user_id),
            action.ends_at,
            NOTICE_REASON,
            action.message,
            action.source,
        )
        warned = await notices.warn_once(connection, request, _audit)
        return None if warned is None else warned[1]
    notice = await notice_store.get_open_notice(connection, action.notice_id)
    if notice is None or notice.ends_at > now or str(notice.user_id) != action.user_id:
        return None
    delivery = await notices.force_logoff(connection, planned.id, action.reason, _audit)
    delivery.extend(
        await notices.clear(connection, source=action.source, desktop_id=action.desktop_id)
    )
    return delivery
