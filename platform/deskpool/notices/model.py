"""A notice to the user of a desktop: their session ends at a time, for a reason (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from deskpool.live.model import LiveEvent


@dataclass(frozen=True, slots=True, kw_only=True)
class Notice:
    """The session of ``user_id`` on ``desktop_id`` ends at ``ends_at`` because of ``reason``.

    :ivar reason: a stable code of why (``image_rollout``, ``capacity_schedule``...).
    :ivar message: what an administrator wrote for the user (may be empty).
    :ivar source: what gave the notice (``rollout:<id>``), so it can clear its own.
    """

    id: UUID
    desktop_id: UUID
    pool_id: UUID
    user_id: UUID
    ends_at: datetime
    reason: str
    message: str
    source: str
    created_at: datetime
    cleared_at: datetime | None = None

    def view(self) -> dict[str, Any]:
        """The notice as the API and the live events show it."""
        return {
            "id": str(self.id),
            "desktop_id": str(self.desktop_id),
            "pool_id": str(self.pool_id),
            "ends_at": self.ends_at.isoformat(),
            "reason": self.reason,
            "message": self.message,
        }


def notice_event(notice: Notice, what: str = "notice") -> LiveEvent:
    """``desktop.notice`` (or ``desktop.notice_cleared``): seen by the user and administrators."""
    return LiveEvent(
        f"desktop.{what}",
        str(notice.desktop_id),
        notice.view(),
        owner=str(notice.user_id),
    )
