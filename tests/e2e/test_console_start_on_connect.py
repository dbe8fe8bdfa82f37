"""Start on connect in Chromium, against ``deskpool run all`` (the console test's instance).

Through the API, a simulated cluster (guest agents answering 6 s after boot, so the start
lasts long enough to be seen) and a pool whose schedule's phase in force keeps no desktop ready
and powers idle ones off: its one desktop (``min_size`` 1) is built, then powered off. A user
entitled to it signs in, and:

1. My desktops offers **Open** once the desktop is powered off (the pool says a desktop will be
   started: the page follows it through the user's live events, no reload);
2. opening it shows **Starting your desktop** with its progress, instead of an error;
3. the view connects by itself once the desktop is handed to the user, and the desktop daemon
   simulator's screen is drawn on its canvas.

Each page visited is saved as a screenshot and checked with axe-core.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.console_instance import (
    ADMIN,
    CHROMIUM,
    TIMEOUT,
    USER,
    Instance,
    api_call,
    entitle_the_user,
    sign_in,
    visit,
)
from tests.e2e.console_pools import always_night
from tests.e2e.test_console import CANVAS_NOT_BLANK

from deskpool.testing.processes import until


async def _prepare(instance: Instance, *, grows: bool = False) -> str:
    """The cluster, the off-peak schedule and the pool, the user entitled; the pool's name.

    :param grows: instead, a pool with no desktop and no schedule, below its maximum: opening
        it builds one for the user.
    """
    cluster = await api_call(
        instance,
        "POST",
        "/clusters",
        ADMIN,
        json={
            "name": "morning" if grows else "night",
            "driver": "simulator",
            "endpoint": "simulator://morning" if grows else "simulator://night",
            "options": {
                "clone_seconds": 0.2,
                "boot_seconds": 0.05,
                "agent_seconds": 6,
                "shutdown_seconds": 0.05,
                "templates": [{"name": "ubuntu-22.04"}],
            },
        },
    )
    body = {
        "name": "night-pool",
        "cluster_id": cluster["id"],
        "template": "ubuntu-22.04",
        "kind": "non_persistent",
        "os_type": "linux",
        "min_size": 1,
        "spare": 0,
        "max_size": 2,
        "naming_pattern": "night-{n:02}",
    }
    if grows:
        body |= {"name": "morning-pool", "min_size": 0, "naming_pattern": "morning-{n:02}"}
    else:
        body["schedule_id"] = (await always_night(instance))["id"]
    pool = await api_call(instance, "POST", "/pools", ADMIN, json=body)
    await entitle_the_user(instance, pool["id"])
    if not grows:
        # Built, then powered off by the phase in force. (While it is built, it could be
        # reserved to a user who opens the pool: that is tests/e2e/test_console_grow.py's.)
        async def powered_off() -> bool:
            listed = await api_call(instance, "GET", f"/desktops?pool_id={pool['id']}", ADMIN)
            return [item["state"] for item in listed["items"]] == ["powered_off"]

        await until(powered_off, "the pool's desktop is powered off", seconds=120, every=0.5)
    return str(pool["name"])


async def open_and_wait(instance: Instance, page: Any, pool: str, says: str, shot: str) -> None:
    """Open ``pool``: the view ``says`` so with its progress, then connects and is drawn."""
    from playwright.async_api import expect

    await page.get_by_role("button", name=f"Open {pool}").click()
    starting = page.get_by_test_id("desktop-starting")
    await expect(starting).to_be_visible(timeout=TIMEOUT)
    await expect(starting).to_contain_text(says)
    await expect(page.get_by_role("progressbar")).to_be_visible()
    await visit(instance, page, shot)
    # It connects by itself once the desktop is the user's, and is drawn.
    await expect(page.locator('[data-state="connected"]')).to_be_visible(timeout=120_000)
    await expect(starting).to_have_count(0)

    async def drawn() -> bool:
        return bool(await page.evaluate(CANVAS_NOT_BLANK))

    await until(drawn, "a canvas of the display is drawn", seconds=30, every=0.2)


async def test_a_user_sees_starting_your_desktop_then_the_desktop(instance: Instance) -> None:
    from playwright.async_api import async_playwright, expect

    pool = await _prepare(instance)
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
            # 1. The desktop is built, then powered off: the card says one will be started.
            card = page.get_by_role("article").filter(has_text=pool)
            await expect(card).to_contain_text("opening this pool starts one", timeout=120_000)
            await visit(instance, page, "my-desktops-startable")
            # 2. and 3. Opening it starts it, with its progress, then it is drawn.
            await open_and_wait(instance, page, pool, "Starting your desktop", "desktop-starting")
            await visit(instance, page, "desktop-started")
        finally:
            await browser.close()
    assert instance.violations == {}, instance.violations
