"""SQL desktop job execution needs besides the stores of its aggregates.

Whether a VM is recorded and whether a desktop still exists, for the orphan and desktop jobs.
The guarded events a job applies (:func:`deskpool.desktops.store.apply_event_if_unchanged`,
:func:`~deskpool.desktops.store.apply_event_in_state`) are the desktop aggregate's; the fencing
of a periodic run (:func:`deskpool.jobs.periodic.hold_periodic_run`) and the unfinished job of
a resource (:func:`deskpool.jobs.queue.unfinished_job`) are in ``jobs/``.
"""

from __future__ import annotations

import uuid

import asyncpg


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
