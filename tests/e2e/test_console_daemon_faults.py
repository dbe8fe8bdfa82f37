"""The desktop daemon's faults in the console (issue 33): said in words, with Reconnect.

``deskpool run all`` (API, worker, gateway, console) in front of the desktop daemon simulator,
which is told to show two faults of guacd 1.6.0 (:mod:`deskpool.desktopd.faults`):

- the connection's process dies mid-session (its socket closes without ``disconnect``): the
  console says the desktop connection was lost and offers Reconnect; the session ends
  ``daemon_error``; the pool, although it logs users off at once, keeps the desktop; Reconnect
  opens the same desktop, with what the user typed still on it;
- an RDP login refused (a lone ``sync`` 0.05 s after connecting, then nothing drawn): the
  console shows "Connected" on nothing only until the gateway's first-frame timeout (5 s), then
  says the desktop showed nothing and its sign-in may have been refused, without retrying.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from tests.e2e.console_instance import (
    CHROMIUM,
    TIMEOUT,
    USER,
    Instance,
    api_call,
    entitle_the_user,
    sign_in,
    visit,
)

from deskpool.desktopd.faults import LoginRefusal
from deskpool.testing.processes import until

pytestmark = pytest.mark.slow

#: The gateway's default GATEWAY_FIRST_FRAME_TIMEOUT.
FIRST_FRAME_TIMEOUT = 5.0


async def _pool(instance: Instance, name: str, desktop: dict[str, Any] | None = None) -> str:
    """A simulated cluster and a pool of one desktop that logs off at once; the user entitled.

    Returns the pool's id once its desktop is ready.
    """
    options: dict[str, Any] = {"clone_seconds": 0.1, "boot_seconds": 0.1}
    if desktop is not None:
        options["desktop"] = desktop
    cluster = await api_call(
        instance,
        "POST",
        "/clusters",
        json={
            "name": name,
            "driver": "simulator",
            "endpoint": f"simulator://{name}",
            "options": options,
        },
    )
    pool = await api_call(
        instance,
        "POST",
        "/pools",
        json={
            "name": name,
            "cluster_id": cluster["id"],
            "template": "ubuntu-22.04",
            "kind": "non_persistent",
            "os_type": "linux",
            "min_size": 1,
            "spare": 0,
            "max_size": 1,
            "naming_pattern": f"{name}-{{n:02}}",
            "session_policy": {"after_disconnect": "logoff_immediately", "logoff_delay": 600},
        },
    )
    await entitle_the_user(instance, pool["id"])

    async def ready() -> bool:
        desktops = await api_call(instance, "GET", f"/desktops?pool_id={pool['id']}")
        return any(item["state"] == "ready" for item in desktops["items"])

    await until(ready, f"a desktop of {name} is ready", seconds=120, every=0.5)
    return str(pool["id"])


async def _sessions(instance: Instance, desktop_id: str) -> list[dict[str, Any]]:
    listed = await api_call(instance, "GET", f"/sessions?desktop_id={desktop_id}")
    return list(listed["items"])


async def _ended(instance: Instance, desktop_id: str, count: int) -> list[dict[str, Any]]:
    """The desktop's ended sessions, once there are ``count``."""

    async def ended() -> list[dict[str, Any]]:
        items = await _sessions(instance, desktop_id)
        done = [item for item in items if item["ended_at"] is not None]
        return done if len(done) >= count else []

    result: list[dict[str, Any]] = await until(ended, "the session ended", seconds=30)
    return result


async def test_the_daemons_faults_are_said_in_words_with_reconnect(instance: Instance) -> None:
    from playwright.async_api import async_playwright

    await _pool(instance, "kept")
    await _pool(instance, "refusing", {"protocol": "rdp", "username": "ada", "password": "no"})
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
            await _connection_lost(instance, page)
            await page.goto(instance.console + "/my")
            await _sign_in_refused(instance, page)
        finally:
            await browser.close()
    assert instance.violations == {}, instance.violations


def _desktop_id(page: Any) -> str:
    return str(page.url.rsplit("/", 1)[-1].split("?")[0])


