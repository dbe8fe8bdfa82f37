"""Cancel a start on connect before its desktop is handed over.

A start waits for the worker to bring its desktop to ready (:func:`deskpool.provisioning.starts
.hand_over`). When the user loses the access behind it (disabled, his entitlement removed:
:func:`deskpool.revocation.service.revoke_lost_access`) or logs off from the desktop while it
starts (:func:`deskpool.sessions.logoff.log_off_my_desktop`), the start is cancelled in that
change's transaction:

- the start row goes and its logon records why (``access_revoked``, ``user_logoff``);
- the reservation is released as the pool's rule says: a desktop of a non-persistent pool, or
  one the user never used (a free powered-off desktop reserved to him), goes back to the pool
  (``Unassigned``); a persistent owner's own desktop (used, his data on it) stays his. Either
  way it goes on to ``ready`` and is never ``in_use`` for him;
- ``desktop.start_cancel`` is audited under the actor of the change.

A start already handed over (``powered_on_at`` set: the desktop is ``in_use``) is not a pending
one: the rules of a desktop in use apply (revocation logs the user off).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import asyncpg

from deskpool.audit import record_audit_event
from deskpool.desktops import store as store_desktops
from deskpool.desktops.states import Unassigned
from deskpool.events import AuditEvent
from deskpool.pools import store as store_pools
from deskpool.pools.model import Desktop, DesktopState, Pool, PoolKind
from deskpool.sessions import store_logons as session_store_logons
from deskpool.starts import store

#: Builds the audit event of a change: ``(action, resource_type, resource_id, details)``.
AuditOf = Callable[[str, str, str | None, dict[str, Any]], AuditEvent]


def releases(pool: Pool, desktop: Desktop) -> bool:
    """Whether cancelling the start gives ``desktop`` back to ``pool`` (else it stays its user's).

    A non-persistent pool's desktop always goes back; a persistent pool's only when its user
    never used it (a free desktop reserved to him by the start).
    """
    if desktop.state in (DesktopState.IN_USE, DesktopState.DELETING):
        return False
    return pool.kind is not PoolKind.PERSISTENT or not desktop.used_since_refresh


async def cancel_start(
    connection: asyncpg.Connection,
    desktop_id: uuid.UUID,
    reason: str,
    audit: AuditOf,
    *,
    user_id: uuid.UUID | None = None,
) -> Desktop | None:
    """Cancel the pending start of ``desktop_id`` (of ``user_id`` only, when given).

    Run it in the caller's transaction.

    :returns: the desktop after (to publish), or ``None`` when no pending start was cancelled.
    """
    desktop = await store_desktops.get_desktop(connection, desktop_id, for_update=True)
    start = await store.start_of(connection, desktop_id, for_update=True)
    if start is None or start.powered_on_at is not None:
        return None
    if user_id is not None and start.user_id != user_id:
        return None
    await store.remove_start(connection, desktop_id)
    if start.logon_id is not None:
        await session_store_logons.fail_logon(connection, start.logon_id, reason)
    released = False
    if desktop is not None and desktop.assigned_user == str(start.user_id):
        pool = await store_pools.get_pool(connection, desktop.pool_id)
        if pool is not None and releases(pool, desktop):
            desktop = await store_desktops.apply_event(
                connection, desktop_id, Unassigned(), pool=pool
            )
            released = True
    await record_audit_event(
        connection,
        audit(
            "desktop.start_cancel",
            "desktops",
            str(desktop_id),
            {
                "pool_id": str(start.pool_id),
                "user_id": str(start.user_id),
                "reason": reason,
                "released": released,
                "state": None if desktop is None else str(desktop.state),
            },
        ),
    )
    return desktop
