"""Audit events and the worker's partition maintenance against the real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from deskpool.audit import (
    DEFAULT_PARTITION,
    add_months,
    create_partition,
    existing_partitions,
    list_audit_events,
    maintain_audit_partitions,
    month_of,
    partition_name,
    record_audit_event,
)
from deskpool.events import AuditEvent
from deskpool.testing.processes import until


def event(occurred_at: datetime, action: str = "pool.create") -> AuditEvent:
    return AuditEvent(
        action=action,
        actor="user-1",
        resource_type="pools",
        resource_id="p1",
        outcome="success",
        occurred_at=occurred_at,
        request_id="req-1",
        source_address="127.0.0.1",
        details={"name": "lab"},
    )


async def partition_of(db: asyncpg.Connection, event_id: int) -> str:
    return str(
        await db.fetchval(
            "SELECT tableoid::regclass::text FROM audit_events WHERE id = $1", event_id
        )
    )


async def test_an_event_is_recorded_in_its_months_partition(db: asyncpg.Connection) -> None:
    now = datetime.now(UTC)
    async with db.transaction():
        event_id = await record_audit_event(db, event(now))
    assert await partition_of(db, event_id) == partition_name(month_of(now))
    row = await db.fetchrow("SELECT * FROM audit_events WHERE id = $1", event_id)
    assert row["details"] == '{"name": "lab"}'
    assert (row["actor"], row["action"], row["outcome"]) == ("user-1", "pool.create", "success")


async def test_an_event_rolled_back_with_its_change_is_not_recorded(db: asyncpg.Connection) -> None:
    before = await db.fetchval("SELECT count(*) FROM audit_events")
    transaction = db.transaction()
    await transaction.start()
    await record_audit_event(db, event(datetime.now(UTC), action="pool.rolled_back"))
    await transaction.rollback()
    assert await db.fetchval("SELECT count(*) FROM audit_events") == before


async def test_the_workers_first_maintenance_run_provisions_and_prunes_partitions(
    db: asyncpg.Connection, start_worker: Any
) -> None:
    now = datetime.now(UTC)
    current = month_of(now)
    # Start from a table that only has the current month and one from three months ago.
    for month in await existing_partitions(db):
        if month != current:
            await db.execute(f'ALTER TABLE audit_events DETACH PARTITION "{partition_name(month)}"')
            await db.execute(f'DROP TABLE "{partition_name(month)}"')
    old = add_months(current, -3)
    await create_partition(db, old)
    await record_audit_event(db, event(old.replace(day=15)))
    kept = await record_audit_event(db, event(now))

    await start_worker(AUDIT_RETENTION_MONTHS="1")

    async def maintained() -> bool:
        return bool(
            await db.fetchval(
                "SELECT last_outcome = 'succeeded' FROM periodic_tasks "
                "WHERE name = 'audit_maintenance'"
            )
        )

    await until(maintained, "audit maintenance succeeded")
    partitions = set(await existing_partitions(db))
    assert {add_months(current, n) for n in range(4)} <= partitions
    assert old not in partitions
    assert await partition_of(db, kept) == partition_name(current)
    assert await db.fetchval("SELECT to_regclass($1)", partition_name(old)) is None


async def test_zero_retention_keeps_old_partitions(db: asyncpg.Connection) -> None:
    current = month_of(datetime.now(UTC))
    ancient = add_months(current, -30)
    await create_partition(db, ancient)
    try:
        plan = await maintain_audit_partitions(db, 0)
        assert plan.drop == ()
        assert ancient in await existing_partitions(db)
        plan = await maintain_audit_partitions(db, 6)
        assert ancient in plan.drop
        assert ancient not in await existing_partitions(db)
    finally:
        await db.execute(f'DROP TABLE IF EXISTS "{partition_name(ancient)}"')


async def test_an_event_outside_the_partitions_is_kept_then_moved_to_its_month(
    db: asyncpg.Connection,
) -> None:
    now = datetime.now(UTC)
    # A process whose clock is a year behind, and one whose clock is a year ahead.
    behind, ahead = now - timedelta(days=365), now + timedelta(days=365)
    months = [month_of(behind), month_of(ahead)]
    assert not set(months) & set(await existing_partitions(db))
    try:
        async with db.transaction():
            ids = [await record_audit_event(db, event(moment)) for moment in (behind, ahead)]
        assert [await partition_of(db, event_id) for event_id in ids] == [DEFAULT_PARTITION] * 2
        listed = await list_audit_events(db, before=None, filters={"actor": "user-1"}, limit=500)
        assert set(ids) <= {row["id"] for row in listed}
        plan = await maintain_audit_partitions(db, 0)
        assert not set(months) & set(plan.create)  # made while draining, before the plan
        assert [await partition_of(db, event_id) for event_id in ids] == [
            partition_name(month) for month in months
        ]
        assert await db.fetchval(f"SELECT count(*) FROM {DEFAULT_PARTITION}") == 0
        # The moved rows keep their ids, and new events of those months go to the partitions.
        later = await record_audit_event(db, event(behind + timedelta(seconds=1)))
        assert await partition_of(db, later) == partition_name(months[0])
        assert later > max(ids)
    finally:
        for month in months:
            await db.execute(f'DROP TABLE IF EXISTS "{partition_name(month)}"')
