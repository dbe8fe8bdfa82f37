"""A pool whose reconciliation fails says so on its console page, in words, with since when.

Against ``deskpool run all`` (the console test's instance): two pools on a simulated cluster;
one is given a schedule whose exception ends after 9999-12-31 in ``Etc/GMT+12``, stored behind
the API's back (the API refuses such a date; this is about one already stored). The other pool
still gets its desktop; the poisoned pool's page shows the failure as an alert (what failed,
since when, what to do), and the pools list marks it. Both pages are checked with axe-core.
"""

from __future__ import annotations

import uuid
from datetime import date, time

import asyncpg
from tests.e2e.console_instance import ADMIN, CHROMIUM, TIMEOUT, Instance, api_call, sign_in, visit

from deskpool.schedules import store as schedule_store
from deskpool.schedules.model import ExceptionDates, Phase, Schedule, Settings
from deskpool.testing.processes import until


async def _poison_schedule(database_url: str) -> str:
    """A schedule whose one exception ends past the calendar, stored as is; its id."""
    connection = await asyncpg.connect(database_url)
    try:
        record = await schedule_store.insert_schedule(
            connection,
            Schedule(
                id=uuid.uuid4(),
                name="forever",
                time_zone="Etc/GMT+12",
                phases=(
                    Phase(
                        name="day",
                        days=frozenset(range(7)),
                        start=time(0),
                        settings=Settings(min_ready=1),
                    ),
                ),
                exceptions=(
                    ExceptionDates(
                        name="last day", first=date(9999, 12, 31), last=date(9999, 12, 31)
                    ),
                ),
            ),
        )
    finally:
        await connection.close()
    return str(record.schedule.id)


async def test_the_pool_page_says_its_reconciliation_fails(
    instance: Instance, console_database: str
) -> None:
    from playwright.async_api import async_playwright, expect

    cluster = await api_call(
        instance,
        "POST",
        "/clusters",
        json={
            "name": "poisoned",
            "driver": "simulator",
            "endpoint": "simulator://poisoned",
            "options": {"clone_seconds": 0.1, "templates": [{"name": "ubuntu-22.04"}]},
        },
    )
    pools = {}
    for name in ("steady", "poisoned"):
        pools[name] = await api_call(
            instance,
            "POST",
            "/pools",
            json={
                "name": name,
                "cluster_id": cluster["id"],
                "template": "ubuntu-22.04",
                "kind": "non_persistent",
                "os_type": "linux",
                "min_size": 1,
                "max_size": 2,
                "naming_pattern": f"{name[:3]}-{{n:02}}",
            },
        )
    schedule_id = await _poison_schedule(console_database)
    poisoned = pools["poisoned"]["id"]
    await api_call(instance, "PATCH", f"/pools/{poisoned}", json={"schedule_id": schedule_id})

    async def failing() -> bool:
        shown = await api_call(instance, "GET", f"/pools/{poisoned}")
        return shown["reconcile_error"] is not None

    async def steady_ready() -> bool:
        shown = await api_call(instance, "GET", f"/pools/{pools['steady']['id']}")
        return shown["counts"]["by_state"]["ready"] == 1 and shown["reconcile_error"] is None

    await until(failing, "the poisoned pool reports its reconcile_error", seconds=60)
    await until(steady_ready, "the other pool has its ready desktop", seconds=60)

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        page = await (await browser.new_context(viewport={"width": 1280, "height": 900})).new_page()
        try:
            await sign_in(instance, page, ADMIN)
            await page.goto(f"{instance.console}/pools/{poisoned}")
            alert = page.get_by_test_id("reconcile-error")
            await expect(alert).to_be_visible(timeout=TIMEOUT)
            await expect(alert).to_have_attribute("role", "alert")
            await expect(alert).to_contain_text("Reconciliation of this pool is failing since")
            await expect(alert).to_contain_text("capacity schedule 'forever' cannot be computed")
            await expect(alert).to_contain_text("correct or replace the schedule")
            await visit(instance, page, "pool-reconcile-error")
            await page.goto(f"{instance.console}/pools")
            row = page.get_by_role("row").filter(has_text="poisoned")
            await expect(row).to_contain_text("reconciliation failing", timeout=TIMEOUT)
            steady = page.get_by_role("row").filter(has_text="steady")
            await expect(steady).not_to_contain_text("reconciliation failing")
            await visit(instance, page, "pools-reconcile-error")
        finally:
            await browser.close()
    assert not instance.violations, instance.violations
