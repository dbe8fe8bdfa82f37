"""The SQL of start on connect: ``desktop_starts`` and the desktops a start may take.

A start may also take a desktop of a pool that grows for the user: one on its way to ready
that nobody holds, or a new one, counted against ``max_size`` under the pool's growth lock.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.db.rows import Db, as_uuid, fetch_record, one_of_ids, record_from_row
from deskpool.desktops.store import desktop_from_row
from deskpool.pools.model import Desktop, Pool
from deskpool.pools.naming import name_key
from deskpool.pools.store import growth_lock_key


@dataclass(frozen=True, slots=True)
class StartRecord:
    """A desktop being started for a user, and the logon that waits for it."""

    desktop_id: uuid.UUID
    pool_id: uuid.UUID
    user_id: uuid.UUID
    logon_id: uuid.UUID | None
    requested_at: datetime
    powered_on_at: datetime | None


def _start(row: Any) -> StartRecord:
    return record_from_row(StartRecord, row)


async def lock_user_in_pool(connection: asyncpg.Connection, pool_id: uuid.UUID, user: str) -> None:
    """Serialize the opens of one user in one pool (the allocation's advisory lock)."""
    await connection.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        f"deskpool.allocate:{pool_id}:{user}",
    )


async def candidates(
    connection: asyncpg.Connection, pool_id: uuid.UUID, user: str
) -> list[Desktop]:
    """The user's desktops of the pool and one free powered-off desktop, all locked.

    The free one is the oldest not locked by another transaction (``SKIP LOCKED``), so two
    users opening at once never get the same desktop.
    """
    held = await connection.fetch(
        """
        SELECT * FROM desktops
         WHERE pool_id = $1 AND assigned_user = $2 AND state <> 'deleting'
         FOR UPDATE
        """,
        pool_id,
        as_uuid(user),
    )
    free = await connection.fetch(
        """
        SELECT * FROM desktops
         WHERE pool_id = $1 AND state = 'powered_off' AND assigned_user IS NULL
           AND NOT in_session
         ORDER BY created_at, name, id
         LIMIT 1
         FOR UPDATE SKIP LOCKED
        """,
        pool_id,
    )
    return [desktop_from_row(row) for row in [*held, *free]]


async def put_start(
    connection: asyncpg.Connection,
    *,
    desktop_id: uuid.UUID,
    pool_id: uuid.UUID,
    user_id: uuid.UUID,
    logon_id: uuid.UUID | None,
) -> tuple[StartRecord, uuid.UUID | None]:
    """Record the start (or give an existing one of the user the new logon).

    :returns: the start, and the logon it named before if another one (it waits no more).
    """
    before = await connection.fetchval(
        "SELECT logon_id FROM desktop_starts WHERE desktop_id = $1 AND user_id = $2 FOR UPDATE",
        desktop_id,
        user_id,
    )
    row = await connection.fetchrow(
        """
        INSERT INTO desktop_starts (desktop_id, pool_id, user_id, logon_id)
        VALUES ($1, $2, $3, $4)
        ON CONFLICT (desktop_id) DO UPDATE
           SET logon_id = EXCLUDED.logon_id, user_id = EXCLUDED.user_id,
               requested_at = CASE WHEN desktop_starts.user_id = EXCLUDED.user_id
                                   THEN desktop_starts.requested_at ELSE now() END
        RETURNING *
        """,
        desktop_id,
        pool_id,
        user_id,
        logon_id,
    )
    replaced = before if before is not None and before != logon_id else None
    return _start(row), replaced


async def start_of(
    db: Db, desktop_id: uuid.UUID, *, for_update: bool = False
) -> StartRecord | None:
    """The start of ``desktop_id``, if one is recorded."""
    query = "SELECT * FROM desktop_starts WHERE desktop_id = $1" + (
        " FOR UPDATE" if for_update else ""
    )
    return await fetch_record(db, _start, query, desktop_id)


async def mark_powered_on(connection: asyncpg.Connection, desktop_id: uuid.UUID) -> None:
    """The desktop was handed to its user: remember when."""
    await connection.execute(
        "UPDATE desktop_starts SET powered_on_at = now() WHERE desktop_id = $1", desktop_id
    )


