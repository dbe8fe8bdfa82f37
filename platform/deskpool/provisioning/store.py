"""SQL the worker side of pools needs besides the stores of its aggregates.

- *Guarded events.* A job or a reconciliation pass decides from a desktop it read earlier;
  by the time it writes, an administrator or another job may have moved the desktop on.
  :func:`apply_event_if_unchanged` and :func:`apply_event_in_state` lock the row, check that
  the desktop is still what the decision was made from, and only then apply the event to the
  row they locked (:func:`deskpool.desktops.store.apply_event_to_locked`, the pure state
  machine). ``None`` means "changed meanwhile: decide again", never an error.

The fencing of a periodic run (:func:`deskpool.jobs.periodic.hold_periodic_run`) and the
unfinished job of a resource (:func:`deskpool.jobs.queue.unfinished_job`) are SQL on the
``periodic_tasks`` and ``jobs`` tables: they are in ``jobs/``.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime

import asyncpg

from deskpool.desktops.states import DesktopEvent
from deskpool.desktops.store import apply_event_to_locked, get_desktop
from deskpool.pools.model import Desktop, DesktopState, Pool


async def apply_event_if_unchanged(
    connection: asyncpg.Connection,
    expected: Desktop,
    event: DesktopEvent,
    now: datetime,
    *,
    pool: Pool,
) -> Desktop | None:
    """Apply ``event`` to the desktop only if its record still equals ``expected``.

    Runs in a transaction of its own (a savepoint inside the caller's).

    :returns: the desktop after the event, or ``None`` when it is gone or changed since
        ``expected`` was read (the caller decides again on its next pass).
    :raises IllegalTransition: the event is not legal in the desktop's (unchanged) state.
    """
    async with connection.transaction():
        current = await get_desktop(connection, expected.id, for_update=True)
        if current is None or current != expected:
            return None
        return await apply_event_to_locked(connection, current, event, now, pool=pool)


async def apply_event_in_state(
    connection: asyncpg.Connection,
    desktop_id: uuid.UUID,
    event: DesktopEvent,
    now: datetime,
    *,
    states: Collection[DesktopState],
    pool: Pool,
) -> Desktop | None:
    """Apply ``event`` to the desktop only if it is in one of ``states``.

    A job working on a step applies the step's outcome this way: if an administrator or the
    reconciler moved the desktop meanwhile (deleted it, failed it), the outcome is dropped.

    :returns: the desktop after the event, or ``None`` when it is gone or in another state.
    """
    async with connection.transaction():
        current = await get_desktop(connection, desktop_id, for_update=True)
        if current is None or current.state not in states:
            return None
        return await apply_event_to_locked(connection, current, event, now, pool=pool)


async def vm_is_recorded(connection: asyncpg.Connection, cluster_id: uuid.UUID, vm_id: str) -> bool:
    """Whether a desktop of the cluster records ``vm_id`` as its VM."""
    found = await connection.fetchval(
        "SELECT true FROM desktops WHERE cluster_id = $1 AND vm_id = $2 LIMIT 1",
        cluster_id,
        vm_id,
    )
    return bool(found)


async def desktop_exists(connection: asyncpg.Connection, desktop_id: uuid.UUID) -> bool:
    """Whether the desktop record exists."""
    return bool(await connection.fetchval("SELECT true FROM desktops WHERE id = $1", desktop_id))
