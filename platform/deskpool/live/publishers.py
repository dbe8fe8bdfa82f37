"""Publishing live events from the places that change state (services, the worker)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from deskpool.live import bus
from deskpool.live.model import LiveEvent

if TYPE_CHECKING:
    from deskpool.pools.model import Desktop
    from deskpool.runtime import Runtime
    from deskpool.sessions.model import SessionRecord
    from deskpool.sessions.tunnel import TunnelGrant


def desktop_event(desktop: Desktop, what: str = "state") -> LiveEvent:
    """``desktop.<what>`` of ``desktop``: its state, pool and user (who sees it as its owner)."""
    return LiveEvent(
        f"desktop.{what}",
        str(desktop.id),
        {
            "pool_id": str(desktop.pool_id),
            "name": desktop.name,
            "state": str(desktop.state),
            "in_session": desktop.in_session,
        },
        owner=None if desktop.assigned_user is None else str(desktop.assigned_user),
    )


def session_event(what: str, session: SessionRecord | TunnelGrant) -> LiveEvent:
    """``session.<what>`` (``opened``, ``ended``): its user (the owner), desktop and pool."""
    session_id = session.id if hasattr(session, "id") else session.session_id
    return LiveEvent(
        f"session.{what}",
        str(session_id),
        {"desktop_id": str(session.desktop_id), "pool_id": str(session.pool_id)},
        owner=str(session.user_id),
    )


async def publish(runtime: Runtime, event: LiveEvent) -> None:
    """Publish ``event`` after its change was committed (a Redis failure is only logged)."""
    await bus.publish(runtime.kv, runtime.config["KVSTORE_KEY_PREFIX"], event)


async def publish_many(runtime: Runtime, events: Sequence[LiveEvent]) -> None:
    """Publish ``events`` in order, in one round trip to Redis (a failure is only logged)."""
    await bus.publish_many(runtime.kv, runtime.config["KVSTORE_KEY_PREFIX"], events)


async def publish_desktop(runtime: Runtime, desktop: Desktop, what: str = "state") -> None:
    """Publish :func:`desktop_event`."""
    await publish(runtime, desktop_event(desktop, what))