async def remove_start(connection: Db, desktop_id: uuid.UUID) -> StartRecord | None:
    """Forget the start of ``desktop_id``; return it (``None``: there was none)."""
    query = "DELETE FROM desktop_starts WHERE desktop_id = $1 RETURNING *"
    return await fetch_record(connection, _start, query, desktop_id)


async def pending_starts_of(db: Db, user_ids: Collection[uuid.UUID]) -> list[StartRecord]:
    """The starts of ``user_ids`` whose desktop was not handed over yet."""
    rows = await db.fetch(
        """
        SELECT * FROM desktop_starts
         WHERE user_id = ANY($1::uuid[]) AND powered_on_at IS NULL
         ORDER BY desktop_id
        """,
        list(user_ids),
    )
    return [_start(row) for row in rows]


@dataclass(frozen=True, slots=True)
class StaleStart:
    """A start whose desktop is no longer on its way to the user, and why."""

    start: StartRecord
    desktop_state: str | None


async def stale_starts(db: Db) -> list[StaleStart]:
    """Starts whose desktop is gone, failed, or no longer the user's on its way or in use."""
    rows = await db.fetch(
        """
        SELECT s.*, d.state AS desktop_state
          FROM desktop_starts AS s
          LEFT JOIN desktops AS d ON d.id = s.desktop_id
         WHERE d.id IS NULL
            OR d.assigned_user IS DISTINCT FROM s.user_id
            OR d.state NOT IN ('provisioning', 'starting', 'waiting_for_agent',
                               'waiting_for_windows', 'refreshing', 'ready', 'in_use')
            OR (d.state = 'ready' AND s.powered_on_at IS NOT NULL)
        """
    )
    return [StaleStart(_start(row), row["desktop_state"]) for row in rows]


#: The desktops start on connect may take while they are on their way, or powered off.
_STARTABLE_STATES = (
    "('powered_off', 'provisioning', 'starting', 'waiting_for_agent', "
    "'waiting_for_windows', 'refreshing')"
)


async def startable_counts(db: Db, pool_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, int]:
    """How many desktops an open of each pool may start or build for its caller.

    The free powered-off desktops (powered on), the free ones on their way to ready
    (reserved), and, for an enabled pool, the desktops it may still grow by (``max_size``
    less its records): a start on connect may take any of them.
    """
    rows = await db.fetch(
        f"""
        SELECT p.id AS pool_id,
               (SELECT count(*) FROM desktops AS d
                 WHERE d.pool_id = p.id AND d.assigned_user IS NULL AND NOT d.in_session
                   AND d.state IN {_STARTABLE_STATES})
             + CASE WHEN p.state = 'enabled'
                    THEN greatest(p.max_size - (SELECT count(*) FROM desktops AS d
                                                 WHERE d.pool_id = p.id), 0)
                    ELSE 0 END AS startable
          FROM pools AS p
         WHERE p.id = ANY($1::uuid[])
        """,
        list(pool_ids),
    )
    return {row["pool_id"]: int(row["startable"]) for row in rows}


@dataclass(frozen=True, slots=True)
class OpeningGives:
    """What opening a pool gives a new caller now (see :func:`what_opening_gives`)."""

    #: A free ready desktop: allocated at once.
    ready: bool
    #: None ready, but one may be started or built for the caller (start on connect).
    startable: bool


def opening_gives_sql(pool: str) -> str:
    """SQL: what opening the pool ``pool`` (an alias of ``pools``) gives, as a lateral row.

    A ``CROSS JOIN LATERAL`` item with the columns ``ready`` and ``startable`` (see
    :class:`OpeningGives` and :func:`what_opening_gives`), for a statement that reads pools.
    """
    return f"""(
        SELECT r.ready,
               CASE WHEN r.ready THEN false
                    WHEN EXISTS (SELECT 1 FROM desktops AS d
                                  WHERE d.pool_id = {pool}.id AND d.assigned_user IS NULL
                                    AND NOT d.in_session AND d.state IN {_STARTABLE_STATES})
                    THEN true
                    WHEN {pool}.state = 'enabled'
                    THEN (SELECT count(*) FROM (SELECT 1 FROM desktops AS d
                                                 WHERE d.pool_id = {pool}.id
                                                 LIMIT {pool}.max_size) AS counted)
                         < {pool}.max_size
                    ELSE false END AS startable
          FROM (SELECT EXISTS (SELECT 1 FROM desktops AS d
                                WHERE d.pool_id = {pool}.id AND d.state = 'ready'
                                  AND d.assigned_user IS NULL AND NOT d.in_session
                                  AND NOT d.used_since_refresh) AS ready
                OFFSET 0) AS r  -- asked once, not again for each use of r.ready
        )"""


