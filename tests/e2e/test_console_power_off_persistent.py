"""An administrator's power-off of a persistent desktop its owner is connected to (issue 37).

The finding: an administrator powered off a desktop while its user was on it. His session
ended with the VM, and the log-off left the persistent desktop his and "ready" with its VM
off; nothing acted on it, and his Open failed with "vm_not_running ... try again shortly" for
as long as it was watched. Now the pool page stops saying "in use" within seconds, and the
desktop is his again and running: his next Open connects him, within a minute of the click.

The instance is the console test's (:mod:`tests.e2e.console_instance`); every page visited is
saved as a screenshot and checked with axe-core.
"""

from __future__ import annotations

import time

from tests.e2e.console_instance import (
    ADMIN,
    TIMEOUT,
    USER,
    Instance,
    open_as_the_user,
    visit,
)
from tests.e2e.console_pools import (
    chromium,
    entitled_pool,
    pool_desktops,
    signed_in_page,
    until_states,
)

from deskpool.testing.processes import until

#: How long the pages may take to agree with what happened (live events, one reconcile pass).
AGREE_MS = 8_000


async def test_a_persistent_desktop_powered_off_under_its_connected_owner_opens_again(
    instance: Instance,
) -> None:
    from playwright.async_api import async_playwright, expect

    pool = await entitled_pool(
        instance, "owned", "owned", kind="persistent", min_size=1, spare=0, max_size=1
    )

    await until_states(instance, pool["id"], "ready")
    async with async_playwright() as playwright:
        browser = await chromium(playwright)
        try:
            user = await (await browser.new_context()).new_page()
            await open_as_the_user(instance, user, pool["name"])
            [held] = await pool_desktops(instance, pool["id"])
            assert held["state"] == "in_use", held
            admin = await signed_in_page(instance, browser, ADMIN, f"/pools/{pool['id']}")
            row = admin.get_by_role("row").filter(has_text=held["name"])
            await expect(row).to_contain_text("in use", timeout=TIMEOUT)
            await row.get_by_role("button", name="Power off").click()
            confirm = admin.get_by_role("dialog")
            await expect(confirm).to_contain_text(USER[1])
            await confirm.get_by_role("button", name=f"power off {held['name']}").click()
            powered_at = time.monotonic()
            # His session ends with the VM; the pool page stops saying he is on it.
            await expect(user.locator('[data-state="connected"]')).to_have_count(
                0, timeout=AGREE_MS
            )
            await expect(admin.get_by_test_id("count-in_use")).to_have_count(0, timeout=AGREE_MS)
            await expect(row).not_to_contain_text("in use", timeout=AGREE_MS)
            await visit(instance, admin, "owned-pool-after-power-off")

            # The desktop stays his, and his next Open connects him to it.
            async def his_again() -> bool:
                [desktop] = await pool_desktops(instance, pool["id"])
                return desktop["assigned_user"] == held["assigned_user"]

            await until(his_again, "the desktop stays its owner's", seconds=10, every=0.5)
            await user.goto(instance.console + "/my")
            await user.get_by_role("button", name=f"Open {pool['name']}").click()
            await expect(user.locator('[data-state="connected"]')).to_be_visible(timeout=60_000)
            await visit(instance, user, "owned-user-reconnected")
            assert time.monotonic() - powered_at < 60
            [after] = await pool_desktops(instance, pool["id"])
            assert after["name"] == held["name"], after
        finally:
            await browser.close()
    assert instance.violations == {}, instance.violations
