"""The help desk in Chromium, against ``deskpool run all`` (issue 38's browser test).

A user is entitled to one pool and not to another; he opens his desktop. An administrator finds
him on the help desk by name, sees that he can open the first pool (he holds a desktop there)
and why he cannot open the second (not entitled), sends him a message that his open desktop view
shows at once, and logs him off: his tunnel closes and his desktop view says so. Every page
visited is saved and checked with axe-core.
"""

from __future__ import annotations

from tests.e2e.console_instance import ADMIN, TIMEOUT, USER, Instance, api_call, sign_in, visit
from tests.e2e.console_pools import chromium, entitled_pool, pool_desktops, simulated_cluster

from deskpool.testing.processes import until


async def test_the_help_desk_finds_a_user_explains_a_pool_messages_and_logs_him_off(
    instance: Instance,
) -> None:
    from playwright.async_api import async_playwright, expect

    pool = await entitled_pool(instance, "helpdesk", "helpdesk", min_size=1, spare=0, max_size=2)
    cluster = await api_call(instance, "POST", "/clusters", json=simulated_cluster("closed"))
    closed = await api_call(
        instance,
        "POST",
        "/pools",
        json={
            "name": "finance-only",
            "cluster_id": cluster["id"],
            "template": "ubuntu-22.04",
            "kind": "non_persistent",
            "os_type": "linux",
            "naming_pattern": "fin-{n:02}",
            "max_size": 1,
        },
    )

    async def ready() -> bool:
        return [d["state"] for d in await pool_desktops(instance, pool["id"])] == ["ready"]

    await until(ready, "the pool's desktop is ready", seconds=90, every=0.5)
    async with async_playwright() as playwright:
        browser = await chromium(playwright)
        try:
            user = await (
                await browser.new_context(viewport={"width": 1280, "height": 900})
            ).new_page()
            await sign_in(instance, user, USER)
            await user.wait_for_url("**/my")
            await user.get_by_role("button", name=f"Open {pool['name']}").click()
            await expect(user.locator('[data-state="connected"]')).to_be_visible(timeout=TIMEOUT)

            admin = await (
                await browser.new_context(viewport={"width": 1280, "height": 900})
            ).new_page()
            await sign_in(instance, admin, ADMIN)
            await admin.get_by_role("link", name="Help desk").click()
            await admin.get_by_label("Find a user").fill("desk us")
            await admin.get_by_role("button", name="Search").click()
            await visit(instance, admin, "helpdesk-search")
            await admin.get_by_role("link", name=USER[1]).click()
            await expect(admin.get_by_role("heading", name=USER[1])).to_be_visible(timeout=TIMEOUT)

            pools = admin.get_by_test_id("helpdesk-pools")
            mine = pools.get_by_role("row").filter(has_text=pool["name"])
            await expect(mine).to_contain_text("He holds a desktop in this pool")
            await expect(mine).to_contain_text("direct entitlement")
            refused = pools.get_by_role("row").filter(has_text=closed["name"])
            await expect(refused).to_have_attribute("data-access", "not_entitled")
            await expect(refused).to_contain_text("He is not entitled to this pool")
            await visit(instance, admin, "helpdesk-user")

            # A message: his open desktop view shows it at once.
            await admin.get_by_label("Severity").select_option("warning")
            await admin.get_by_label("Message", exact=True).fill("The help desk is looking at it.")
            await admin.get_by_role("button", name="Send").click()
            await expect(admin.get_by_test_id("message-sent")).to_be_visible(timeout=TIMEOUT)
            shown = user.get_by_test_id("user-message")
            await expect(shown).to_contain_text("The help desk is looking at it.", timeout=8_000)
            await expect(shown).to_contain_text("Warning from your administrator")
            await visit(instance, user, "helpdesk-message-in-desktop-view")

            # Logged off from the help desk: his view ends and says so.
            desktop = (await pool_desktops(instance, pool["id"]))[0]
            await admin.get_by_role("button", name=f"Log {USER[1]} off {desktop['name']}").click()
            # The confirmation names him (issue 37's guard-rails); no message this time.
            confirm = admin.get_by_role("dialog")
            await expect(confirm).to_contain_text(f"Log {USER[1]} off {desktop['name']}?")
            await confirm.get_by_role("button", name=f"Log off {desktop['name']}").click()
            # The gateway closes his tunnel (SESSION_CLOSED), and his view says so in words.
            await expect(user.locator('[data-state="connected"]')).to_have_count(0, timeout=TIMEOUT)
            state = user.get_by_role("toolbar", name="Desktop").get_by_role("status")
            await expect(state).to_have_text("Session closed", timeout=TIMEOUT)
            await visit(instance, user, "helpdesk-logged-off")
            audit = await api_call(
                instance, "GET", f"/audit-events?resource_id={desktop['id']}&limit=50"
            )
            assert "desktop.forced_logoff" in {e["action"] for e in audit["items"]}, audit
        finally:
            await browser.close()
    assert instance.violations == {}, instance.violations
