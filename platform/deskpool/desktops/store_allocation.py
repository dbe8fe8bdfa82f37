"""SQL of allocation: handing a desktop of a pool to a user who opens it.

:func:`allocate_desktop` follows the pure rules of :mod:`deskpool.desktops.allocation`: the
user's own desktop first, then free ready desktops oldest first, locked with
``FOR UPDATE SKIP LOCKED`` so concurrent requests never get the same desktop, and serialized
per pool and user (a transaction advisory lock) so one user never gets two.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime

import asyncpg

from deskpool.db.rows import as_uuid
from deskpool.desktops.allocation import allocation_candidates, choose_desktop, held_desktops
from deskpool.desktops.states import Allocated, transition
from deskpool.desktops.store import desktop_from_row, write_desktop
from deskpool.errors import NotFound
from deskpool.pools.model import Desktop, Pool
from deskpool.pools.store import get_pool


async def allocate_desktop(
    connection: asyncpg.Connection,
    pool: Pool,
    user_id: str | uuid.UUID,
    now: datetime | None = None,
) -> Desktop:
    """Hand a desktop of ``pool`` to ``user_id`` and return it (state ``in_use``).

    The order is :mod:`deskpool.desktops.allocation`'s: the desktop the user holds first (in use,
    then ready), else a free, ready, clean desktop, oldest first. Free desktops are locked with
    ``FOR UPDATE SKIP LOCKED`` and re-checked, so two concurrent requests never get the same
    desktop; requests of one user for one pool are serialized by a transaction advisory lock,
    so a user never gets two. Runs in the caller's transaction, or in one of its own when the
    caller has none; the lock lasts until that transaction ends.

    :param pool: the pool as the caller read it; its state is read again here.
    :raises PoolUnavailable: the pool is disabled, or draining and the user holds nothing.
    :raises DesktopNotReady: the user's desktop in a persistent pool is not ready yet.
    :raises NoDesktopAvailable: no free desktop is ready.
    :raises NotFound: the pool is gone.
    """
    user = str(user_id)
    when = now or datetime.now(UTC)
    # In the caller's transaction, no savepoint: an error here rolls the caller's back anyway
    # (two round trips fewer per opening).
    opened = contextlib.nullcontext() if connection.is_in_transaction() else None
    async with opened or connection.transaction():
        await connection.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            f"deskpool.allocate:{pool.id}:{user}",
        )
        current = await get_pool(connection, pool.id)
        if current is None:
            raise NotFound(f"No pool has the id {pool.id}.")
        held_rows = await connection.fetch(
            """
            SELECT * FROM desktops
             WHERE pool_id = $1 AND assigned_user = $2 AND state <> 'deleting'
             FOR UPDATE
            """,
            current.id,
            as_uuid(user),
        )
        held = held_desktops(current, [desktop_from_row(row) for row in held_rows], user)
        candidates, new_assignment = allocation_candidates(current, held, user)
        if candidates and not new_assignment:
            return await _allocate(connection, current, candidates[0], user, when)
        free = await lock_free_desktop(connection, current) if new_assignment else None
        if free is not None:
            return await _allocate(connection, current, free, user, when)
        # Nothing to hand out: the pure rules say why (disabled, draining, not ready, none free).
        choose_desktop(current, held, user)
        raise AssertionError("choose_desktop chose a desktop allocation_candidates did not offer")


#: The oldest free ready desktop of pool ``$1`` that no other transaction holds, locked.
FREE_DESKTOP = """
    SELECT * FROM desktops
     WHERE pool_id = $1 AND state = 'ready' AND assigned_user IS NULL
       AND NOT in_session AND NOT used_since_refresh
     ORDER BY created_at, name, id
     LIMIT 1
     FOR UPDATE SKIP LOCKED
"""


async def lock_free_desktop(connection: asyncpg.Connection, pool: Pool) -> Desktop | None:
    """The oldest free ready desktop of ``pool`` no other transaction holds, locked; or none."""
    while True:
        row = await connection.fetchrow(FREE_DESKTOP, pool.id)
        if row is None:
            return None
        desktop = desktop_from_row(row)
        if desktop.is_available:
            return desktop


async def _allocate(
    connection: asyncpg.Connection, pool: Pool, desktop: Desktop, user: str, now: datetime
) -> Desktop:
    after = transition(desktop, Allocated(user), pool=pool, now=now)
    return await write_desktop(connection, after)
