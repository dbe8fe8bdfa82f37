"""The schedule use cases: create, list, show, replace, delete, preview, and a pool's capacity.

Each change validates, writes, audits and enqueues the reconciliation of the pools using the
schedule in one transaction, so a new phase applies at once rather than at the next periodic
pass. A schedule a pool references cannot be deleted (409 ``schedule_in_use``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from deskpool.actor import Actor
from deskpool.errors import Conflict, FieldError, NotFound, ValidationFailed, error_text
from deskpool.pools import lookups as pools
from deskpool.pools.jobs import enqueue_pool_reconcile
from deskpool.schedules import store
from deskpool.schedules.model import (
    InForce,
    Schedule,
    ScheduleSettings,
    changes_between,
    exception_doc,
    phase_doc,
    targets_of,
    validate_schedule,
)
from deskpool.schedules.samples import CapacitySample
from deskpool.schedules.store import ScheduleRecord

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

#: The longest period a preview or a capacity query covers.
MAX_PERIOD = timedelta(days=31)
#: The most samples a capacity query returns (the newest of the period).
MAX_SAMPLES = 5000


class ScheduleUnusable(Conflict):
    """The stored schedule's phases cannot be computed (HTTP 409): dates out of the calendar.

    The API refuses such schedules; one stored before (or behind the API) can only be
    corrected or replaced. Its pools say so in their ``reconcile_error``.
    """

    code = "schedule_unusable"
    title = "Schedule cannot be computed"


class ScheduleInUse(Conflict):
    """The schedule is referenced by pools (HTTP 409)."""

    code = "schedule_in_use"
    title = "Schedule in use"


def checked_schedule(schedule_id: uuid.UUID, settings: ScheduleSettings) -> Schedule:
    """The schedule ``settings`` make under ``schedule_id``, validated.

    :raises ValidationFailed: see :func:`~deskpool.schedules.model.validate_schedule`.
    """
    schedule = settings.schedule(schedule_id)
    problems = validate_schedule(schedule)
    if problems:
        raise ValidationFailed(problems)
    return schedule


def _details(schedule: Schedule) -> dict[str, Any]:
    return {
        "name": schedule.name,
        "time_zone": schedule.time_zone,
        "phases": [phase_doc(phase) for phase in schedule.phases],
        "exceptions": [exception_doc(exception) for exception in schedule.exceptions],
    }


async def _reconcile_users(connection: Any, schedule_id: uuid.UUID) -> list[str]:
    rows = await connection.fetch("SELECT id FROM pools WHERE schedule_id = $1", schedule_id)
    for row in rows:
        await enqueue_pool_reconcile(connection, row["id"])
    return [str(row["id"]) for row in rows]


async def create_schedule(
    runtime: Runtime, actor: Actor, settings: ScheduleSettings
) -> ScheduleRecord:
    """Create a schedule. :raises ValidationFailed: invalid. :raises ScheduleNameTaken: taken."""
    schedule = checked_schedule(uuid.uuid4(), settings)
    async with runtime.db.acquire() as connection, connection.transaction():
        record = await store.insert_schedule(connection, schedule)
        await actor.record(
            connection, "schedule.create", "schedules", str(schedule.id), _details(schedule)
        )
    return record


async def get_schedule(runtime: Runtime, schedule_id: uuid.UUID) -> ScheduleRecord:
    """The schedule; :class:`NotFound` when there is none."""
    record = await store.get_schedule(runtime.db, schedule_id)
    if record is None:
        raise NotFound(f"No schedule has the id {schedule_id}.")
    return record


async def list_schedules(
    runtime: Runtime, *, limit: int, after: str | None
) -> list[ScheduleRecord]:
    """Schedules by name, after the name ``after``."""
    return await store.list_schedules(runtime.db, limit=limit, after=after)


async def replace_schedule(
    runtime: Runtime, actor: Actor, schedule_id: uuid.UUID, settings: ScheduleSettings
) -> ScheduleRecord:
    """Replace the schedule's settings; the pools using it are reconciled at once."""
    schedule = checked_schedule(schedule_id, settings)
    async with runtime.db.acquire() as connection, connection.transaction():
        current = await store.get_schedule(connection, schedule_id, for_update=True)
        if current is None:
            raise NotFound(f"No schedule has the id {schedule_id}.")
        record = await store.update_schedule(connection, schedule)
        used_by = await _reconcile_users(connection, schedule_id)
        await actor.record(
            connection,
            "schedule.update",
            "schedules",
            str(schedule_id),
            {"before": _details(current.schedule), "after": _details(schedule), "pools": used_by},
        )
    return record


