"""Warn the user of a desktop that their session ends, force the log-off, clear the warning.

Every function that changes something takes the caller's connection and joins its
transaction; what must reach other processes (the live event, the gateways' disconnects) is
returned as a :class:`Delivery` and sent by :func:`deliver` after the commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import asyncpg

from deskpool.audit import record_audit_event
from deskpool.db.rows import Db
from deskpool.desktops import store as store_desktops
from deskpool.live.model import LiveEvent
from deskpool.live.publishers import publish_many
from deskpool.notices import store
from deskpool.notices.model import Notice, notice_event
from deskpool.pools.model import Desktop, DesktopState
from deskpool.sessions import service as sessions
from deskpool.sessions import store as session_store
from deskpool.sessions.model import SessionRecord
from deskpool.sessions.service import AuditOf, system_audit

if TYPE_CHECKING:
    from deskpool.runtime import Runtime


@dataclass
class Delivery:
    """What to send once the transaction committed: live events, and sessions to close."""

    events: list[LiveEvent] = field(default_factory=list)
    closing: list[SessionRecord] = field(default_factory=list)

    def extend(self, other: Delivery) -> None:
        """Add ``other``'s events and sessions."""
        self.events.extend(other.events)
        self.closing.extend(other.closing)


async def warn(
    connection: asyncpg.Connection,
    *,
    desktop_id: uuid.UUID,
    pool_id: uuid.UUID,
    user_id: str | uuid.UUID,
    ends_at: datetime,
    reason: str,
    message: str,
    source: str,
    audit: AuditOf = system_audit,
) -> tuple[Notice, Delivery]:
    """Warn the user of a desktop that their session ends at ``ends_at`` because of ``reason``.

    :param reason: a stable code (``image_rollout``, ``capacity_schedule``).
    :param message: the administrator's words for the user (may be empty).
    :param source: who warns (``rollout:<id>``); a second warning of the same source moves the
        first one instead of adding another.
    """
    warned = await _warn(
        connection,
        NoticeRequest(
            desktop_id, pool_id, uuid.UUID(str(user_id)), ends_at, reason, message, source
        ),
        audit,
        move=True,
    )
    assert warned is not None  # moving never keeps
    return warned


@dataclass(frozen=True)
class NoticeRequest:
    """What a warning says: to whom, on which desktop, until when, why, and from whom."""

    desktop_id: uuid.UUID
    pool_id: uuid.UUID
    user_id: uuid.UUID
    ends_at: datetime
    reason: str
    message: str
    source: str


async def warn_once(
    connection: asyncpg.Connection, what: NoticeRequest, audit: AuditOf = system_audit
) -> tuple[Notice, Delivery] | None:
    """:func:`warn`, unless ``what.source`` already warned this user of this desktop (``None``).

    The open warning keeps its deadline: a caller that runs again (another worker, or after a
    crash between the warning and the log-off) neither repeats nor postpones it.
    """
    return await _warn(connection, what, audit, move=False)


async def _warn(
    connection: asyncpg.Connection, what: NoticeRequest, audit: AuditOf, *, move: bool
) -> tuple[Notice, Delivery] | None:
    notice = await store.open_notice(
        connection,
        desktop_id=what.desktop_id,
        pool_id=what.pool_id,
        user_id=what.user_id,
        ends_at=what.ends_at,
        reason=what.reason,
        message=what.message,
        source=what.source,
        move=move,
    )
    if notice is None:
        return None
    await record_audit_event(
        connection,
        audit(
            "desktop.notice",
            "desktops",
            str(what.desktop_id),
            {
                "user_id": str(what.user_id),
                "ends_at": what.ends_at.isoformat(),
                "reason": what.reason,
                "source": what.source,
            },
        ),
    )
    return notice, Delivery(events=[notice_event(notice)])


async def force_logoff(
    connection: asyncpg.Connection, desktop_id: uuid.UUID, why: str, audit: AuditOf = system_audit
) -> Delivery:
    """Log the user of a desktop off now: close their sessions, or release it when none is open.

    The pool's rule after a log-off applies (a non-persistent desktop is rebuilt, a persistent
    one stays its user's), exactly as when the user logs off.
    """
    closing = await session_store.request_logoff(connection, desktop_id)
    await record_audit_event(
        connection,
        audit(
            "desktop.forced_logoff",
            "desktops",
            str(desktop_id),
            {"reason": why, "sessions": [str(session.id) for session in closing]},
        ),
    )
    if not closing:
        await sessions.log_off(connection, desktop_id, why, audit)
    return Delivery(closing=closing)


async def clear(
    connection: asyncpg.Connection, *, source: str, desktop_id: uuid.UUID | None = None
) -> Delivery:
    """Clear the open notices of ``source`` (on one desktop, or everywhere)."""
    cleared = await store.clear_notices(connection, source=source, desktop_id=desktop_id)
    return Delivery(events=[notice_event(notice, "notice_cleared") for notice in cleared])


async def deliver(runtime: Runtime, delivery: Delivery) -> None:
    """Send a committed :class:`Delivery`: its live events, and the gateways' disconnects."""
    if delivery.events:
        await publish_many(runtime, delivery.events)
    for session in delivery.closing:
        await sessions.publish_disconnect(runtime, session)


async def notices_of_user(
    db: Db, user_id: str | uuid.UUID, desktop_ids: Collection[uuid.UUID]
) -> dict[uuid.UUID, Notice]:
    """The open notice of the user on each of ``desktop_ids`` that has one (the earliest)."""
    if not desktop_ids:
        return {}
    return await store.notices_for(db, uuid.UUID(str(user_id)), desktop_ids)


@dataclass(frozen=True)
class HeldDesktop:
    """A desktop the user holds, and the notice that their session on it ends, if any."""

    desktop: Desktop
    notice: Notice | None


async def held_desktops(runtime: Runtime, user_id: str | uuid.UUID) -> list[HeldDesktop]:
    """The desktops the user holds (in use first), each with its open notice."""
    desktops = [
        desktop
        for desktop in await store_desktops.desktops_held_by(runtime.db, user_id)
        if desktop.state is not DesktopState.DELETING
    ]
    found = await notices_of_user(runtime.db, user_id, [desktop.id for desktop in desktops])
    return [HeldDesktop(desktop, found.get(desktop.id)) for desktop in desktops]
