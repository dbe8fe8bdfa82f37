"""Guard-rails on disconnecting and logging off a user, in Chromium (issue 37).

The session page's Disconnect and the Sessions page's Log off each ask first, naming the user,
with an optional message that his open desktop view shows before it is done (audited
``message.send`` with what it announced); see :mod:`tests.e2e.test_console_guardrails` for the
desktops' actions. Every page visited is saved as a screenshot and checked with axe-core.
"""

from __future__ import annotations

from tests.e2e.console_instance import (
    ADMIN,
    TIMEOUT,
    USER,
    Instance,
    api_call,
    visit,
)
from tests.e2e.console_pools import chromium, signed_in_page
from tests.e2e.test_console_guardrails import announced, connected_user, ready_pool


async def test_a_disconnect_and_a_log_off_name_the_user_and_tell_him_first(
    instance: Instance,
) -> None:
    from playwright.async_api import async_playwright, expect

    pool = await ready_pool(instance, "sessions")
    me = await api_call(instance, "GET", "/me", USER)
    async with async_playwright() as playwright:
        browser = await chromium(playwright)
        try:
            user = await connected_user(instance, browser, pool)
            sessions = await api_call(instance, "GET", "/sessions?state=open")
            session = sessions["items"][0]

            # The session page: Disconnect, naming him, with a message he sees first.
            admin = await signed_in_page(instance, browser, ADMIN, f"/sessions/{session['id']}")
            await admin.get_by_role("button", name=f"Disconnect {session['desktop_name']}").click()
            confirm = admin.get_by_role("dialog")
            await expect(confirm).to_contain_text(f"{USER[1]} on {session['desktop_name']}")
            await confirm.get_by_label(f"Message to {USER[1]}").fill("Disconnecting you: sorry.")
            await visit(instance, admin, "guardrails-disconnect-confirmation")
            await confirm.get_by_role(
                "button", name=f"Disconnect {session['desktop_name']}"
            ).click()
            shown = user.get_by_test_id("user-message")
            await expect(shown).to_contain_text("Disconnecting you: sorry.", timeout=8_000)
            await expect(user.locator('[data-state="connected"]')).to_have_count(0, timeout=TIMEOUT)
            await visit(instance, user, "guardrails-disconnect-message")
            await announced(instance, me["id"], "session.disconnect")

            # He connects again; the Sessions page logs him off, naming him, with a message.
            await user.goto(f"{instance.console}/my")
            await user.get_by_role("button", name=f"Open {pool['name']}").click()
            await expect(user.locator('[data-state="connected"]')).to_be_visible(timeout=TIMEOUT)
            await admin.goto(f"{instance.console}/sessions")
            row = admin.get_by_role("row").filter(has_text=USER[1]).filter(has_text="open")
            await row.get_by_role("button", name="Log off").click()
            confirm = admin.get_by_role("dialog")
            await expect(confirm).to_contain_text(USER[1])
            await expect(confirm).to_contain_text("unsaved work")
            await confirm.get_by_label(f"Message to {USER[1]}").fill("Logging you off now.")
            await visit(instance, admin, "guardrails-log-off-confirmation")
            await confirm.get_by_role("button", name="Log off").click()
            await expect(user.get_by_test_id("user-message").last).to_contain_text(
                "Logging you off now.", timeout=8_000
            )
            await expect(user.locator('[data-state="connected"]')).to_have_count(0, timeout=TIMEOUT)
            await announced(instance, me["id"], "desktop.forced_logoff")
        finally:
            await browser.close()
    assert instance.violations == {}, instance.violations
