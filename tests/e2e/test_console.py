"""The web console in Debian's Chromium against real deskpool processes (issue 14's Done-when).

``deskpool run all`` serves the API, worker, gateway and console from the built ``web/dist``;
the test's OIDC issuer shows its sign-in page (code + PKCE), the cluster is the simulator
driver's, and the desktops are drawn by the desktop daemon simulator, run here so the test can
read what its screens echo. Every page visited is saved as a screenshot (in
``DESKPOOL_TEST_ARTIFACTS`` when set, else the test's temporary folder) and checked with
axe-core: no serious or critical violation.

1. an administrator signs in through the issuer's sign-in page;
2. on the empty instance the setup wizard connects a simulated cluster and creates a pool;
3. the pool page shows its desktops becoming ready without a reload;
4. the administrator creates a group, adds a user and entitles the group to the pool;
5. that user signs in, sees only My desktops, opens a desktop (whose first attempt draws
   nothing: the view tries once more by itself) and sees it echo what is typed, fitted to the
   view;
6. the administrator watches the session read-only from a smaller window (the desktop fitted
   to it), then disconnects it; the user sees it, reconnects to a desktop that draws nothing
   (one automatic retry, then the error), reconnects again, and logs off;
7. signing out ends the session at the issuer.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

from tests.e2e.console_instance import (
    ADMIN,
    CHROMIUM,
    TIMEOUT,
    USER,
    Instance,
    sign_in,
    visit,
)

from deskpool.testing.processes import until

#: True when a canvas of the desktop view holds more than one colour.
CANVAS_NOT_BLANK = """() => [...document.querySelectorAll('.desktop-screen canvas')].some((c) => {
  if (!c.width || !c.height) return false;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  for (let i = 4; i < d.length; i += 4) {
    if (d[i] !== d[0] || d[i + 1] !== d[1] || d[i + 2] !== d[2] || d[i + 3] !== d[3]) return true;
  }
  return false;
})"""


async def test_the_console_from_first_sign_in_to_the_desktop(instance: Instance) -> None:
    from playwright.async_api import async_playwright, expect

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        admin_context = await browser.new_context(viewport={"width": 1280, "height": 800})
        user_context = await browser.new_context(viewport={"width": 1280, "height": 800})
        admin = await admin_context.new_page()
        user = await user_context.new_page()
        csp_errors: list[str] = []
        page_errors: list[str] = []
        for page in (admin, user):
            page.on(
                "console",
                lambda m: (
                    csp_errors.append(m.text) if "Content Security Policy" in m.text else None
                ),
            )
        try:
            await _steps(instance, admin, user, expect)
        except BaseException:
            for name, page in (("admin", admin), ("user", user)):
                await page.screenshot(path=str(instance.artifacts / f"failed-{name}.png"))
            print("page errors:", page_errors)
            raise
        finally:
            await browser.close()
    assert page_errors == []
    assert instance.violations == {}, instance.violations
    assert csp_errors == []
    assert len(instance.visited) >= 12


async def _steps(instance: Instance, admin: Any, user: Any, expect: Any) -> None:
    # 1. The administrator signs in through the issuer's page (code + PKCE)...
    await sign_in(instance, admin, ADMIN)
    # 2. ...and, the instance being empty, lands in the setup wizard.
    await admin.wait_for_url("**/setup")
    await visit(instance, admin, "setup-connect")
    await admin.get_by_label("Name", exact=True).fill("simulated")
    await admin.get_by_label("Driver").select_option("simulator")
    await admin.get_by_label("Endpoint").fill("simulator://local")
    # The form is the simulator's declared fields: its options fold away until opened.
    await admin.get_by_text("Simulator options").click()
    await admin.get_by_label("Clone time").fill("1")
    await admin.get_by_label("Boot time").fill("1")
    await admin.get_by_role("button", name="Connect", exact=True).click()
    await expect(admin.get_by_text("Connected to")).to_be_visible(timeout=TIMEOUT)
    await visit(instance, admin, "setup-check")
    await admin.get_by_role("button", name="Next").click()
    await admin.get_by_role("radio").first.check()
    await visit(instance, admin, "setup-template")
    await admin.get_by_role("button", name="Next").click()
    await admin.get_by_label("Name", exact=True).fill("e2e-pool")
    await admin.get_by_label("Minimum size").fill("2")
    await admin.get_by_label("Maximum size").fill("3")
    await admin.get_by_label("Spare desktops").fill("0")
    await visit(instance, admin, "setup-pool")
    await admin.get_by_role("button", name="Create the pool").click()
    await admin.wait_for_url("**/pools/*")

    # 3. The pool page shows its desktops becoming ready, with no reload.
    await admin.evaluate("window.__noReload = true")
    await expect(admin.get_by_test_id("count-ready")).to_have_text("2", timeout=60_000)
    assert await admin.evaluate("window.__noReload === true")
    await visit(instance, admin, "pool")

    # 4. A group, a member, and the group entitled to the pool.
    pool_url = admin.url
    await admin.get_by_role("link", name="People").click()
    await admin.get_by_role("link", name="Groups").click()
    await admin.get_by_label("Group key").fill("e2e-users")
    await admin.get_by_label("Group name").fill("E2E users")
    await admin.get_by_role("button", name="Create group").click()
    await admin.get_by_role("link", name="E2E users").click()
    await admin.get_by_label("Add a user").select_option(label=f"{USER[1]} (user@deskpool.test)")
    await admin.get_by_role("button", name="Add member").click()
    await expect(admin.get_by_role("cell", name="user@deskpool.test")).to_be_visible()
    await visit(instance, admin, "group")
    await admin.goto(pool_url)
    await admin.get_by_label("Entitle a group or user").select_option(label="group E2E users")
    await admin.get_by_role("button", name="Entitle", exact=True).click()
    await expect(admin.get_by_text("group E2E users Revoke")).to_be_visible()
    await visit(instance, admin, "pool-entitled")

    # 5. The user sees only My desktops, opens a desktop, and it echoes what is typed.
    await sign_in(instance, user, USER)
    await user.wait_for_url("**/my")
    links = await user.get_by_role("navigation", name="Main").get_by_role("link").all_inner_texts()
    assert links == ["My desktops"]
    await visit(instance, user, "my-desktops")
    # The desktop's first attempt draws nothing (its remote desktop does not connect): the
    # gateway ends it with 514 after GATEWAY_FIRST_FRAME_TIMEOUT, telling the daemon, and the
    # view tries once more by itself, which draws.
    before = list(instance.daemon.users)
    instance.daemon.connect_gate.clear()
    await user.get_by_role("button", name="Open e2e-pool").click()
    first = (await _attempts(instance, before, 2))[0]
    instance.daemon.connect_gate.set()
    await _until(lambda: first.disconnected)
    await expect(user.locator('[data-state="connected"]')).to_be_visible(timeout=TIMEOUT)
    await user.locator(".desktop-screen").click()
    await user.keyboard.type("hello from e2e")
    await _until(
        lambda: any("hello from e2e" in c.screen.typed for c in _screens(instance)),
        "the desktop echoes what the user typed",
    )
    assert await _drawn(user), "the desktop's canvases are blank"
    await _fits(user)
    # Once connected, a resized window resizes the desktop (and the display still fits).
    await user.set_viewport_size({"width": 1100, "height": 720})
    await _until(lambda: any(c.screen.width == 1100 for c in _screens(instance)))
    await _fits(user, width=1100)
    await visit(instance, user, "desktop")

    # 6. The administrator sees the session, watches it read-only and disconnects it; the user
    # sees it, reconnects, and logs off.
    await admin.get_by_role("link", name="Sessions").click()
    # The watcher's window is smaller than the user's desktop: it must see all of it, scaled.
    await admin.set_viewport_size({"width": 1000, "height": 640})
    watch = admin.get_by_role("button", name="Watch")
    await expect(watch).to_have_count(1, timeout=TIMEOUT)
    await expect(watch).to_be_enabled(timeout=TIMEOUT)
    await watch.click()
    await expect(admin.locator('[data-state="connected"]')).to_be_visible(timeout=TIMEOUT)
    await expect(admin.get_by_text("Watching read-only")).to_be_visible()
    assert await _drawn(admin), "the watched desktop's canvases are blank"
    shown = await _fits(admin)
    assert shown["remote"][0] > shown["view"][0], shown  # scaled down to fit, not cut off
    await admin.set_viewport_size({"width": 900, "height": 560})  # and it follows the window
    await _fits(admin, width=900)
    await admin.locator(".desktop-screen").click()
    (desktop,) = _screens(instance)
    watcher = desktop.users[-1]  # the owner's tunnel joined first
    await admin.keyboard.type("typed by the watcher")
    # The daemon acknowledges the watcher's keys: it read them before the watcher's sync of a
    # frame drawn after they were typed. The desktop shows none of them.
    typed_before = desktop.last_sent_timestamp
    await _until(
        lambda: watcher.acknowledged > typed_before,
        "the daemon read the watcher's sync of a frame drawn after the keys",
    )
    assert "by the watcher" not in desktop.screen.typed
    assert "hello from e2e" in desktop.screen.typed
    await visit(instance, admin, "watching")
    await admin.get_by_role("button", name="Stop watching").click()
    await admin.wait_for_url("**/sessions")
    # The user's session (the view just closed may still be listed while its tunnel ends).
    disconnect = (
        admin.locator("tbody tr")
        .filter(has_not_text="watching")
        .get_by_role("button", name="Disconnect")
    )
    await expect(disconnect).to_have_count(1, timeout=TIMEOUT)
    await visit(instance, admin, "sessions")
    await disconnect.click()
    # The confirmation names the user it disconnects.
    confirm = admin.get_by_role("dialog")
    await expect(confirm).to_contain_text(USER[1])
    await visit(instance, admin, "disconnect-confirmation")
    await confirm.get_by_role("button", name=re.compile("^Disconnect ")).click()
    overlay = user.locator(".desktop-overlay")
    await expect(overlay).to_be_visible(timeout=TIMEOUT)
    await visit(instance, user, "desktop-disconnected")
    # Reconnecting to a desktop that never draws: one automatic retry, then the error.
    before = list(instance.daemon.users)
    instance.daemon.connect_gate.clear()
    await overlay.get_by_role("button", name="Reconnect").click()
    await expect(overlay).to_contain_text("Your desktop did not respond", timeout=TIMEOUT)
    await expect(overlay).to_contain_text("Status 514")
    assert len(_new_users(instance, before)) == 2
    instance.daemon.connect_gate.set()
    await visit(instance, user, "desktop-timed-out")
    await overlay.get_by_role("button", name="Reconnect").click()
    await expect(user.locator('[data-state="connected"]')).to_be_visible(timeout=TIMEOUT)
    await visit(instance, user, "desktop-reconnected")
    user.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
    await user.get_by_role("button", name="Log off").click()
    await user.wait_for_url("**/my")
    await expect(user.get_by_text("You were logged off from")).to_be_visible(timeout=TIMEOUT)
    await visit(instance, user, "logged-off")

    # 7. Signing out ends the session at the issuer: the next sign-in shows its page again.
    await user.get_by_role("link", name="My desktops").click()
    await user.get_by_role("button", name="Sign out").click()
    await user.get_by_role("button", name="Sign in").wait_for(timeout=TIMEOUT)
    await visit(instance, user, "signed-out")
    assert len(instance.idp.browser_sessions) == 1  # the administrator's, not the user's
    await user.get_by_role("button", name="Sign in").click()
    await user.wait_for_url(instance.idp.issuer_url + "/authorize*")
    await expect(user.get_by_role("button", name=USER[1])).to_be_visible()


def _note_csp(text: str, errors: list[str]) -> None:
    if "Content Security Policy" in text:
        errors.append(text)


async def _drawn(page: Any) -> bool:
    """guacamole-common-js drew the simulated desktop: some canvas of the display is not blank."""

    async def not_blank() -> bool:
        return bool(await page.evaluate(CANVAS_NOT_BLANK))

    try:
        await until(not_blank, "a canvas of the display is drawn", every=0.1)
    except AssertionError:
        return False
    return True


#: The desktop view's size, the size the remote display is shown at, and the remote display's.
DISPLAY_SIZES = """() => {
  const view = document.querySelector('.desktop-screen');
  const shown = view.firstElementChild.getBoundingClientRect();
  const canvases = [...view.querySelectorAll('canvas')];
  return {
    view: [view.clientWidth, view.clientHeight],
    shown: [shown.width, shown.height],
    remote: [Math.max(...canvases.map((c) => c.width)), Math.max(...canvases.map((c) => c.height))],
  };
}"""


async def _fits(page: Any, *, width: int | None = None) -> dict[str, Any]:
    """Wait until the remote display fits the view (whole, filling one side); its sizes.

    :param width: the view's width to wait for (after a resize of the window).
    """
    sizes: dict[str, Any] = {}

    async def fitting() -> dict[str, Any] | None:
        nonlocal sizes
        sizes = await page.evaluate(DISPLAY_SIZES)
        (view_w, view_h), (shown_w, shown_h) = sizes["view"], sizes["shown"]
        whole = 0 < shown_w <= view_w + 0.5 and 0 < shown_h <= view_h + 0.5
        filled = shown_w >= view_w - 1 or shown_h >= view_h - 1
        return sizes if whole and filled and (width is None or view_w == width) else None

    try:
        fitted: dict[str, Any] = await until(fitting, "the display fits the view", every=0.1)
    except AssertionError:
        raise AssertionError(f"the remote display does not fit the view: {sizes}") from None
    return fitted


def _new_users(instance: Instance, before: list[Any]) -> list[Any]:
    """The daemon's users (not watchers) that joined since ``before``, oldest first."""
    return [u for u in instance.daemon.users if not u.read_only and u not in before]


async def _attempts(instance: Instance, before: list[Any], count: int) -> list[Any]:
    """Wait until ``count`` connections were opened since ``before``; their daemon users."""
    await _until(lambda: len(_new_users(instance, before)) >= count)
    return _new_users(instance, before)


def _screens(instance: Instance) -> list[Any]:
    return list(instance.daemon.connections.values())


async def _until(
    condition: Callable[[], bool], what: str = "the desktop daemon simulator shows it"
) -> None:
    """Poll ``condition`` (state of the daemon simulator, which has no event to await)."""

    async def holds() -> bool:
        return condition()

    await until(holds, what)
