"""The SQL of schedules (``schedules``) and of the pools' capacity samples.

Reads take a :class:`~deskpool.db.rows.Db`; writes take an :class:`asyncpg.Connection` and join
the caller's transaction. Phases and exceptions are stored in their JSON form
(:func:`deskpool.schedules.model.phase_doc`, :func:`~deskpool.schedules.model.exception_doc`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.db.rows import Db
from deskpool.errors import Conflict
from deskpool.schedules.model import (
    Schedule,
    exception_doc,
    exception_of,
    phase_doc,
    phase_of,
)
from deskpool.schedules.samples import CapacitySample


class ScheduleNameTaken(Conflict):
    """Another schedule has the name (without case)."""

    code = "schedule_name_taken"
    title = "Schedule name taken"


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A stored schedule, with when it was created and last changed."""

    schedule: Schedule
    created_at: datetime
    updated_at: datetime


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def record_of(row: Any) -> ScheduleRecord:
    """A :class:`ScheduleRecord` from a ``schedules`` row."""
    return ScheduleRecord(
        Schedule(
            id=row["id"],
            name=row["name"],
            time_zone=row["time_zone"],
            phases=tuple(phase_of(doc) for doc in _json(row["phases"])),
            exceptions=tuple(exception_of(doc) for doc in _json(row["exceptions"])),
            generation=row["generation"],
        ),
        row["created_at"],
        row["updated_at"],
    )


def _docs(schedule: Schedule) -> tuple[str, str]:
    return (
        json.dumps([phase_doc(phase) for phase in schedule.phases]),
        json.dumps([exception_doc(exception) for exception in schedule.exceptions]),
    )


async def insert_schedule(connection: asyncpg.Connection, schedule: Schedule) -> ScheduleRecord:
    """Insert ``schedule``. :raises ScheduleNameTaken: the name is in use."""
    phases, exceptions = _docs(schedule)
    try:
        row = await connection.fetchrow(
            """
            INSERT INTO schedules (id, name, time_zone, phases, exceptions)
            VALUES ($1, $2, $3, $4::jsonb, $5::jsonb)
            RETURNING *
            """,
            schedule.id,
            schedule.name,
            schedule.time_zone,
            phases,
            exceptions,
        )
    except asyncpg.UniqueViolationError:
        raise ScheduleNameTaken(f"A schedule named {schedule.name!r} exists.") from None
    return record_of(row)


async def update_schedule(connection: asyncpg.Connection, schedule: Schedule) -> ScheduleRecord:
    """Write ``schedule`` over the stored one and bump its generation.

    :raises ScheduleNameTaken: the new name is in use by another schedule.
    """
    phases, exceptions = _docs(schedule)
    try:
        row = await connection.fetchrow(
            """
            UPDATE schedules
               SET name = $2, time_zone = $3, phases = $4::jsonb, exceptions = $5::jsonb,
                   generation = generation + 1, updated_at = now()
             WHERE id = $1
            RETURNING *
            """,
            schedule.id,
            schedule.name,
            schedule.time_zone,
            phases,
            exceptions,
        )
    except asyncpg.UniqueViolationError:
        raise ScheduleNameTaken(f"A schedule named {schedule.name!r} exists.") from None
    assert row is not None
    return record_of(row)


async def get_schedule(
    db: Db, schedule_id: uuid.UUID, *, for_update: bool = False
) -> ScheduleRecord | None:
    """The schedule ``schedule_id``, or ``None``; ``for_update`` locks its row."""
    lock = " FOR UPDATE" if for_update else ""
    row = await db.fetchrow(f"SELECT * FROM schedules WHERE id = $1{lock}", schedule_id)
    return None if row is None else record_of(row)


async def get_schedules(
    db: Db, schedule_ids: Collection[uuid.UUID]
) -> dict[uuid.UUID, ScheduleRecord]:
    """The schedules of ``schedule_ids`` that exist, by id."""
    rows = await db.fetch(
        "SELECT * FROM schedules WHERE id = ANY($1::uuid[])", list(set(schedule_ids))
    )
    return {row["id"]: record_of(row) for row in rows}


async def list_schedules(db: Db, *, limit: int, after: str | None) -> list[ScheduleRecord]:
    """Schedules by name (without case), after the name ``after``."""
    rows = await db.fetch(
        """
        SELECT * FROM schedules
         WHERE $1::text IS NULL OR lower(name) > lower($1)
         ORDER BY lower(name)
         LIMIT $2
        """,
        after,
        limit,
    )
    return [record_of(row) for row in rows]


async def pools_using(db: Db, schedule_id: uuid.UUID) -> list[str]:
    """The names of the pools that reference the schedule."""
    rows = await db.fetch(
        "SELECT name FROM pools WHERE schedule_id = $1 ORDER BY lower(name)", schedule_id
    )
    return [row["name"] for row in rows]


async def delete_schedule(connection: asyncpg.Connection, schedule_id: uuid.UUID) -> bool:
    """Delete the schedule; whether it existed."""
    deleted = await connection.fetchval(
        "DELETE FROM schedules WHERE id = $1 RETURNING true", schedule_id
    )
    return bool(deleted)


# --------------------------------------------------------------------------- samples


async def record_sample(
    connection: asyncpg.Connection, pool_id: uuid.UUID, sample: CapacitySample
) -> None:
    """Record what a pool had at a pass (a second sample at the same instant replaces it)."""
    await connection.execute(
        """
        INSERT INTO pool_capacity_samples (pool_id, at, ready, in_use, powered_off, other,
                                           phase, min_ready, spare)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
        ON CONFLICT (pool_id, at) DO UPDATE
           SET ready = EXCLUDED.ready, in_use = EXCLUDED.in_use,
               powered_off = EXCLUDED.powered_off, other = EXCLUDED.other,
               phase = EXCLUDED.phase, min_ready = EXCLUDED.min_ready, spare = EXCLUDED.spare
        """,
        pool_id,
        sample.at,
        sample.ready,
        sample.in_use,
        sample.powered_off,
        sample.other,
        sample.phase,
        sample.min_ready,
        sample.spare,
    )


async def prune_samples(
    connection: asyncpg.Connection, before: datetime, pool_ids: Collection[uuid.UUID]
) -> int:
    """Delete the samples of ``pool_ids`` older than ``before``; how many went."""
    status: str = await connection.execute(
        "DELETE FROM pool_capacity_samples WHERE pool_id = ANY($2::uuid[]) AND at < $1",
        before,
        list(pool_ids),
    )
    return int(status.rsplit(" ", 1)[-1])


async def samples_between(
    db: Db, pool_id: uuid.UUID, start: datetime, end: datetime, *, limit: int
) -> list[CapacitySample]:
    """The pool's samples from ``start`` to ``end``, oldest first, at most ``limit``."""
    rows = await db.fetch(
        """
        SELECT * FROM (
            SELECT * FROM pool_capacity_samples
             WHERE pool_id = $1 AND at >= $2 AND at <= $3
             ORDER BY at DESC LIMIT $4
        ) recent ORDER BY at
        """,
        pool_id,
        start,
        end,
        limit,
    )
    return [
        CapacitySample(
            at=row["at"],
            ready=row["ready"],
            in_use=row["in_use"],
            powered_off=row["powered_off"],
            other=row["other"],
            phase=row["phase"],
            min_ready=row["min_ready"],
            spare=row["spare"],
        )
        for row in rows
    ]
