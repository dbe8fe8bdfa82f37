"""A pool's health says when its users get no desktop, and why, on the pool list and page.

Issue 37's finding: pools with min 0 and spare 0 were "healthy" while entitled users saw a
disabled Open and "try again shortly" forever, and a rollout waiting on a full pool said
nothing there. Here, in Chromium against ``deskpool run all``:

1. a pool with ``min_size`` 0 and ``spare`` 0 is degraded, and the pool list and the pool's
   page both say no new user gets a desktop, and why;
2. a pool of one desktop, held by the user, with a rollout waiting for him to log off: both
   pages say no new user gets one, and what the rollout waits for;
3. the cluster list shows the last check, which every reconciliation pass makes (it said
   "Last check: never" after half an hour of use).

The instance is the console test's (:mod:`tests.e2e.console_instance`); every page visited is
saved as a screenshot and checked with axe-core.
"""

from __future__ import annotations

from tests.e2e.console_instance import ADMIN, TIMEOUT, USER, Instance, api_call, visit
from tests.e2e.console_pools import (
    chromium,
    entitled_pool,
    signed_in_page,
    until_states,
)

#: The health of a pool that makes no desktop for a new user.
NOBODY_NEW = "no desktop for a new user: none is free and spare 0 makes none (min_size 0)"


async def test_the_pool_list_and_page_say_why_users_get_no_desktop(instance: Instance) -> None:
    from playwright.async_api import async_playwright, expect

    empty = await entitled_pool(instance, "empty", "empty", min_size=0, spare=0, max_size=2)
    full = await entitled_pool(
        instance,
        "full",
        "full",
        min_size=1,
        spare=0,
        max_size=1,
        simulator={"templates": [{"name": "ubuntu-22.04"}, {"name": "ubuntu-24.04"}]},
    )

    await until_states(instance, full["id"], "ready")
    held = await api_call(instance, "POST", f"/me/pools/{full['id']}/desktop", USER)
    await api_call(
        instance,
        "POST",
        f"/pools/{full['id']}/rollouts",
        json={"template": "ubuntu-24.04", "in_use": "wait_for_logoff", "min_ready": 0},
    )
    rollout_waits = f"the rollout to template 9001 waits for the user of {held['name']} to log off"
    async with async_playwright() as playwright:
        browser = await chromium(playwright)
        try:
            page = await signed_in_page(instance, browser, ADMIN, "/pools")
            row = page.get_by_role("row").filter(has_text=empty["name"]).first
            await expect(row).to_contain_text("degraded", timeout=TIMEOUT)
            await expect(row.get_by_test_id("pool-health-reasons")).to_contain_text(NOBODY_NEW)
            row = page.get_by_role("row").filter(has_text=full["name"]).first
            reasons = row.get_by_test_id("pool-health-reasons")
            await expect(reasons).to_contain_text("no desktop for a new user", timeout=TIMEOUT)
            await expect(reasons).to_contain_text(rollout_waits, timeout=TIMEOUT)
            await visit(instance, page, "pool-health-list")
            await page.get_by_role("link", name=empty["name"], exact=True).click()
            await expect(page.locator("ul.reasons")).to_contain_text(NOBODY_NEW, timeout=TIMEOUT)
            await visit(instance, page, "pool-health-page")
            await page.goto(f"{instance.console}/pools/{full['id']}")
            await expect(page.locator("ul.reasons")).to_contain_text(rollout_waits, timeout=TIMEOUT)
            # The cluster list shows the check reconciliation made, not "never".
            await page.goto(f"{instance.console}/clusters")
            row = page.get_by_role("row").filter(has_text="simulator://empty")
            await expect(row).to_contain_text("success", timeout=TIMEOUT)
            await expect(row).not_to_contain_text("never")
            await visit(instance, page, "cluster-list-last-check")
        finally:
            await browser.close()
    assert instance.violations == {}, instance.violations
