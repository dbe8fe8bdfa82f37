"""Guard-rails on what disrupts a user, in Chromium against ``deskpool run all`` (issue 37).

Issue 37's finding: power off, disconnect and delete of a desktop someone is using happened in
one click, with no confirmation naming the user and no message to him. Now every disruptive
action on a desktop or session someone uses asks first, naming him, with an optional message
that his open desktop view shows before the action is done (a message to the user, audited
``message.send`` with what it announced):

- here, the Desktops page's Power off of the desktop he is connected to;
- in :mod:`tests.e2e.test_console_session_guardrails`, the session page's Disconnect, then
  the Sessions page's Log off of his next session.

The instance is the console test's (:mod:`tests.e2e.console_instance`); every page visited is
saved as a screenshot and checked with axe-core.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.console_instance import (
    ADMIN,
    TIMEOUT,
    USER,
    Instance,
    api_call,
    open_as_the_user,
    visit,
)
from tests.e2e.console_pools import chromium, entitled_pool, pool_desktops, signed_in_page

from deskpool.testing.processes import until


async def announced(instance: Instance, user_id: str, about: str) -> dict[str, Any]:
    """The audit event of the message to ``user_id`` announcing ``about``."""
    audit = await api_call(instance, "GET", f"/audit-events?resource_id={user_id}&limit=50")
    sent = [e for e in audit["items"] if e["action"] == "message.send"]
    announcing = [e for e in sent if e["details"].get("about") == about]
    assert announcing, sent
    return announcing[0]


async def ready_pool(instance: Instance, name: str) -> dict[str, Any]:
    """A pool ``name`` entitled to the user, with one desktop ready (another may come)."""
    pool = await entitled_pool(instance, name, name, min_size=1, spare=0, max_size=2)

    async def ready() -> bool:
        return "ready" in [d["state"] for d in await pool_desktops(instance, pool["id"])]

    await until(ready, "the pool's desktop is ready", seconds=90, every=0.5)
    return pool


async def connected_user(instance: Instance, browser: Any, pool: dict[str, Any]) -> Any:
    """The user's page (a context of its own), connected to a desktop of ``pool``."""
    user = await (await browser.new_context(viewport={"width": 1280, "height": 900})).new_page()
    await open_as_the_user(instance, user, pool["name"])
    return user


async def test_a_power_off_names_the_user_and_tells_him_first(instance: Instance) -> None:
    from playwright.async_api import async_playwright, expect

    pool = await ready_pool(instance, "guarded")
    me = await api_call(instance, "GET", "/me", USER)
    async with async_playwright() as playwright:
        browser = await chromium(playwright)
        try:
            user = await connected_user(instance, browser, pool)
            desktops = await pool_desktops(instance, pool["id"])
            [desktop] = [d for d in desktops if d["state"] == "in_use"]

            admin = await signed_in_page(instance, browser, ADMIN, "/desktops")
            row = admin.get_by_role("row").filter(has_text=desktop["name"])
            await expect(row).to_contain_text("connected", timeout=TIMEOUT)
            await row.get_by_role("button", name="Power off").click()
            confirm = admin.get_by_role("dialog")
            await expect(confirm).to_contain_text(f"{USER[1]} on {desktop['name']}")
            await confirm.get_by_label(f"Message to {USER[1]}").fill(
                "Your desktop is powered off for maintenance in a moment: save your work."
            )
            await visit(instance, admin, "guardrails-power-off-confirmation")
            await confirm.get_by_role("button", name=f"Power off {desktop['name']}").click()

            shown = user.get_by_test_id("user-message")
            await expect(shown).to_contain_text("save your work", timeout=8_000)
            await expect(shown).to_contain_text(ADMIN[1])
            await visit(instance, user, "guardrails-power-off-message")
            await expect(user.locator('[data-state="connected"]')).to_have_count(0, timeout=TIMEOUT)
            sent = await announced(instance, me["id"], "desktop.power_off")
            assert sent["details"]["desktop_id"] == desktop["id"], sent
        finally:
            await browser.close()
    assert instance.violations == {}, instance.violations
