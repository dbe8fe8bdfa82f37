"""An open that grows its pool: no 503 while a pool may still get desktops.

When a user opens a pool with no ready and no powered-off desktop (start on connect found
nothing), an enabled pool below its ``max_size`` does not refuse him:
:func:`grow_for_user`, in the open's transaction, reserves to him a free desktop already on
its way to ready (``Reserved(user)``, locked ``SKIP LOCKED``), or inserts a new one reserved to
him and enqueues its ``desktop.provision`` job. The caller
(:func:`deskpool.sessions.service.start_for_user`) records the start as for any start on
connect, so the worker that makes it ready hands it to him
(:func:`deskpool.provisioning.starts.hand_over`) and a revocation cancels it
(:func:`deskpool.sessions.start_cancel.cancel_start`).

New desktops are counted against ``max_size`` (and the license's desktops) under the pool's
growth lock, the one its reconciliation applies its plans under, so concurrent opens and
reconciliation passes never take it beyond its maximum; each open reserves its own desktop.
At the maximum the open is refused 503 ``no_desktop_available`` (the API adds ``Retry-After``).
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from deskpool.desktops import store as store_desktops
from deskpool.desktops.allocation import NoDesktopAvailable
from deskpool.desktops.jobs import PROVISION, enqueue_desktop_job
from deskpool.desktops.states import Reserved
from deskpool.licensing.service import cap_desktops
from deskpool.pools.model import Desktop, Pool
from deskpool.pools.naming import InvalidNamingPattern, next_free_names
from deskpool.runtime import Runtime
from deskpool.starts import store as starts
from deskpool.starts.model import StartChoice, may_grow


async def grow_for_user(
    runtime: Runtime,
    connection: asyncpg.Connection,
    pool: Pool,
    held: Sequence[Desktop],
    user: str,
) -> StartChoice | None:
    """Reserve a desktop being built to ``user`` (building one if none is), in his open.

    :param pool: the pool, as read in the open's transaction.
    :param held: the pool's desktops the user holds (locked by the caller).
    :returns: the reserved desktop (``grown``), or ``None`` when the pool does not grow for him
        (not enabled, or he holds a desktop there).
    :raises NoDesktopAvailable: the pool is at its maximum, the license allows no more
        desktops, or its growth stayed busy too long.
    """
    if not may_grow(pool, held, user):
        return None
    desktop = await starts.reservable(connection, pool.id)
    if desktop is None:
        desktop = await _build(runtime, connection, pool)
    reserved = await store_desktops.apply_event_to_locked(
        connection, desktop, Reserved(user), pool=pool
    )
    return StartChoice(reserved, power_up=False, grown=True)


async def _build(runtime: Runtime, connection: asyncpg.Connection, pool: Pool) -> Desktop:
    """Insert one desktop into ``pool`` and enqueue its provisioning, if the pool has room."""
    if not await starts.lock_pool_growth(connection, pool.id):
        raise NoDesktopAvailable(
            f"pool {pool.name} has no free desktop ready and is growing for other users; "
            "try again shortly"
        )
    room = await starts.room_of(connection, pool)
    if room.records >= room.max_size:
        raise NoDesktopAvailable(
            f"pool {pool.name} is at its maximum of {room.max_size} desktops and none is free; "
            "try again later"
        )
    allowed, held_back = await cap_desktops(connection, runtime.licensing, 1)
    if allowed < 1:
        raise NoDesktopAvailable(
            f"pool {pool.name} has no free desktop and may not grow: {held_back}"
        )
    try:
        names = next_free_names(pool.naming_pattern, 1, room.taken)
    except InvalidNamingPattern:
        raise NoDesktopAvailable(
            f"pool {pool.name} has no free desktop and its naming pattern names no new one"
        ) from None
    [desktop] = await store_desktops.insert_desktops(connection, pool, names)
    await enqueue_desktop_job(connection, PROVISION, desktop)
    return desktop
