"""The SQL of rollouts, their per-desktop entries and the pools' image history.

Reads take a :class:`~deskpool.db.rows.Db`; writes take an :class:`asyncpg.Connection` and join
the caller's transaction. No HTTP errors here: a second active rollout of a pool is a
:class:`~deskpool.rollouts.model.RolloutConflict` (the partial unique index
``rollouts_one_active`` decides).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.db.rows import Db
from deskpool.rollouts.model import (
    EntryRole,
    EntryState,
    InUsePolicy,
    Rollout,
    RolloutConflict,
    RolloutDesktop,
    RolloutState,
)
from deskpool.rollouts.planner import RolloutView

_ACTIVE = ("scheduled", "canary", "rolling", "paused")

_COLUMNS = """id, pool_id, from_template, to_template, canary, batch_size, min_ready, surge,
    in_use, warning_seconds, message, start_at, stop_on_error, recreate_assigned, state,
    paused_from, reason, created_by, created_at, started_at, finished_at"""


def rollout_of(row: Any) -> Rollout:
    """A :class:`Rollout` from a ``rollouts`` row."""
    return Rollout(
        id=row["id"],
        pool_id=row["pool_id"],
        from_template=row["from_template"],
        to_template=row["to_template"],
        canary=row["canary"],
        batch_size=row["batch_size"],
        min_ready=row["min_ready"],
        surge=row["surge"],
        in_use=InUsePolicy(row["in_use"]),
        warning_seconds=row["warning_seconds"],
        message=row["message"],
        start_at=row["start_at"],
        stop_on_error=row["stop_on_error"],
        recreate_assigned=row["recreate_assigned"],
        state=RolloutState(row["state"]),
        paused_from=None if row["paused_from"] is None else RolloutState(row["paused_from"]),
        reason=row["reason"],
        created_by=row["created_by"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
    )


def entry_of(row: Any) -> RolloutDesktop:
    """A :class:`RolloutDesktop` from a ``rollout_desktops`` row."""
    return RolloutDesktop(
        rollout_id=row["rollout_id"],
        desktop_id=row["desktop_id"],
        desktop_name=row["desktop_name"],
        role=EntryRole(row["role"]),
        state=EntryState(row["state"]),
        updated_at=row["updated_at"],
        warned_at=row["warned_at"],
        logoff_at=row["logoff_at"],
        error=row["error"],
    )


async def insert_rollout(connection: asyncpg.Connection, rollout: Rollout) -> Rollout:
    """Store a new rollout; :class:`RolloutConflict` when the pool has an active one."""
    try:
        async with connection.transaction():
            row = await connection.fetchrow(
                f"""
                INSERT INTO rollouts (id, pool_id, from_template, to_template, canary,
                       batch_size, min_ready, surge, in_use, warning_seconds, message, start_at,
                       stop_on_error, recreate_assigned, state, created_by, created_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                        $17)
                RETURNING {_COLUMNS}
                """,
                rollout.id,
                rollout.pool_id,
                rollout.from_template,
                rollout.to_template,
                rollout.canary,
                rollout.batch_size,
                rollout.min_ready,
                rollout.surge,
                str(rollout.in_use),
                rollout.warning_seconds,
                rollout.message,
                rollout.start_at,
                rollout.stop_on_error,
                rollout.recreate_assigned,
                str(rollout.state),
                rollout.created_by,
                rollout.created_at,
            )
    except asyncpg.UniqueViolationError:
        raise RolloutConflict("the pool already has an active rollout") from None
    return rollout_of(row)


async def get_rollout(
    db: Db, pool_id: uuid.UUID, rollout_id: uuid.UUID, *, for_update: bool = False
) -> Rollout | None:
    """The rollout ``rollout_id`` of pool ``pool_id``, if there is one."""
    lock = " FOR UPDATE" if for_update else ""
    row = await db.fetchrow(
        f"SELECT {_COLUMNS} FROM rollouts WHERE id = $1 AND pool_id = $2{lock}",
        rollout_id,
        pool_id,
    )
    return None if row is None else rollout_of(row)


async def list_rollouts(
    db: Db, pool_id: uuid.UUID, *, limit: int, after: tuple[datetime, uuid.UUID] | None
) -> list[Rollout]:
    """The pool's rollouts, newest first, ``limit`` at most, after the cursor ``after``."""
    if after is None:
        rows = await db.fetch(
            f"""SELECT {_COLUMNS} FROM rollouts WHERE pool_id = $1
                 ORDER BY created_at DESC, id DESC LIMIT $2""",
            pool_id,
            limit,
        )
    else:
        rows = await db.fetch(
            f"""SELECT {_COLUMNS} FROM rollouts WHERE pool_id = $1
                   AND (created_at, id) < ($3, $4)
                 ORDER BY created_at DESC, id DESC LIMIT $2""",
            pool_id,
            limit,
            after[0],
            after[1],
        )
    return [rollout_of(row) for row in rows]


