"""A console an administrator trusts (issue 37), in Chromium against ``deskpool run all``.

Names instead of ids, a navigation that reaches every page from a phone to a wide screen, the
OS mismatch marked at its field, six tabs all live.

The instance is the console test's (:mod:`tests.e2e.console_instance`): ``deskpool run all``,
the test's OIDC issuer with its sign-in page, the simulator driver and the desktop daemon
simulator. Through the API: a simulated cluster with two Linux templates and a Windows one, a
Linux pool of two desktops entitled to the user, who opens one in the browser. Then:

1. Sessions, the session page, Desktops, the pool page, Audit, Grants and the image history
   show no UUID where a name exists (the user's and the administrator's names are shown);
   Sessions is searched by the user's name and filtered by pool;
2. the rollout form offers no template of the wrong OS, and when the API still finds one (the
   cluster's listing changed since the form was loaded) it marks the template field;
3. at 390 px and 800 px wide, the navigation reaches every page;
4. six console tabs of one browser are all live, and an event reaches every one of them.

Every page visited is checked with axe-core (no serious or critical violation).
"""

from __future__ import annotations

import json
import re
import uuid
from functools import partial
from typing import Any

from tests.e2e.console_instance import (
    ADMIN,
    CHROMIUM,
    TIMEOUT,
    USER,
    Instance,
    api_call,
    entitle_the_user,
    open_as_the_user,
    sign_in,
    visit,
)

from deskpool.testing.processes import until

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
OPTIONS = {
    "clone_seconds": 0.3,
    "boot_seconds": 0.05,
    "agent_seconds": 0.05,
    "shutdown_seconds": 0.05,
    "templates": [
        {"name": "ubuntu-22.04"},
        {"name": "ubuntu-24.04"},
        {"name": "windows-11", "os": "windows"},
    ],
}
LAUNCH = {"executable_path": CHROMIUM, "args": ["--headless", "--no-sandbox", "--disable-gpu"]}
#: How far the page runs off the window sideways, and the elements that do.
OVERFLOW = """() => ({
  by: document.documentElement.scrollWidth - window.innerWidth,
  elements: [...document.querySelectorAll('body *')]
    .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1)
    .slice(0, 5).map((e) => e.tagName + '.' + e.className + ' ' + e.getBoundingClientRect().right),
})"""

#: Below this width (px) the navigation folds behind a Menu button (web/src/components/Layout.tsx).
FOLDED_BELOW = 1024

#: Every page the navigation leads to, with the heading it shows.
PAGES = {
    "Dashboard": "/dashboard",
    "My desktops": "/my",
    "Pools": "/pools",
    "Desktops": "/desktops",
    "Sessions": "/sessions",
    "Schedules": "/schedules",
    "People": "/people",
    "Reports": "/reports",
    "Recordings": "/recordings",
    "Audit": "/audit",
    "Jobs": "/jobs",
    "Clusters": "/clusters",
    "Webhooks": "/webhooks",
    "License": "/license",
}


async def _prepare(instance: Instance) -> dict[str, str]:
    """The cluster and the pool (two ready desktops, entitled to the user); their ids."""
    cluster = await api_call(
        instance,
        "POST",
        "/clusters",
        json={
            "name": "names",
            "driver": "simulator",
            "endpoint": "simulator://names",
            "options": OPTIONS,
        },
    )
    pool = await api_call(
        instance,
        "POST",
        "/pools",
        json={
            "name": "names-pool",
            "cluster_id": cluster["id"],
            "template": "ubuntu-22.04",
            "kind": "non_persistent",
            "os_type": "linux",
            "min_size": 2,
            "spare": 0,
            "max_size": 2,
            "naming_pattern": "np-{n:02}",
        },
    )
    user_id = await entitle_the_user(instance, pool["id"])

    async def ready() -> bool:
        shown = await api_call(instance, "GET", f"/pools/{pool['id']}")
        return bool(shown["counts"]["by_state"]["ready"] == 2)

    await until(ready, "the pool has two ready desktops", seconds=90, every=0.5)
    return {"cluster": cluster["id"], "pool": str(uuid.UUID(pool["id"])), "user": user_id}


async def _main_text(page: Any) -> str:
    return str(await page.locator("main").inner_text())


async def _no_uuid(instance: Instance, page: Any, name: str, *shown: str) -> None:
    """The page shows each of ``shown`` and no UUID (checked once it shows them)."""
    from playwright.async_api import expect

    for text in shown:
        shown_text = page.locator("main").locator(f"text={json.dumps(text)} >> visible=true")
        await expect(shown_text.first).to_be_visible(timeout=TIMEOUT)
    await visit(instance, page, name)
    text = await _main_text(page)
    assert not UUID.search(text), f"{name} shows ids: {UUID.findall(text)[:5]}\n{text[:2000]}"


