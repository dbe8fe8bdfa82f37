"""Who watches a user's desktop: the notice he sees while an administrator shadows a session.

An administrator's read-only view of a session (``shadow_of``) is shown to the watched user
while it lasts: his desktop view reads :func:`watchers_of` (``GET /api/v1/me/watchers``), and
every start and end of a view publishes ``session.watched`` to him (the watched session's user
is the event's owner), so the notice comes and goes at once, without a reload.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from deskpool.live.model import LiveEvent
from deskpool.live.publishers import publish
from deskpool.sessions import store
from deskpool.sessions.model import Watcher

if TYPE_CHECKING:
    from deskpool.runtime import Runtime


async def watchers_of(runtime: Runtime, user_id: str | uuid.UUID) -> list[Watcher]:
    """The open read-only views of ``user_id``'s open sessions, oldest first."""
    return await store.watchers_of(runtime.db, uuid.UUID(str(user_id)))


async def publish_watch(runtime: Runtime, watched_session_id: uuid.UUID) -> None:
    """``session.watched`` to the user of ``watched_session_id``: a view of it began or ended."""
    watched = await store.get_session(runtime.db, watched_session_id)
    if watched is None:
        return
    event = LiveEvent(
        "session.watched",
        str(watched.id),
        {"desktop_id": str(watched.desktop_id), "pool_id": str(watched.pool_id)},
        owner=str(watched.user_id),
    )
    await publish(runtime, event)