async def delete_schedule(runtime: Runtime, actor: Actor, schedule_id: uuid.UUID) -> None:
    """Delete the schedule. :raises ScheduleInUse: pools reference it."""
    async with runtime.db.acquire() as connection, connection.transaction():
        current = await store.get_schedule(connection, schedule_id, for_update=True)
        if current is None:
            raise NotFound(f"No schedule has the id {schedule_id}.")
        users = await store.pools_using(connection, schedule_id)
        if users:
            raise ScheduleInUse(
                f"Schedule {current.schedule.name!r} is used by pools: {', '.join(users[:10])}.",
                extra={"pools": users},
            )
        await store.delete_schedule(connection, schedule_id)
        await actor.record(
            connection, "schedule.delete", "schedules", str(schedule_id), _details(current.schedule)
        )


def _period(start: datetime, end: datetime) -> None:
    if end <= start:
        raise ValidationFailed([FieldError("/to", "must be after from")])
    if end - start > MAX_PERIOD:
        raise ValidationFailed(
            [FieldError("/to", f"must be at most {MAX_PERIOD.days} days after from")]
        )


def preview(schedule: Schedule, start: datetime, end: datetime) -> list[InForce]:
    """The phases ``schedule`` puts in force from ``start`` to ``end`` (checked period)."""
    _period(start, end)
    return changes_between(schedule, start, end)


@dataclass(frozen=True)
class PlannedTargets:
    """From ``since``, the phase ``phase`` asks for ``min_ready`` ready and ``spare`` spare."""

    since: datetime
    phase: str | None
    exception: str | None
    min_ready: int
    spare: int
    idle: str


@dataclass(frozen=True)
class Capacity:
    """A pool's planned targets over a period next to what it had (reconciler samples)."""

    planned: list[PlannedTargets]
    actual: list[CapacitySample]


async def pool_capacity(
    runtime: Runtime, pool_id: uuid.UUID, start: datetime, end: datetime
) -> Capacity:
    """The pool's planned targets from ``start`` to ``end`` and its samples in that period.

    A pool without a schedule plans its ``min_size`` and ``spare`` for the whole period.
    """
    _period(start, end)
    record = await pools.get_pool(runtime, pool_id)
    pool = record.pool
    planned: list[PlannedTargets]
    schedule = None
    if pool.schedule_id is not None:
        found = await store.get_schedule(runtime.db, pool.schedule_id)
        schedule = None if found is None else found.schedule
    if schedule is None:
        planned = [PlannedTargets(start, None, None, pool.min_size, pool.spare, "keep")]
    else:
        planned = []
        try:
            changes = changes_between(schedule, start, end)
        except (ArithmeticError, ValueError) as error:
            raise ScheduleUnusable(
                f"The phases of schedule {schedule.name!r} cannot be computed "
                f"({error_text(error)}); correct or replace the schedule."
            ) from None
        for change in changes:
            targets = targets_of(change.settings, pool.max_size)
            planned.append(
                PlannedTargets(
                    change.since,
                    change.phase,
                    change.exception,
                    targets.min_ready,
                    targets.spare,
                    str(targets.idle),
                )
            )
    actual = await store.samples_between(runtime.db, pool_id, start, end, limit=MAX_SAMPLES)
    return Capacity(planned, actual)