async def _connection_lost(instance: Instance, page: Any) -> None:
    """The connection's process dies mid-session; Reconnect finds the desktop as it was."""
    from playwright.async_api import expect

    daemon = instance.daemon
    await page.get_by_role("button", name="Open kept").click()
    await page.wait_for_url("**/desktop/*")
    desktop_id = _desktop_id(page)
    await expect(page.locator('[data-state="connected"]')).to_be_visible(timeout=TIMEOUT)

    async def one_connection() -> bool:
        return len(daemon.connections) == 1

    await until(one_connection, "the view holds one connection to the desktop")
    await page.locator(".desktop-screen").click()
    await page.keyboard.type("work in progress")
    ((connection_id, connection),) = daemon.connections.items()

    async def typed() -> bool:
        return "work in progress" in connection.screen.typed

    await until(typed, "the desktop shows what the user typed")

    # guacd's process of this connection dies: its socket closes without a word.
    daemon.kill_connection(connection_id)
    overlay = page.locator(".desktop-overlay")
    await expect(overlay).to_be_visible(timeout=TIMEOUT)
    await expect(overlay).to_contain_text("Desktop connection lost")
    await expect(overlay).to_contain_text("The connection to your desktop was lost")
    await expect(overlay).to_contain_text("your work are kept")
    status = page.locator('[role="status"][data-state="error"]')
    await expect(status).to_have_attribute("data-status", "515")
    reconnect = overlay.get_by_role("button", name="Reconnect")
    await expect(reconnect).to_be_visible()
    await visit(instance, page, "desktop-connection-lost")

    (session,) = await _ended(instance, desktop_id, 1)
    assert session["end_reason"] == "daemon_error"
    # The pool logs its users off at once, but not for the daemon's fault: the desktop is his.
    mine = await api_call(instance, "GET", "/me/desktops", USER)
    (kept,) = [item for item in mine["items"] if item["id"] == desktop_id]
    assert kept["state"] == "in_use"

    await reconnect.click()
    await expect(page.locator('[data-state="connected"]')).to_be_visible(timeout=TIMEOUT)
    assert _desktop_id(page) == desktop_id
    await until(one_connection, "the view holds one connection to the desktop")
    (again,) = daemon.connections.values()
    assert again.id != connection_id
    assert "work in progress" in again.screen.typed  # the same desktop, the work on it
    await page.locator(".desktop-screen").click()
    await page.keyboard.type("!")

    async def more() -> bool:
        return "work in progress!" in again.screen.typed

    await until(more, "the reconnected desktop takes typing")
    await visit(instance, page, "desktop-reconnected-after-loss")


async def _sign_in_refused(instance: Instance, page: Any) -> None:
    """An RDP login refused: a clear message once the first-frame timeout ends it, no retry."""
    from playwright.async_api import expect

    daemon = instance.daemon
    daemon.refuse_logins = LoginRefusal(then="hang")
    before = list(daemon.users)
    await page.get_by_role("button", name="Open refusing").click()
    await page.wait_for_url("**/desktop/*")
    desktop_id = _desktop_id(page)

    async def connecting() -> bool:
        return any(user not in before for user in daemon.users)

    await until(connecting, "the daemon received the connection")
    started = time.monotonic()
    overlay = page.locator(".desktop-overlay")
    await expect(overlay).to_be_visible(timeout=TIMEOUT)
    shown = time.monotonic() - started
    await expect(overlay).to_contain_text("Your desktop did not respond")
    await expect(overlay).to_contain_text("its sign-in was refused")
    await expect(overlay.get_by_role("button", name="Reconnect")).to_be_visible()
    status = page.locator('[role="status"][data-state="error"]')
    await expect(status).to_have_attribute("data-status", "514")
    await visit(instance, page, "desktop-sign-in-refused")
    # Within the first-frame timeout (with the browser's and a loaded machine's slack), and the
    # view did not try again by itself: one connection reached the daemon.
    assert shown < FIRST_FRAME_TIMEOUT + 3, shown
    attempts = [user for user in daemon.users if user not in before]
    assert len(attempts) == 1
    (user,) = attempts
    assert user.refusal is not None
    assert not user.drawn
    (session,) = await _ended(instance, desktop_id, 1)
    assert session["end_reason"] == "daemon_error"