async def active_rollout(db: Db, pool_id: uuid.UUID, *, for_update: bool = False) -> Rollout | None:
    """The pool's active rollout, if it has one."""
    lock = " FOR UPDATE" if for_update else ""
    row = await db.fetchrow(
        f"""SELECT {_COLUMNS} FROM rollouts
             WHERE pool_id = $1 AND state = ANY($2::text[]){lock}""",
        pool_id,
        list(_ACTIVE),
    )
    return None if row is None else rollout_of(row)


async def active_rollouts(db: Db, pool_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, RolloutView]:
    """The active rollout of each of ``pool_ids`` that has one, with its entries."""
    rows = await db.fetch(
        f"""SELECT {_COLUMNS} FROM rollouts
             WHERE pool_id = ANY($1::uuid[]) AND state = ANY($2::text[])""",
        list(pool_ids),
        list(_ACTIVE),
    )
    if not rows:
        return {}
    rollouts = [rollout_of(row) for row in rows]
    entries = await entries_of(db, [rollout.id for rollout in rollouts])
    return {
        rollout.pool_id: RolloutView(
            rollout, {entry.desktop_id: entry for entry in entries.get(rollout.id, [])}
        )
        for rollout in rollouts
    }


async def entries_of(
    db: Db, rollout_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[RolloutDesktop]]:
    """The per-desktop entries of each rollout, by desktop name."""
    rows = await db.fetch(
        """SELECT * FROM rollout_desktops WHERE rollout_id = ANY($1::uuid[])
            ORDER BY desktop_name""",
        list(rollout_ids),
    )
    found: dict[uuid.UUID, list[RolloutDesktop]] = {rollout_id: [] for rollout_id in rollout_ids}
    for row in rows:
        found.setdefault(row["rollout_id"], []).append(entry_of(row))
    return found


async def save_state(connection: asyncpg.Connection, rollout: Rollout) -> Rollout:
    """Record the rollout's state, reason and times."""
    row = await connection.fetchrow(
        f"""
        UPDATE rollouts
           SET state = $2, paused_from = $3, reason = $4, started_at = $5, finished_at = $6,
               updated_at = now()
         WHERE id = $1
        RETURNING {_COLUMNS}
        """,
        rollout.id,
        str(rollout.state),
        None if rollout.paused_from is None else str(rollout.paused_from),
        rollout.reason,
        rollout.started_at,
        rollout.finished_at,
    )
    return rollout_of(row)


async def save_entry(connection: asyncpg.Connection, entry: RolloutDesktop) -> None:
    """Record what the rollout did to a desktop (one row per rollout and desktop)."""
    await connection.execute(
        """
        INSERT INTO rollout_desktops (rollout_id, desktop_id, desktop_name, role, state,
               warned_at, logoff_at, error, updated_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
        ON CONFLICT (rollout_id, desktop_id) DO UPDATE
           SET state = EXCLUDED.state,
               warned_at = COALESCE(EXCLUDED.warned_at, rollout_desktops.warned_at),
               logoff_at = COALESCE(EXCLUDED.logoff_at, rollout_desktops.logoff_at),
               error = EXCLUDED.error,
               updated_at = EXCLUDED.updated_at
        """,
        entry.rollout_id,
        entry.desktop_id,
        entry.desktop_name,
        str(entry.role),
        str(entry.state),
        entry.warned_at,
        entry.logoff_at,
        entry.error,
        entry.updated_at,
    )


