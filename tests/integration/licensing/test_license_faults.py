"""The license under database faults: cut at any statement, it stays as committed, and valid.

The database connection is cut at every statement of an install and of the worker's watermark
run. The process (the API and a worker in one runtime, as ``deskpool run all`` runs them) keeps the
highest watermark it saw in memory; remembering one from a transaction that then rolled back
made the stored watermark look moved backwards, and a valid license expired for good.
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from deskpool.jobs.periodic import PeriodicContext
from deskpool.licensing.tasks import LICENSE_WATERMARK_TASK, persist_watermark
from deskpool.outages import DATABASE, outage_of
from deskpool.runtime import Runtime
from deskpool.testing.faults import cutting_statements
from deskpool.testing.licensing import TestVendor


async def watermark_run(runtime: Runtime) -> None:
    """The worker's periodic watermark task, run once in ``runtime``'s process."""
    await persist_watermark(
        PeriodicContext(
            LICENSE_WATERMARK_TASK,
            runtime,
            fence=1,
            started_at=datetime.now(UTC),
            interval=timedelta(hours=1),
            lease_duration=timedelta(minutes=1),
        )
    )


async def failure_of(work: Awaitable[None]) -> Exception | None:
    """What ``work`` raised, if anything."""
    try:
        await work
    except Exception as error:
        return error
    return None


async def shown(client: Any, headers: dict[str, str]) -> dict[str, Any]:
    response = await client.get("/api/v1/license", headers=headers)
    assert response.status == 200, await response.text()
    state: dict[str, Any] = await response.json()
    return state


async def assert_valid_as_committed(
    client: Any, headers: dict[str, str], db: asyncpg.Connection, runtime: Runtime
) -> str:
    """The license the database holds is shown valid, before and after a watermark run."""
    installed = await db.fetchval("SELECT license_id FROM license_installation")
    for _ in range(2):
        state = await shown(client, headers)
        assert state["status"] == "valid", state["reasons"]
        assert state["license"]["id"] == installed
        assert state["watermark"]["integrity"] == "intact", state["watermark"]
        await watermark_run(runtime)
    assert await db.fetchval("SELECT evidence FROM license_watermark") is None
    assert installed is not None
    return str(installed)


@pytest.fixture
async def licensed(
    client: Any, new_caller: Any, license_vendor: TestVendor, lic_runtime: Runtime
) -> dict[str, str]:
    """A valid license installed through the API; the headers of the manager who did."""
    manager: dict[str, str] = await new_caller("license:manage", "license:read")
    first = await client.put(
        "/api/v1/license", json={"document": license_vendor.issue()}, headers=manager
    )
    assert first.status == 200, await first.text()
    await watermark_run(lic_runtime)
    return manager


async def test_an_install_cut_at_every_statement_leaves_the_license_valid(
    client: Any, licensed: dict[str, str], license_vendor: TestVendor, lic_runtime: Runtime, db: Any
) -> None:
    manager = licensed
    previous = await assert_valid_as_committed(client, manager, db, lic_runtime)
    at = 0
    while True:
        document = license_vendor.issue()
        with cutting_statements(lic_runtime, at) as cut:
            response = await client.put(
                "/api/v1/license", json={"document": document}, headers=manager
            )
        if not cut.cut:
            assert response.status == 200, await response.text()
            break
        # Cut before the commit: 503 and nothing changed; cut while or after it committed:
        # the new license, whatever the answer said.
        assert response.status in {200, 503}, (at, cut.statements, await response.text())
        if response.status == 503:
            assert response.headers["Retry-After"]
        await cut.settled(db)
        installed = await assert_valid_as_committed(client, manager, db, lic_runtime)
        new_id = TestVendor.id_of(document)
        assert installed in {previous, new_id}, (at, cut.statements)
        # Sending the same document again installs it, valid.
        again = await client.put("/api/v1/license", json={"document": document}, headers=manager)
        assert again.status == 200, await again.text()
        body = await again.json()
        assert (body["status"], body["license"]["id"]) == ("valid", new_id)
        previous = await assert_valid_as_committed(client, manager, db, lic_runtime)
        at += 1
    # Every statement of an install (BEGIN, savepoints and COMMIT included) was cut once (the
    # last one's cut may have come as its connection was released).
    assert len(cut.statements) <= at <= len(cut.statements) + 1, cut.statements
    assert len(cut.statements) >= 10, cut.statements
    assert "COMMIT;" in cut.statements


async def test_a_watermark_run_cut_at_every_statement_leaves_the_license_valid(
    client: Any, licensed: dict[str, str], lic_runtime: Runtime, db: Any
) -> None:
    reader = licensed
    await assert_valid_as_committed(client, reader, db, lic_runtime)
    at = 0
    while True:
        with cutting_statements(lic_runtime, at) as cut:
            failure = await failure_of(watermark_run(lic_runtime))
        assert failure is None or (cut.cut and outage_of(failure) == DATABASE), repr(failure)
        if not cut.cut:
            break
        await cut.settled(db)
        seq = await db.fetchval("SELECT seq FROM license_watermark")
        await assert_valid_as_committed(client, reader, db, lic_runtime)
        assert await db.fetchval("SELECT seq FROM license_watermark") > seq
        at += 1
    assert len(cut.statements) <= at <= len(cut.statements) + 1, cut.statements
    assert len(cut.statements) >= 5, cut.statements
