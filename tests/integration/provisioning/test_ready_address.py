"""A desktop's address is recorded when it becomes ready (issue 39, Build 3).

So that neither its opening nor the redemption of its token asks the driver where it is shown.
The worker here has a master key (the address may hold credentials: it is sealed), so this
module has a database of its own: no sealed value is left in the provisioning tests' one.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import asyncpg
import pytest
from tests.secret_leak_guard import LeakGuard
from tests.support.provisioning import MakePool, RunJob, add_desktop

from deskpool.desktops import store as store_desktops
from deskpool.desktops.jobs import POWER_OFF, POWER_ON, PROVISION, enqueue_desktop_job
from deskpool.pools.model import DesktopState
from deskpool.runtime import Runtime
from deskpool.sessions.tokens import address_context
from deskpool.testing.pytest_plugin import fresh_database
from deskpool.testing.services import ServiceAddresses


@pytest.fixture(scope="module")
def provisioning_database(test_servers: ServiceAddresses) -> Iterator[str]:
    with fresh_database(test_servers, "deskpool_module") as url:
        yield url


@pytest.fixture
def worker_environ(worker_environ: dict[str, str], leak_guard: LeakGuard) -> dict[str, str]:
    return {**worker_environ, "SECRETS_MASTER_KEY": leak_guard.master_key()}


async def address_of(db: asyncpg.Connection, desktop_id: uuid.UUID) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await db.fetchrow(
        "SELECT * FROM desktop_addresses WHERE desktop_id = $1", desktop_id
    )
    return row


async def test_a_desktop_ready_has_its_address_recorded_and_a_restart_forgets_it(
    db: asyncpg.Connection, make_pool: MakePool, run_job: RunJob, runtime: Runtime
) -> None:
    pool = await make_pool()
    desktop = await add_desktop(db, pool)
    await run_job((await enqueue_desktop_job(db, PROVISION, desktop)).id)
    ready = await store_desktops.get_desktop(db, desktop.id)
    assert ready is not None
    assert ready.state is DesktopState.READY

    recorded = await address_of(db, desktop.id)
    assert recorded is not None
    assert (recorded["vm_id"], recorded["preference"]) == (ready.vm_id, "")
    target = json.loads(
        runtime.secret_store.decrypt(bytes(recorded["sealed"]), address_context(desktop.id))
    )
    assert target["protocol"] == "vnc"
    assert target["hostname"]
    assert target["port"] > 0

    # Powered off and on again: forgotten when it starts, recorded again once it is ready.
    await run_job((await enqueue_desktop_job(db, POWER_OFF, ready)).id)
    off = await store_desktops.get_desktop(db, desktop.id)
    assert off is not None
    await run_job((await enqueue_desktop_job(db, POWER_ON, off)).id)
    again = await address_of(db, desktop.id)
    assert again is not None
    assert again["recorded_at"] > recorded["recorded_at"]
