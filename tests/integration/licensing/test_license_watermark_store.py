"""The watermark in PostgreSQL with injected clocks: set back, edited, two workers at once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry
from tests.support.licensing import (
    Clock,
)

from deskpool.actor import Actor
from deskpool.licensing import service, store
from deskpool.licensing.document import LicenseExpired
from deskpool.licensing.metrics import LicenseMetrics
from deskpool.licensing.model import FREE_LIMITS, GRACE_PERIOD, LicenseStatus, WatermarkIntegrity
from deskpool.licensing.watermark import StoredWatermark, WatermarkKeys, advance
from deskpool.testing.licensing import TestVendor

ACTOR = Actor.system("test:licensing")


async def install(db: asyncpg.Connection, context: Any, vendor: TestVendor, **claims: Any) -> str:
    state = await service.install_license(db, context, vendor.issue(**claims), ACTOR)
    assert state.judgement.license is not None
    return state.judgement.license.id


@pytest.mark.parametrize("back", [timedelta(days=1), timedelta(weeks=1), timedelta(days=365)])
async def test_an_expired_license_stays_expired_when_the_clock_is_set_back(
    db: asyncpg.Connection, make_context: Any, license_vendor: TestVendor, back: timedelta
) -> None:
    start = datetime.now(UTC)
    expires = start + timedelta(days=2)
    clock = Clock(start)
    worker = make_context(clock)
    await install(
        db, worker, license_vendor, issued_at=start - timedelta(days=9), expires_at=expires
    )
    await service.persist_watermark(db, worker)
    # Time passes beyond the grace period; the worker persists what it saw.
    clock.now = expires + GRACE_PERIOD + timedelta(hours=2)
    await service.persist_watermark(db, worker)
    assert (await service.current_judgement(db, worker)).status is LicenseStatus.EXPIRED
    # Someone sets the clock back; a freshly started process judges by the watermark.
    restarted = make_context(Clock(clock.now - back))
    judgement = await service.current_judgement(db, restarted)
    assert judgement.status is LicenseStatus.EXPIRED
    assert judgement.limits == FREE_LIMITS
    # Re-installing the same license with the clock set back is refused as expired too.
    with pytest.raises(LicenseExpired):
        await service.install_license(
            db,
            restarted,
            license_vendor.issue(issued_at=start - timedelta(days=9), expires_at=expires),
            ACTOR,
        )


async def test_a_watermark_edited_in_the_database_is_detected(
    db: asyncpg.Connection, make_context: Any, license_vendor: TestVendor
) -> None:
    clock = Clock()
    worker = make_context(clock)
    await install(db, worker, license_vendor)
    await service.persist_watermark(db, worker)
    original = await db.fetchrow("SELECT instant, seq, mac FROM license_watermark")
    await db.execute("UPDATE license_watermark SET instant = instant - interval '30 days'")
    # Any process sees it at once, and judges the license expired.
    judgement = await service.current_judgement(db, make_context(Clock()))
    assert judgement.status is LicenseStatus.EXPIRED
    state = await service.license_state(db, make_context(Clock()))
    assert state.watermark.integrity is WatermarkIntegrity.TAMPERED
    # The worker records the evidence (audited once); putting the old row back clears nothing.
    await service.persist_watermark(db, worker)
    await service.persist_watermark(db, worker)
    await db.execute(
        "UPDATE license_watermark SET evidence = NULL, evidence_detail = NULL, "
        "evidence_at = NULL, instant = $1, seq = $2, mac = $3",
        original["instant"],
        original["seq"],
        original["mac"],
    )
    # The restored row is valid but older than what the worker saw: moved backwards.
    assert (await service.current_judgement(db, worker)).status is LicenseStatus.EXPIRED
    await service.persist_watermark(db, worker)
    fresh = make_context(Clock())
    assert (await service.current_judgement(db, fresh)).status is LicenseStatus.EXPIRED
    events = await db.fetch(
        "SELECT action FROM audit_events WHERE action LIKE 'license.watermark_%'"
    )
    assert [row["action"] for row in events] == [
        "license.watermark_tampered",
        "license.watermark_backwards",
    ]
    # A license the vendor issued after the evidence clears it.
    clock.now += timedelta(minutes=5)
    await install(db, worker, license_vendor, issued_at=clock.now)
    assert (await service.current_judgement(db, worker)).status is LicenseStatus.VALID


async def test_two_workers_persisting_at_once_never_move_it_backwards(
    db: asyncpg.Connection, licensing_database: str, make_context: Any
) -> None:
    now = datetime.now(UTC)
    ahead = make_context(Clock(now + timedelta(days=365)))
    behind = make_context(Clock(now))
    connections = [await asyncpg.connect(licensing_database) for _ in range(2)]
    seen: list[datetime] = []

    async def persist(connection: asyncpg.Connection, context: Any, times: int) -> None:
        for _ in range(times):
            await service.persist_watermark(connection, context)
            seen.append(await connection.fetchval("SELECT instant FROM license_watermark"))

    try:
        await asyncio.gather(
            persist(connections[0], behind, 15),
            persist(connections[1], ahead, 15),
            persist(db, behind, 15),
        )
    finally:
        for connection in connections:
            await connection.close()
    row = await store.get_watermark(db)
    assert row is not None
    assert row.instant == now + timedelta(days=365)
    assert row.seq == 45
    assert seen == sorted(seen)
    # And the SQL itself refuses an earlier instant whatever the caller computed.
    assert not await store.write_watermark(db, StoredWatermark(now, row.seq + 1))
    assert (await service.current_judgement(db, behind)).status is LicenseStatus.FREE


async def test_a_state_change_is_audited_once_and_shown_in_metrics(
    db: asyncpg.Connection, make_context: Any, license_vendor: TestVendor
) -> None:
    start = datetime.now(UTC)
    clocks = [Clock(start), Clock(start)]
    registry = CollectorRegistry()
    workers = [make_context(clock) for clock in clocks]
    workers[0].metrics = LicenseMetrics(registry)
    await install(db, workers[0], license_vendor, expires_at=start + timedelta(hours=1))
    for clock in clocks:
        clock.now = start + timedelta(hours=2)
    for worker in workers:
        await service.persist_watermark(db, worker)
        judgement = await service.current_judgement(db, worker)
        await service.record_judgement(db, worker, judgement)
    changes = await db.fetch(
        "SELECT details FROM audit_events WHERE action = 'license.state_change'"
    )
    assert len(changes) == 1
    assert '"grace"' in changes[0]["details"]
    assert registry.get_sample_value("deskpool_license_status", {"status": "grace"}) == 1
    assert registry.get_sample_value("deskpool_license_status", {"status": "valid"}) == 0
    assert (
        registry.get_sample_value("deskpool_license_state_changes_total", {"status": "grace"}) == 1
    )


async def test_an_old_row_put_back_is_backwards_even_to_a_fresh_process(
    db: asyncpg.Connection, make_context: Any, license_vendor: TestVendor, master_key: bytes
) -> None:
    await install(db, make_context(Clock()), license_vendor)
    # A watermark row from a day before the installation, with a MAC that verifies (as a
    # restored backup or a copied-back row would have), replaces the current one.
    instance = await store.instance_id(db)
    keys = WatermarkKeys.derive(master_key)
    old, _ = advance(
        StoredWatermark(None, 0), datetime.now(UTC) - timedelta(days=1), keys, instance
    )
    await db.execute(
        "UPDATE license_watermark SET instant = $1, seq = $2, mac = $3",
        old.instant,
        old.seq,
        old.mac,
    )
    fresh = make_context(Clock())
    state = await service.license_state(db, fresh)
    assert state.watermark.integrity is WatermarkIntegrity.BACKWARDS
    assert state.judgement.status is LicenseStatus.EXPIRED


async def test_an_installed_license_edited_in_the_database_is_invalid(
    db: asyncpg.Connection, make_context: Any, license_vendor: TestVendor
) -> None:
    await install(db, make_context(Clock()), license_vendor, limits={"desktops": 10})
    await db.execute(
        """UPDATE license_installation
              SET document = replace(document, '"desktops": 10', '"desktops": 10000')"""
    )
    judgement = await service.current_judgement(db, make_context(Clock()))
    assert judgement.status is LicenseStatus.INVALID
    assert judgement.limits == FREE_LIMITS
    assert "license_modified" in judgement.reasons[0]
