"""The schedule editor and a pool's capacity plot in Chromium, against ``deskpool run all``.

The instance is the console test's (:mod:`tests.e2e.console_instance`): every component in one
process, the test's OIDC issuer with its sign-in page and the simulator driver. Through the API,
a simulated cluster and a pool without a schedule are made. Then the administrator:

1. opens Schedules from the navigation and starts a new schedule; saving it without a name
   shows the API's problem under the name field;
2. fills it in: a name, the zone Europe/Berlin, the first phase asking for 3 ready desktops, an
   exception for today running the off-peak phase; the preview of the week is drawn (its canvas
   read pixel by pixel: the planned step's colour is there) while nothing is saved yet (the API
   lists no schedule), and it names the exception;
3. saves it: the schedule's page says the off-peak phase is in force because of the exception;
4. picks the schedule in the pool's settings; the pool's capacity plot names the schedule's
   phases, counts the recorded samples, and its canvas is drawn (read pixel by pixel too);
5. changes the schedule from its page (saved: a new generation), and deleting it while the pool
   uses it shows the API's refusal; the list says the pool uses it.
6. a user granted only ``schedules:read`` finds Schedules in the navigation and sees the
   schedule read-only (disabled fields, no save, no delete) with its preview drawn.

Every page visited is saved as a screenshot and checked with axe-core (no serious or critical
violation), as in the console test.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

from tests.e2e.console_instance import (
    ADMIN,
    CHROMIUM,
    TIMEOUT,
    USER,
    Instance,
    api_call,
    chart_drawn,
    sign_in,
    visit,
)

from deskpool.testing.processes import until

#: The planned ``min_ready`` step's colour (``COLORS.min_ready`` in web/src/schedules/chart.ts).
MIN_READY_RGB = (0x18, 0x64, 0xAB)


def _containing(text: str) -> re.Pattern[str]:
    """A pattern matching an attribute that contains ``text``."""
    return re.compile(re.escape(text))


BERLIN = ZoneInfo("Europe/Berlin")


def _first_half_hour_of_the_week(zone: ZoneInfo) -> datetime:
    """00:30 on Monday of the current week in ``zone`` (at most the next half hour from now)."""
    today = datetime.now(zone).date()
    monday = today - timedelta(days=today.weekday())
    return datetime.combine(monday, time(0, 30), tzinfo=zone)


#: The API as the administrator (or as ``who``).
_api = api_call


async def _prepare(instance: Instance) -> str:
    """A simulated cluster and a pool of one desktop without a schedule; the pool's id."""
    cluster = await _api(
        instance,
        "POST",
        "/clusters",
        json={
            "name": "schedules",
            "driver": "simulator",
            "endpoint": "simulator://schedules",
            "options": {
                "clone_seconds": 0.2,
                "boot_seconds": 0.05,
                "agent_seconds": 0.05,
                "shutdown_seconds": 0.05,
                "templates": [{"name": "ubuntu-22.04"}],
            },
        },
    )
    pool = await _api(
        instance,
        "POST",
        "/pools",
        json={
            "name": "office-pool",
            "cluster_id": cluster["id"],
            "template": "ubuntu-22.04",
            "kind": "non_persistent",
            "os_type": "linux",
            "min_size": 1,
            "spare": 0,
            "max_size": 4,
            "naming_pattern": "op-{n:02}",
        },
    )

    async def sampled() -> bool:
        capacity = await _api(instance, "GET", f"/pools/{pool['id']}/capacity")
        return bool(capacity["actual"])

    # The reconciler has recorded what the pool has at least once.
    await until(sampled, "the pool has a capacity sample", seconds=90, every=0.5)
    return str(uuid.UUID(pool["id"]))


