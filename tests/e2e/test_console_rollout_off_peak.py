"""A rollout under an off-peak schedule, in Chromium against ``deskpool run all`` (issue 37).

The finding: rollouts are pushed at night, when schedules power desktops off. A rollout on a
pool whose schedule had powered its desktops off sat at "canary 0 %, 0 being replaced" for six
minutes with no reason given, "Reconcile now" did nothing, and only detaching the schedule let
it finish. Here a pool of two desktops under a schedule that keeps none ready (idle: power_off)
has both powered off; the administrator starts a rollout to the cluster's other template from
the pool's rollout page. While it runs, the pool's page shows it and both pages say what it
waits for; it succeeds within its
budget, leaves no desktop beyond the pool's size, and the schedule powers the new desktops off
again once it is over.

The instance is the console test's (:mod:`tests.e2e.console_instance`); every page visited is
saved as a screenshot and checked with axe-core.
"""

from __future__ import annotations

from tests.e2e.console_instance import ADMIN, TIMEOUT, Instance, visit
from tests.e2e.console_pools import (
    always_night,
    chromium,
    entitled_pool,
    pool_desktops,
    signed_in_page,
)

from deskpool.testing.processes import until

#: How long the rollout of two desktops may take (two rebuilds on the simulator, a few passes).
BUDGET_MS = 90_000


async def test_a_rollout_under_an_off_peak_schedule_finishes_within_its_budget(
    instance: Instance,
) -> None:
    from playwright.async_api import async_playwright, expect

    templates = [{"name": "ubuntu-22.04"}, {"name": "ubuntu-24.04"}]
    schedule = await always_night(instance)
    pool = await entitled_pool(
        instance,
        "nightly",
        "nightly",
        min_size=2,
        spare=0,
        max_size=2,
        schedule_id=schedule["id"],
        simulator={"templates": templates},
    )

    async def asleep() -> bool:
        states = [d["state"] for d in await pool_desktops(instance, pool["id"])]
        return states == ["powered_off", "powered_off"]

    await until(asleep, "the schedule powered both desktops off", seconds=120, every=0.5)
    async with async_playwright() as playwright:
        browser = await chromium(playwright)
        try:
            page = await signed_in_page(instance, browser, ADMIN, f"/pools/{pool['id']}/rollouts")
            await page.get_by_role("button", name="Start a rollout").click()
            await page.get_by_label("New template").select_option("9001")  # ubuntu-24.04
            await page.get_by_role("button", name="Start the rollout").click()
            rollout = page.get_by_test_id("rollout").first
            await expect(rollout).to_be_visible(timeout=TIMEOUT)
            # The pool's page shows the running rollout and what it waits for.
            await page.get_by_role("link", name="Back to the pool").click()
            running = page.get_by_test_id("pool-rollout")
            await expect(running).to_contain_text("Rollout 9000 → 9001", timeout=5_000)
            await expect(running).to_contain_text("waiting for")
            await visit(instance, page, "rollout-off-peak-pool")
            await running.get_by_role("link", name="Follow the rollout").click()
            # While it runs it says what it waits for.
            await expect(
                rollout.get_by_test_id("rollout-waiting").or_(rollout.get_by_text("succeeded"))
            ).to_be_visible(timeout=TIMEOUT)
            await visit(instance, page, "rollout-off-peak-running")
            await expect(page.get_by_test_id("rollout-percent").first).to_have_text(
                "100 %", timeout=BUDGET_MS
            )
            await expect(rollout.get_by_text("succeeded")).to_be_visible(timeout=BUDGET_MS)
            await visit(instance, page, "rollout-off-peak-done")
        finally:
            await browser.close()
    desktops = await pool_desktops(instance, pool["id"])
    assert len(desktops) == 2, desktops  # no desktop left beyond the pool's size
    assert {d["template"] for d in desktops} == {"9001"}, desktops

    async def asleep_again() -> bool:
        return [d["state"] for d in await pool_desktops(instance, pool["id"])] == [
            "powered_off",
            "powered_off",
        ]

    await until(asleep_again, "the schedule powers the new desktops off", seconds=60, every=0.5)
    assert instance.violations == {}, instance.violations
