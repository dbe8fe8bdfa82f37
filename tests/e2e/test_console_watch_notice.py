"""A watched user is told, in Chromium against ``deskpool run all`` (issue 37's guard-rails).

Issue 37's finding: an administrator could watch a user's session (read-only) and the user was
never told. Now, while an administrator watches, the user's desktop view says so, naming him,
and the notice goes away when he stops watching (live events both ways, no reload). Every page
visited is saved as a screenshot and checked with axe-core.
"""

from __future__ import annotations

from tests.e2e.console_instance import ADMIN, TIMEOUT, USER, Instance, visit
from tests.e2e.console_pools import chromium, signed_in_page
from tests.e2e.test_console_guardrails import connected_user, ready_pool

#: How long the user's view may take to follow (a live event, one request).
FOLLOW_MS = 8_000


async def test_a_watched_user_is_told_while_he_is_watched(instance: Instance) -> None:
    from playwright.async_api import async_playwright, expect

    pool = await ready_pool(instance, "watched")
    async with async_playwright() as playwright:
        browser = await chromium(playwright)
        try:
            user = await connected_user(instance, browser, pool)
            notice = user.get_by_test_id("watch-notice")
            await expect(notice).to_have_count(0)

            admin = await signed_in_page(instance, browser, ADMIN, "/sessions")
            row = admin.get_by_role("row").filter(has_text=USER[1])
            await row.get_by_role("button", name="Watch").click()
            await expect(admin.locator('[data-state="connected"]')).to_be_visible(timeout=TIMEOUT)
            await expect(notice).to_contain_text(ADMIN[1], timeout=FOLLOW_MS)
            await expect(notice).to_contain_text("watching your desktop")
            await visit(instance, user, "watch-notice")

            await admin.get_by_role("button", name="Stop watching").click()
            await expect(notice).to_have_count(0, timeout=FOLLOW_MS)
            await expect(user.locator('[data-state="connected"]')).to_be_visible()
            await visit(instance, user, "watch-notice-gone")
        finally:
            await browser.close()
    assert instance.violations == {}, instance.violations