async def test_a_console_an_administrator_trusts(instance: Instance) -> None:
    """The four findings, each a section; every section runs and all their failures are told."""
    from playwright.async_api import async_playwright

    ids = await _prepare(instance)
    failures: dict[str, str] = {}
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(**LAUNCH)
        try:
            for section in (names_not_ids, os_mismatch_at_its_field, navigation, six_tabs):
                try:
                    await section(instance, browser, ids)
                except Exception as failed:
                    failures[section.__name__] = str(failed)[:1500]
        finally:
            await browser.close()
    assert failures == {}, "\n\n".join(f"{k}: {v}" for k, v in failures.items())
    assert instance.violations == {}, instance.violations


async def names_not_ids(instance: Instance, browser: Any, ids: dict[str, str]) -> None:
    """1. No UUID where a name exists; Sessions searched by user and filtered by pool."""
    from playwright.async_api import expect

    admin = await (await browser.new_context(viewport={"width": 1280, "height": 900})).new_page()
    user = await (await browser.new_context(viewport={"width": 1280, "height": 800})).new_page()
    try:
        await open_as_the_user(instance, user, "names-pool")

        await sign_in(instance, admin, ADMIN)
        await admin.goto(f"{instance.console}/sessions")
        await _no_uuid(instance, admin, "sessions-named", USER[1], "names-pool")
        # Searched by the user's name, filtered by pool.
        await admin.get_by_label("User", exact=True).fill("Desk")
        await admin.locator("datalist option[value^='Desk User']").first.wait_for(state="attached")
        await admin.get_by_label("User", exact=True).fill("Desk User (user@deskpool.test)")
        await admin.get_by_label("Pool").select_option(label="names-pool")
        await expect(admin.get_by_role("cell", name=USER[1]).first).to_be_visible()
        await admin.get_by_role("link", name=re.compile("^np-")).first.click()
        await admin.wait_for_url("**/sessions/*")
        await _no_uuid(instance, admin, "session-named", USER[1])

        await admin.goto(f"{instance.console}/desktops")
        await _no_uuid(instance, admin, "desktops-named", USER[1], "names-pool")
        await admin.goto(f"{instance.console}/pools/{ids['pool']}")
        await _no_uuid(instance, admin, "pool-named", USER[1])
        await admin.goto(f"{instance.console}/audit")
        await _no_uuid(instance, admin, "audit-named", ADMIN[1], "names-pool")
        await admin.goto(f"{instance.console}/people/grants")
        await _no_uuid(instance, admin, "grants-named", ADMIN[1])
        await admin.goto(f"{instance.console}/pools/{ids['pool']}/rollouts")
        history = admin.get_by_role("table", name="Image history")
        await expect(history.get_by_text(ADMIN[1])).to_be_visible(timeout=TIMEOUT)
        await expect(history.get_by_text("ubuntu-22.04")).to_be_visible()
        await _no_uuid(instance, admin, "image-history-named", ADMIN[1])
    except BaseException:
        for name, page in (("admin", admin), ("user", user)):
            await page.screenshot(path=str(instance.artifacts / f"failed-names-{name}.png"))
        raise
    finally:
        await user.context.close()
        await admin.context.close()


async def os_mismatch_at_its_field(instance: Instance, browser: Any, ids: dict[str, str]) -> None:
    """2. No template of the wrong OS offered; the API's OS mismatch marked at the template."""
    from playwright.async_api import expect

    admin = await (await browser.new_context(viewport={"width": 1280, "height": 900})).new_page()
    try:
        await sign_in(instance, admin, ADMIN)
        await admin.goto(f"{instance.console}/pools/{ids['pool']}/rollouts")
        await admin.get_by_role("button", name="Start a rollout").click()
        template = admin.get_by_label("New template")
        await expect(template.locator("option", has_text="ubuntu-24.04")).to_have_count(1)
        # A Windows template is not offered for a Linux pool.
        assert "windows-11" not in await template.inner_text()
        await admin.get_by_role("button", name="Cancel").click()

        # The cluster's listing changes after the form loaded it: the console's copy says
        # windows-11 is a Linux template, the API knows better and says so at the field.
        async def stale_listing(route: Any) -> None:
            response = await route.fetch()
            body = await response.json()
            for item in body["items"]:
                item["os_type"] = "linux"
            await route.fulfill(response=response, body=json.dumps(body))

        await admin.route("**/api/v1/clusters/*/templates*", stale_listing)
        await admin.reload()
        await admin.get_by_role("button", name="Start a rollout").click()
        windows = template.locator("option", has_text="windows-11")
        await template.select_option(await windows.get_attribute("value"))
        await admin.get_by_role("button", name="Start the rollout").click()
        error = admin.locator(".field", has=template).locator(".field-error")
        await expect(error).to_contain_text(re.compile("windows template", re.I), timeout=TIMEOUT)
        await expect(template).to_have_attribute("aria-invalid", "true")
        await visit(instance, admin, "rollout-os-mismatch")
    except BaseException:
        await admin.screenshot(path=str(instance.artifacts / "failed-os-mismatch.png"))
        raise
    finally:
        await admin.context.close()


