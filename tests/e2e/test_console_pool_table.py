"""The pool page's desktop table agrees with its counters, in Chromium (issue 37).

The finding: after a schedule powered a pool's desktops off, the pool page's counters said
"powered off 3" while its desktop table still said "ready" for 20-30 s (the counters followed
the reconciliation's live event, the table did not). Here a pool of three ready desktops is
given a schedule whose phase powers idle desktops off, while the administrator watches its
page: once the counters say three are powered off, the table says the same within seconds.

The instance is the console test's (:mod:`tests.e2e.console_instance`); every page visited is
saved as a screenshot and checked with axe-core.
"""

from __future__ import annotations

import time

from tests.e2e.console_instance import ADMIN, TIMEOUT, Instance, api_call, visit
from tests.e2e.console_pools import (
    always_night,
    chromium,
    entitled_pool,
    pool_desktops,
    signed_in_page,
)

from deskpool.testing.processes import until

#: How long the table may lag behind the counters (live events).
AGREE_MS = 5_000


async def test_the_pool_pages_table_agrees_with_its_counters_after_a_schedule_change(
    instance: Instance,
) -> None:
    from playwright.async_api import async_playwright, expect

    pool = await entitled_pool(instance, "tables", "tables", min_size=3, spare=0, max_size=3)

    async def ready() -> bool:
        states = [d["state"] for d in await pool_desktops(instance, pool["id"])]
        return states == ["ready"] * 3

    await until(ready, "the pool's three desktops are ready", seconds=90, every=0.5)
    schedule = await always_night(instance)
    async with async_playwright() as playwright:
        browser = await chromium(playwright)
        try:
            page = await signed_in_page(instance, browser, ADMIN, f"/pools/{pool['id']}")
            await expect(page.get_by_test_id("count-ready")).to_have_text("3", timeout=TIMEOUT)
            rows = page.get_by_role("row").filter(has_text="tabl-")
            await expect(rows.filter(has_text="ready")).to_have_count(3)
            await api_call(
                instance,
                "PATCH",
                f"/pools/{pool['id']}",
                json={"schedule_id": schedule["id"]},
            )
            # The counters see the schedule's power-off; the table agrees within moments.
            await expect(page.get_by_test_id("count-powered_off")).to_have_text(
                "3", timeout=TIMEOUT
            )
            seen_at = time.monotonic()
            await expect(rows.filter(has_text="powered off")).to_have_count(3, timeout=AGREE_MS)
            await expect(rows.filter(has_text="ready")).to_have_count(0)
            assert time.monotonic() - seen_at < AGREE_MS / 1000
            await visit(instance, page, "truth-table-after-schedule")
        finally:
            await browser.close()
    assert instance.violations == {}, instance.violations
