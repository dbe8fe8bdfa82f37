"""Session recording turned on from the pool form, in Chromium (issue 37).

The finding: turning a pool's session recording on was possible through the API only, and the
pool page never said recording was on. Here the administrator opens a pool's settings, turns
recording on in its session policy (keystrokes left out), saves, and the pool page says the
session policy in force, recording included; the API agrees, and saving the form again (an
unrelated change) keeps recording on.

The instance is the console test's (:mod:`tests.e2e.console_instance`); every page visited is
saved as a screenshot and checked with axe-core.
"""

from __future__ import annotations

from tests.e2e.console_instance import ADMIN, TIMEOUT, Instance, api_call, visit
from tests.e2e.console_pools import chromium, entitled_pool, signed_in_page


async def test_recording_is_turned_on_from_the_pool_form(instance: Instance) -> None:
    from playwright.async_api import async_playwright, expect

    pool = await entitled_pool(instance, "recorded", "recorded", min_size=0, spare=0, max_size=1)
    async with async_playwright() as playwright:
        browser = await chromium(playwright)
        try:
            page = await signed_in_page(instance, browser, ADMIN, f"/pools/{pool['id']}")
            policy = page.get_by_test_id("pool-session-policy")
            await expect(policy).to_contain_text("not recorded", timeout=TIMEOUT)
            await page.get_by_role("button", name="Edit settings").click()
            await page.get_by_text("Session policy", exact=True).click()
            record = page.get_by_role("checkbox", name="Record sessions")
            keys = page.get_by_role("checkbox", name="Record keystrokes too")
            await expect(keys).to_be_disabled()  # only with recording on
            await record.check()
            await expect(keys).to_be_enabled()
            await expect(keys).not_to_be_checked()
            await visit(instance, page, "pool-form-recording")
            await page.get_by_role("button", name="Save changes").click()
            await expect(policy).to_contain_text("recorded (without keystrokes)", timeout=TIMEOUT)
            await expect(policy).not_to_contain_text("not recorded")
            await visit(instance, page, "pool-recorded")
            shown = await api_call(instance, "GET", f"/pools/{pool['id']}")
            assert shown["session_policy"]["recording"] == {
                "enabled": True,
                "include_keys": False,
            }, shown["session_policy"]

            # An unrelated change saved from the form keeps recording on.
            await page.get_by_role("button", name="Edit settings").click()
            await page.get_by_label("Description").fill("Recorded for compliance")
            await page.get_by_role("button", name="Save changes").click()
            await expect(page.get_by_text("Recorded for compliance")).to_be_visible(timeout=TIMEOUT)
            shown = await api_call(instance, "GET", f"/pools/{pool['id']}")
            assert shown["session_policy"]["recording"]["enabled"] is True, shown
        finally:
            await browser.close()
    assert instance.violations == {}, instance.violations
