"""Preparing your desktop in Chromium: 9 a.m., a pool with no desktop at all, below its maximum.

Against ``deskpool run all`` (the console test's instance), with the start-on-connect test's
simulated cluster (guest agents answering 6 s after boot, so the build lasts long enough to be
seen): a pool with no desktop and no schedule (``min_size`` 0, ``max_size`` 2). A user
entitled to it signs in; My desktops offers **Open** (opening it builds one for him); opening it
shows **Preparing your desktop** with its progress instead of an error (the API's 202 with
``starting.building``), then connects by itself once the desktop built for him is his, and the
desktop daemon simulator's screen is drawn on its canvas. Each page visited is saved as a
screenshot and checked with axe-core.
"""

from __future__ import annotations

from tests.e2e.console_instance import CHROMIUM, TIMEOUT, USER, Instance, sign_in
from tests.e2e.test_console_start_on_connect import _prepare, open_and_wait


async def test_a_user_sees_preparing_your_desktop_while_the_pool_builds_one(
    instance: Instance,
) -> None:
    """9 a.m.: a pool with no desktop at all, below its maximum; opening it builds one."""
    from playwright.async_api import async_playwright, expect

    pool = await _prepare(instance, grows=True)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await (
                await browser.new_context(viewport={"width": 1280, "height": 900})
            ).new_page()
            await sign_in(instance, page, USER)
            await page.wait_for_url("**/my")
            card = page.get_by_role("article").filter(has_text=pool)
            await expect(card).to_contain_text("opening this pool starts one", timeout=TIMEOUT)
            # Opening it is no error: the view says a desktop is being prepared, with progress,
            # then connects by itself once the desktop built for the user is his.
            await open_and_wait(instance, page, pool, "Preparing your desktop", "desktop-preparing")
        finally:
            await browser.close()
    assert instance.violations == {}, instance.violations