async def test_the_schedule_editor_previews_saves_and_the_pool_plots_its_capacity(
    instance: Instance,
) -> None:
    from playwright.async_api import async_playwright, expect

    pool_id = await _prepare(instance)
    today = datetime.now(BERLIN).date().isoformat()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        context = await browser.new_context(viewport={"width": 1280, "height": 1000})
        page = await context.new_page()
        try:
            # 1. Schedules, a new one; saving it without a name is a problem at the name.
            await sign_in(instance, page, ADMIN)
            # The browser's clock at 00:30 on Monday of this week in Berlin, 23:30 UTC on the
            # Sunday before: the preview's week is Berlin's, not the UTC week that just ended
            # (CI at 23:06 UTC on a Sunday previewed the week before today's exception).
            await page.clock.set_system_time(_first_half_hour_of_the_week(BERLIN))
            await (
                page.get_by_role("navigation", name="Main")
                .get_by_role("link", name="Schedules")
                .click()
            )
            await page.wait_for_url("**/schedules")
            await expect(page.get_by_text("No schedule yet.")).to_be_visible(timeout=TIMEOUT)
            await visit(instance, page, "schedules-empty")
            await page.get_by_role("button", name="New schedule").click()
            await page.wait_for_url("**/schedules/new")
            form = page.get_by_role("form", name="New schedule")
            await form.get_by_role("button", name="Create the schedule").click()
            name = form.get_by_role("textbox", name="Name", exact=True).first
            await expect(name).to_have_attribute("aria-invalid", "true", timeout=TIMEOUT)
            await expect(form.locator(".field-error").first).to_be_visible()

            # 2. The schedule, with an exception for today; the preview before saving.
            await name.fill("Office hours")
            await expect(name).not_to_have_attribute("aria-invalid", "true")  # the edit clears it
            await form.get_by_role("combobox", name="Time zone").fill("Europe/Berlin")
            peak = form.get_by_role("group", name="Phase 1")
            await peak.get_by_label("Ready desktops (min_ready)").fill("3")
            await form.get_by_role("button", name="Add an exception").click()
            closed = form.get_by_role("group", name="Exception 1")
            await closed.get_by_role("textbox", name="Name").fill("site closed")
            await closed.get_by_label("First day").fill(today)
            await closed.get_by_label("Phase", exact=True).select_option("off-peak")
            preview = page.get_by_test_id("schedule-preview")
            await expect(preview.get_by_role("img")).to_have_attribute(
                "aria-label",
                _containing("Exceptions: site closed."),
                timeout=TIMEOUT,
            )
            await expect(preview.get_by_role("img")).to_have_attribute(
                "aria-label", _containing("peak: 3 ready, 1 spare"), timeout=TIMEOUT
            )
            pixels = await chart_drawn(page, "schedule-preview", MIN_READY_RGB)
            # Its tooltip names the phase at the pointer (the middle of the week: Thursday).
            await preview.locator("canvas").first.hover()
            await expect(preview.get_by_text("phase: ")).to_be_visible(timeout=TIMEOUT)
            assert pixels["drawn"] > 0.005 * pixels["width"] * pixels["height"], pixels
            assert page.url.endswith("/schedules/new")
            assert (await _api(instance, "GET", "/schedules"))["items"] == []
            await visit(instance, page, "schedule-editor-preview")
            await page.clock.set_system_time(datetime.now(UTC))
            await page.screenshot(
                path=str(instance.artifacts / "schedule-editor-whole.png"), full_page=True
            )

            # 3. Saved: the exception is in force today.
            await form.get_by_role("button", name="Create the schedule").click()
            await page.wait_for_url("**/schedules/*-*")
            await expect(page.get_by_test_id("schedule-in-force")).to_contain_text(
                "off-peak (site closed)", timeout=TIMEOUT
            )
            schedules = (await _api(instance, "GET", "/schedules"))["items"]
            assert [(s["name"], s["time_zone"]) for s in schedules] == [
                ("Office hours", "Europe/Berlin")
            ]
            assert schedules[0]["exceptions"][0]["first"] == today
            assert schedules[0]["phases"][0]["min_ready"] == 3
            await visit(instance, page, "schedule-saved")

            # 4. The pool uses it; its capacity plot.
            await page.goto(f"{instance.console}/pools/{pool_id}")
            await expect(page.get_by_test_id("pool-schedule")).to_contain_text(
                "No schedule", timeout=TIMEOUT
            )
            await page.get_by_role("button", name="Edit settings").click()
            await page.get_by_label("Capacity schedule").select_option(
                label="Office hours (Europe/Berlin)"
            )
            await page.get_by_role("button", name="Save changes").click()
            await expect(page.get_by_test_id("pool-schedule")).to_contain_text(
                "Schedule Office hours", timeout=TIMEOUT
            )
            plot = page.get_by_test_id("pool-capacity").get_by_role("img")
            await expect(plot).to_have_attribute(
                "aria-label", _containing("site closed: off-peak: 0 ready"), timeout=TIMEOUT
            )
            await expect(plot).to_have_attribute(
                "aria-label", _containing("Recorded: "), timeout=TIMEOUT
            )
            pixels = await chart_drawn(page, "pool-capacity", MIN_READY_RGB)
            assert pixels["drawn"] > 0.005 * pixels["width"] * pixels["height"], pixels
            assert (await _api(instance, "GET", f"/pools/{pool_id}"))["schedule_id"] == schedules[
                0
            ]["id"]
            await visit(instance, page, "pool-capacity")

            # 5. A change to the schedule is saved; deleting it while the pool uses it is refused.
            section = page.get_by_test_id("pool-schedule")
            await section.get_by_role("link", name="Office hours").click()
            form = page.get_by_role("form", name="Schedule Office hours")
            await form.get_by_role("group", name="Phase 2").get_by_label("Spare desktops").fill("2")
            await form.get_by_role("button", name="Save the schedule").click()

            async def changed() -> bool:
                shown = await _api(instance, "GET", f"/schedules/{schedules[0]['id']}")
                return bool(shown["phases"][1]["spare"] == 2 and shown["generation"] == 2)

            await until(changed, "the changed schedule is saved", seconds=30, every=0.25)
            # Refused before confirming: the dialog names the pool and offers no Delete.
            await page.get_by_role("button", name="Delete").click()
            refusal = page.get_by_role("dialog")
            await expect(refusal).to_contain_text("Pools use it: office-pool", timeout=TIMEOUT)
            await expect(refusal.get_by_role("button", name=re.compile("^Delete"))).to_have_count(0)
            await visit(instance, page, "schedule-in-use")
            await refusal.get_by_role("button", name="Close").click()
            await expect(refusal).to_be_hidden()
            assert len((await _api(instance, "GET", "/schedules"))["items"]) == 1
            await (
                page.get_by_role("navigation", name="Main")
                .get_by_role("link", name="Schedules")
                .click()
            )
            listed = page.get_by_role("table", name="Schedules")
            await expect(listed).to_contain_text("office-pool", timeout=TIMEOUT)  # used by
            await expect(listed).to_contain_text("off-peak (site closed) since")

            # 6. A user who may only read schedules sees the schedule read-only, with its preview.
            user_id = (await _api(instance, "GET", "/me", USER))["id"]
            await _api(
                instance,
                "POST",
                "/grants",
                json={
                    "subject_type": "user",
                    "subject_id": user_id,
                    "permission": "schedules:read",
                },
            )
            reader_context = await browser.new_context(viewport={"width": 1280, "height": 1000})
            reader = await reader_context.new_page()
            await sign_in(instance, reader, USER)
            await (
                reader.get_by_role("navigation", name="Main")
                .get_by_role("link", name="Schedules")
                .click()
            )
            await reader.get_by_role("link", name="Office hours").click()
            shown = reader.get_by_role("form", name="Schedule Office hours")
            await expect(shown.get_by_role("textbox", name="Name").first).to_be_disabled(
                timeout=TIMEOUT
            )
            await expect(shown.get_by_role("button", name="Save the schedule")).to_have_count(0)
            await expect(shown.get_by_role("button", name="Add a phase")).to_have_count(0)
            await expect(reader.get_by_role("button", name="Delete")).to_have_count(0)
            await expect(reader.get_by_test_id("schedule-in-force")).to_contain_text("read-only")
            await chart_drawn(reader, "schedule-preview", MIN_READY_RGB)
            await visit(instance, reader, "schedule-read-only")
        except BaseException:
            await page.screenshot(path=str(instance.artifacts / "failed-schedules.png"))
            raise
        finally:
            await browser.close()
    assert instance.violations == {}, instance.violations
