"""A pool's health says when its users get no desktop, and why, on the pool list and page.

Issue 37's finding: pools with min 0 and spare 0 were "healthy" while entitled users saw a
disabled Open and "try again shortly" forever, and a rollout waiting on a full pool said
nothing there. Since issue 39 an open of a pool below its maximum builds a desktop for the
user, so such a pool serves him (it is healthy); a pool at its maximum with every desktop held
does not. Here, in Chromium against ``deskpool run all``, a pool of one desktop, held by the
user, with a rollout waiting for him to log off:

1. the pool list and the pool's page say no new user gets a desktop, and what the rollout
   waits for; the pool with min 0 and spare 0 beside it is healthy;
2. the cluster list shows the last check, which every reconciliation pass makes (it said
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

#: The health of a pool at its maximum with its one desktop held.
NOBODY_NEW = "no desktop for a new user: every desktop (1) is held and the pool is at max_size (1)"


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
            row = page.get_by_role("row").filter(has_text=full["name"]).first
            await expect(row).to_contain_text("degraded", timeout=TIMEOUT)
            reasons = row.get_by_test_id("pool-health-reasons")
            await expect(reasons).to_contain_text(NOBODY_NEW, timeout=TIMEOUT)
            await expect(reasons).to_contain_text(rollout_waits, timeout=TIMEOUT)
            # Below its maximum an open builds a desktop: min 0 and spare 0 serve the user.
            row = page.get_by_role("row").filter(has_text=empty["name"]).first
            await expect(row).to_contain_text("healthy", timeout=TIMEOUT)
            await visit(instance, page, "pool-health-list")
            await page.get_by_role("link", name=full["name"], exact=True).click()
            reasons = page.locator("ul.reasons")
            await expect(reasons).to_contain_text(NOBODY_NEW, timeout=TIMEOUT)
            await expect(reasons).to_contain_text(rollout_waits)
            await visit(instance, page, "pool-health-page")
            # The cluster list shows the check reconciliation made, not "never".
            await page.goto(f"{instance.console}/clusters")
            row = page.get_by_role("row").filter(has_text="simulator://empty")
            await expect(row).to_contain_text("success", timeout=TIMEOUT)
            await expect(row).not_to_contain_text("never")
            await visit(instance, page, "cluster-list-last-check")
        finally:
            await browser.close()
    assert instance.violations == {}, instance.violations