async def get_entry(
    db: Db, rollout_id: uuid.UUID, desktop_id: uuid.UUID, *, for_update: bool = False
) -> RolloutDesktop | None:
    """What the rollout did to the desktop so far, if anything."""
    lock = " FOR UPDATE" if for_update else ""
    row = await db.fetchrow(
        f"SELECT * FROM rollout_desktops WHERE rollout_id = $1 AND desktop_id = $2{lock}",
        rollout_id,
        desktop_id,
    )
    return None if row is None else entry_of(row)


async def withdraw_warnings(connection: asyncpg.Connection, rollout_id: uuid.UUID) -> None:
    """Users warned by the rollout wait again, to be warned afresh if it goes on."""
    await connection.execute(
        """
        UPDATE rollout_desktops
           SET state = 'waiting_for_logoff', warned_at = NULL, logoff_at = NULL,
               updated_at = now()
         WHERE rollout_id = $1 AND state = 'warned'
        """,
        rollout_id,
    )


async def build_template(db: Db, desktop_id: uuid.UUID) -> str | None:
    """The template an active rollout rebuilds the desktop from, if one does."""
    value: str | None = await db.fetchval(
        """
        SELECT r.to_template
          FROM rollout_desktops e JOIN rollouts r ON r.id = e.rollout_id
         WHERE e.desktop_id = $1 AND e.state IN ('replacing', 'failed')
           AND r.state IN ('canary', 'rolling', 'paused')
        """,
        desktop_id,
    )
    return value


async def set_pool_template(
    connection: asyncpg.Connection, pool_id: uuid.UUID, template: str
) -> bool:
    """Make ``template`` the pool's (a new generation); whether it changed."""
    changed = await connection.fetchval(
        """
        UPDATE pools SET template = $2, generation = generation + 1, updated_at = now()
         WHERE id = $1 AND template <> $2
        RETURNING id
        """,
        pool_id,
        template,
    )
    return changed is not None


# ------------------------------------------------------------------------------ image history


@dataclass(frozen=True, slots=True)
class PoolImage:
    """A template a pool ran: since when, set by whom, how (created, changed, rollout...)."""

    id: int
    pool_id: uuid.UUID
    template: str
    since: datetime
    set_by: str
    how: str
    rollout_id: uuid.UUID | None


async def record_image(
    connection: asyncpg.Connection,
    pool_id: uuid.UUID,
    template: str,
    *,
    set_by: str,
    how: str,
    rollout_id: uuid.UUID | None = None,
) -> None:
    """Add ``template`` to the pool's image history."""
    await connection.execute(
        """INSERT INTO pool_images (pool_id, template, set_by, how, rollout_id)
           VALUES ($1, $2, $3, $4, $5)""",
        pool_id,
        template,
        set_by,
        how,
        rollout_id,
    )


async def list_images(db: Db, pool_id: uuid.UUID, *, limit: int) -> list[PoolImage]:
    """The pool's image history, newest first."""
    rows = await db.fetch(
        """SELECT * FROM pool_images WHERE pool_id = $1
            ORDER BY since DESC, id DESC LIMIT $2""",
        pool_id,
        limit,
    )
    return [
        PoolImage(
            id=row["id"],
            pool_id=row["pool_id"],
            template=row["template"],
            since=row["since"],
            set_by=row["set_by"],
            how=row["how"],
            rollout_id=row["rollout_id"],
        )
        for row in rows
    ]


async def desktops_by_entry_state(db: Db) -> dict[tuple[str, str], int]:
    """Desktops of active rollouts by pool id and entry state (for ``/metrics``)."""
    rows = await db.fetch(
        """
        SELECT r.pool_id, e.state, count(*) AS n
          FROM rollout_desktops e JOIN rollouts r ON r.id = e.rollout_id
         WHERE r.state = ANY($1::text[])
         GROUP BY r.pool_id, e.state
        """,
        list(_ACTIVE),
    )
    return {(str(row["pool_id"]), row["state"]): int(row["n"]) for row in rows}