async def what_opening_gives(
    db: Db, pool_ids: Collection[uuid.UUID]
) -> dict[uuid.UUID, OpeningGives]:
    """Whether opening each pool gives a ready desktop now, else may start one for its caller.

    Each answer is found, not counted: one free ready desktop is enough (one entry of the
    partial index of free ready desktops), and only a pool with none is asked for a free one
    on its way or powered off, then whether it may grow (its desktops counted up to
    ``max_size``, no further). At 9 a.m. a thousand first sign-ins list their pools at
    once: counting every desktop of every listed pool for each of them read millions of rows
    (issue 39). The listing itself reads the same with its page (:func:`opening_gives_sql`,
    ``deskpool.pool_admin.store``).
    """
    pools, ids = one_of_ids("p.id", pool_ids)
    rows = await db.fetch(
        f"""
        SELECT p.id AS pool_id, g.ready, g.startable
          FROM pools AS p
         CROSS JOIN LATERAL {opening_gives_sql("p")} AS g
         WHERE {pools}
        """,
        ids,
    )
    return {row["pool_id"]: OpeningGives(row["ready"], row["startable"]) for row in rows}


# ------------------------------------------------------------------------------ growth


#: How long an open waits for the pool's growth lock before it answers 503.
GROWTH_LOCK_WAIT = 5.0


async def lock_pool_growth(connection: asyncpg.Connection, pool_id: uuid.UUID) -> bool:
    """Take the pool's growth lock until the transaction ends; ``False`` if it stayed taken.

    Tried, never waited for in the database (the caller holds desktop locks a reconciliation
    holding it may wait for): a deadlock cannot form, and a wait cannot outlast
    :data:`GROWTH_LOCK_WAIT`.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GROWTH_LOCK_WAIT
    pause = 0.005
    key = growth_lock_key(pool_id)
    while not await connection.fetchval(
        "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))", key
    ):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(random.uniform(pause / 2, pause))
        pause = min(pause * 2, 0.1)
    return True


async def reservable(connection: asyncpg.Connection, pool_id: uuid.UUID) -> Desktop | None:
    """A free desktop of the pool on its way to ready, oldest first, locked.

    Call it with the license's growth lock held alone, as an open that grows its pool does: no
    other open can then hold such a desktop, and a lock on it is the worker's (a provisioning
    step, a moment long), which is waited for. Passed over (``SKIP LOCKED``), the only desktop
    of a pool at its maximum was refused 503 "none is free" while it was being built.
    """
    row = await connection.fetchrow(
        """
        SELECT * FROM desktops
         WHERE pool_id = $1 AND assigned_user IS NULL AND NOT in_session
           AND state IN ('provisioning', 'starting', 'waiting_for_agent',
                         'waiting_for_windows', 'refreshing')
         ORDER BY created_at, name, id
         LIMIT 1
         FOR UPDATE
        """,
        pool_id,
    )
    return None if row is None else desktop_from_row(row)


@dataclass(frozen=True, slots=True)
class Room:
    """A pool's maximum and how many desktops it has, and the names taken on its cluster."""

    max_size: int
    records: int
    taken: frozenset[str]


async def room_of(connection: asyncpg.Connection, pool: Pool) -> Room:
    """The pool's ``max_size`` and records (all states, as it counts them), its cluster's names.

    Read under the growth lock, so the maximum is the one in force (an administrator may have
    lowered it since the pool was read).
    """
    row = await connection.fetchrow(
        """
        SELECT (SELECT max_size FROM pools WHERE id = $1) AS max_size,
               (SELECT count(*) FROM desktops WHERE pool_id = $1) AS records,
               ARRAY(SELECT name FROM desktops WHERE cluster_id = $2
                     UNION ALL
                     SELECT name FROM pool_orphans WHERE cluster_id = $2
                     )
                 AS taken
        """,
        pool.id,
        pool.cluster_id,
    )
    assert row is not None
    taken = frozenset(name_key(name) for name in row["taken"])
    return Room(int(row["max_size"] or 0), int(row["records"]), taken)