def _note_callback(seen: list[str], frame: Any) -> None:
    if "/auth/callback" in frame.url:
        seen.append(frame.url)


async def _unfold_to(page: Any, link: Any) -> None:
    """Open the folded navigation until ``link`` shows.

    Waits for the Menu button, and opens it again when the links do not show: a check of
    is_visible() right after the sign-in raced the first render under load and left the links
    folded away (CI), and once the menu was opened and the links still did not show within
    30 s (a fresh-clone make test at 8f978a4: the layout rendered again after the click, its
    menu closed).
    """
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    menu = page.get_by_role("button", name="Menu")
    for _ in range(10):
        if await menu.get_attribute("aria-expanded", timeout=TIMEOUT) != "true":
            await menu.click()
        try:
            await link.wait_for(state="visible", timeout=3000)
            return
        except PlaywrightTimeout:
            continue
    raise AssertionError("the folded navigation never showed the link")


async def navigation(instance: Instance, browser: Any, ids: dict[str, str]) -> None:
    """3. At 390 px, 800 px (and 1440 px) wide, the navigation reaches every page."""
    from playwright.async_api import expect

    for width in (390, 800, 1440):
        page = await (
            await browser.new_context(viewport={"width": width, "height": 800})
        ).new_page()
        callbacks: list[str] = []
        page.on("framenavigated", partial(_note_callback, callbacks))
        await sign_in(instance, page, ADMIN)
        if width == 800:
            # Back into the sign-in's return (its one-time state used up): still signed in.
            assert callbacks, "the sign-in returned through /auth/callback"
            await page.goto(callbacks[0])
            await page.get_by_role("button", name="Sign out").wait_for(timeout=TIMEOUT)
            await expect(page.get_by_text("No matching state")).to_have_count(0)
        for label, path in PAGES.items():
            link = page.get_by_role("navigation", name="Main").get_by_role(
                "link", name=label, exact=True
            )
            if width < FOLDED_BELOW:
                await _unfold_to(page, link)
            await link.click()
            await page.wait_for_url(f"**{path}**")
            await expect(page.get_by_role("heading", level=1).first).to_be_visible()
            # Nothing runs off the page sideways.
            overflow = await page.evaluate(OVERFLOW)
            assert overflow["by"] <= 1, (width, label, overflow)
        await visit(instance, page, f"navigation-{width}")
        if width < FOLDED_BELOW:
            await page.get_by_role("button", name="Menu").click()
            await visit(instance, page, f"navigation-{width}-open")
        await page.context.close()


async def six_tabs(instance: Instance, browser: Any, ids: dict[str, str]) -> None:
    """4. Six tabs of one browser all live; an event reaches each; one closing leaves the rest."""
    from playwright.async_api import expect

    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        tabs = [await context.new_page() for _ in range(6)]
        await sign_in(instance, tabs[0], ADMIN)
        for tab in tabs:
            # The issuer remembers the browser: the other tabs sign in without its page.
            await tab.goto(f"{instance.console}/clusters")
            sign = tab.get_by_role("button", name="Sign in")
            out = tab.get_by_role("button", name="Sign out")
            await expect(sign.or_(out)).to_be_visible(timeout=TIMEOUT)
            if await sign.is_visible():
                await sign.click()
                await out.wait_for(timeout=TIMEOUT)
                await tab.goto(f"{instance.console}/clusters")
        for tab in tabs:
            await expect(tab.get_by_role("status").filter(has_text="Live")).to_be_visible(
                timeout=TIMEOUT
            )
        # An event reaches every tab, with no reload.
        for tab in tabs:
            await tab.evaluate("window.__noReload = true")
        await api_call(
            instance,
            "POST",
            "/clusters",
            json={
                "name": "six-tabs",
                "driver": "simulator",
                "endpoint": "simulator://six-tabs",
                "options": OPTIONS,
            },
        )
        for tab in tabs:
            await expect(tab.get_by_role("link", name="six-tabs")).to_be_visible(timeout=TIMEOUT)
            assert await tab.evaluate("window.__noReload === true")
            await expect(tab.get_by_role("status").filter(has_text="Live")).to_be_visible()
        # The tab that held the stream closes: another takes it over, still live.
        await tabs[0].close()
        await api_call(
            instance,
            "POST",
            "/clusters",
            json={
                "name": "five-tabs",
                "driver": "simulator",
                "endpoint": "simulator://five-tabs",
                "options": OPTIONS,
            },
        )
        for tab in tabs[1:]:
            await expect(tab.get_by_role("link", name="five-tabs")).to_be_visible(timeout=TIMEOUT)
        await visit(instance, tabs[1], "six-tabs-live")
    finally:
        await context.close()
