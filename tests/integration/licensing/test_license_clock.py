"""The license with the process clock a year behind or a year ahead of the database server's.

Audited writes are never refused (an event whose month has no partition is kept in the default
partition, which audit maintenance drains), the watermark task keeps saving evidence, and the
process says how far its clock is off: in the license state, ``/readyz`` and the log.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from tests.integration.licensing.test_license_faults import watermark_run
from tests.support.licensing import (
    Clock,
)

from deskpool.actor import Actor
from deskpool.audit import DEFAULT_PARTITION, maintain_audit_partitions, month_of, partition_name
from deskpool.licensing import service
from deskpool.licensing.document import LicenseExpired
from deskpool.licensing.model import LicenseStatus
from deskpool.ops import create_ops_app
from deskpool.runtime import Runtime
from deskpool.testing.licensing import TestVendor

YEAR = timedelta(days=365)


async def partitions_of(db: asyncpg.Connection, action_prefix: str) -> set[str]:
    rows = await db.fetch(
        "SELECT tableoid::regclass::text AS partition FROM audit_events WHERE action LIKE $1",
        action_prefix + "%",
    )
    return {row["partition"] for row in rows}


@pytest.mark.parametrize("skew", [-YEAR, YEAR], ids=["a year behind", "a year ahead"])
async def test_a_clock_a_year_off_audits_saves_evidence_and_says_how_far(
    skew: timedelta,
    client: Any,
    new_caller: Any,
    aiohttp_client: Any,
    lic_runtime: Runtime,
    license_vendor: TestVendor,
    db: asyncpg.Connection,
    caplog: pytest.LogCaptureFixture,
) -> None:
    real = datetime.now(UTC)
    lic_runtime.licensing.clock = Clock(real + skew)
    way = "behind" if skew < timedelta(0) else "ahead of"
    manager = await new_caller("license:manage", "license:read")
    document = license_vendor.issue(expires_at=real + 2 * YEAR)
    with caplog.at_level(logging.WARNING, logger="deskpool.licensing.context"):
        installed = await client.put(
            "/api/v1/license", json={"document": document}, headers=manager
        )
    # The install's audit event is kept (in the default partition: its month has none).
    assert installed.status == 200, await installed.text()
    state = await installed.json()
    assert state["status"] == "valid"
    assert await partitions_of(db, "license.install") == {DEFAULT_PARTITION}
    # The license state, the log and /readyz say how far the clock is off.
    offset = state["clock"]["offset_from_database_seconds"]
    assert abs(offset - skew.total_seconds()) < 60
    assert state["clock"]["within_tolerance"] is False
    told = f"days {way} the database server's"
    assert any(told in reason for reason in state["reasons"]), state["reasons"]
    assert any(told in record.getMessage() for record in caplog.records)
    ops = await aiohttp_client(create_ops_app(lic_runtime))
    ready = await (await ops.get("/readyz")).json()
    assert ready["checks"]["clock"]["ok"] is True
    assert abs(ready["checks"]["clock"]["offset_from_database_seconds"] - offset) < 60
    assert ready["checks"]["clock"]["within_tolerance"] is False
    # The watermark task keeps saving what it detects, whatever the clock.
    await watermark_run(lic_runtime)
    await db.execute("UPDATE license_watermark SET instant = instant - interval '30 days'")
    await watermark_run(lic_runtime)
    assert await db.fetchval("SELECT evidence FROM license_watermark") == "tampered"
    assert await partitions_of(db, "license.watermark_tampered") == {DEFAULT_PARTITION}
    shown = await (await client.get("/api/v1/license", headers=manager)).json()
    assert shown["watermark"]["integrity"] == "tampered"
    # Audit maintenance moves the kept events into the partition of their month.
    month = month_of(real + skew)
    try:
        await maintain_audit_partitions(db, 0)
        assert await partitions_of(db, "license.") == {partition_name(month)}
    finally:
        await db.execute(f'DROP TABLE IF EXISTS "{partition_name(month)}"')


async def test_a_clock_a_year_ahead_with_a_valid_license_installed(
    db: asyncpg.Connection, make_context: Any, license_vendor: TestVendor
) -> None:
    real = datetime.now(UTC)
    actor = Actor.system("test:clock")
    on_time = make_context(Clock(real))
    lasting = license_vendor.issue(expires_at=real + 2 * YEAR)
    await service.install_license(db, on_time, lasting, actor)
    await service.persist_watermark(db, on_time)
    # The worker's clock jumps a year ahead and it persists the watermark there.
    ahead = make_context(Clock(real + YEAR))
    await service.persist_watermark(db, ahead)
    judged = await service.current_judgement(db, ahead)
    assert judged.status is LicenseStatus.VALID
    assert any("days ahead of the database server's" in r for r in judged.reasons)
    # The clock is put right: the license valid beyond the jump stays valid, judged by the
    # watermark, and the state says the clock is a year behind the watermark.
    fixed = await service.license_state(db, make_context(Clock(real)))
    assert fixed.judgement.status is LicenseStatus.VALID
    assert fixed.judgement.judged_at >= real + YEAR - timedelta(minutes=16)
    assert any("behind the license watermark" in r for r in fixed.judgement.reasons)
    behind = fixed.clock.from_watermark
    assert behind is not None
    assert behind < -YEAR + timedelta(minutes=1)
    # A license that ends within the jump is ended by it (expiry is judged at the later of the
    # clock and the watermark, so a clock ahead cannot be told from time that passed): what the
    # skew reports are for.
    with pytest.raises(LicenseExpired):
        await service.install_license(
            db, make_context(Clock(real)), license_vendor.issue(expires_at=real + YEAR / 2), actor
        )
