"""The client policy in the console, on a real X desktop through the gateway and the VNC bridge.

``deskpool run all`` serves the console; the desktop daemon simulator bridges the VNC servers on
loopback; the desktop is a real X server (Xvfb) served by x11vnc, whose clipboard is read and
set with ``xclip``. A user signs in with Chromium and opens the desktop from My desktops:

- text typed into the console's clipboard panel lands on the X clipboard, and what an X program
  copies shows in the panel (the pool allows text both ways);
- with copying out and pasting turned off while the desktop is open (guacd was told to pass
  both), the gateway withholds what an X program copies from the browser and refuses the next
  paste, the panel says both in words, the X clipboard stays as it was and the session's
  transfers list both refusals (with the SHA-256 of the X clipboard's text); opened again, the
  panel says before the user tries that both are off;
- with the watermark on, the screen in the browser shows it over the desktop (pixels of the
  page's display, while the desktop's own layer still equals the X screen), and so does the
  session's recording played in the console's player.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from PIL import Image, ImageChops
from tests.e2e import console_instance as console
from tests.e2e.console_instance import Instance

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.desktopd.vnc import VncBridge
from deskpool.testing.processes import until
from deskpool.testing.pytest_plugin import fresh_database
from deskpool.testing.x11 import ROOT_COLOUR, VncServer, XDisplay, vnc_server, x_display

pytestmark = pytest.mark.slow

SCREEN = (800, 600)
PASSWORD = "vnc-clip-pw"
COPY_OFF = "Copying out of this desktop is turned off by your administrator."
PASTE_OFF = "Pasting into this desktop is turned off by your administrator."


@pytest.fixture
def console_database(test_servers: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    # A database per test: each test's deskpool has a master key of its own.
    name = f"deskpool_desk_transfers_{request.node.name.removeprefix('test_')[:20]}"
    with fresh_database(test_servers, name) as url:
        yield url


@pytest.fixture
async def display() -> AsyncIterator[XDisplay]:
    async with x_display(*SCREEN) as display:
        yield display


@pytest.fixture
async def vnc(display: XDisplay) -> AsyncIterator[VncServer]:
    async with vnc_server(display, password=PASSWORD) as server:
        yield server


@pytest.fixture
async def instance(
    console_database: str, test_servers: Any, tmp_path: Path
) -> AsyncIterator[Instance]:
    daemon = DesktopDaemonSimulator(vnc_bridge=VncBridge.loopback())
    recordings = {
        "RECORDINGS_PATH": str(tmp_path / "recordings"),
        "RECORDINGS_CHUNK_SECONDS": "500ms",
    }
    async with console.console_instance(
        console_database, test_servers, tmp_path, daemon, recordings
    ) as running:
        yield running


class Admin:
    """The administrator's API calls of a test."""

    def __init__(self, instance: Instance, http: aiohttp.ClientSession) -> None:
        self.http = http
        self.admin = instance.idp.issue_token(
            console.ADMIN[0], email="admin@deskpool.test", email_verified=True
        )
        self.user = instance.idp.issue_token(
            console.USER[0], email="user@deskpool.test", name=console.USER[1]
        )

    async def call(self, method: str, path: str, body: Any = None, *, as_user: bool = False) -> Any:
        token = self.user if as_user else self.admin
        headers = {"Authorization": f"Bearer {token}"}
        async with self.http.request(method, path, json=body, headers=headers) as response:
            answer = await response.json()
            assert response.status < 300, (method, path, answer)
            return answer

    async def pool(self, vnc: VncServer, name: str, client: dict[str, Any]) -> dict[str, Any]:
        """A pool whose desktops are the VNC server, under ``client``, the user entitled."""
        desktop = {"protocol": "vnc", "host": "127.0.0.1", "port": vnc.port, "password": PASSWORD}
        cluster = await self.call(
            "POST",
            "/api/v1/clusters",
            {
                "name": f"{name}-cluster",
                "driver": "simulator",
                "endpoint": f"simulator://{name}",
                "options": {"clone_seconds": 0.1, "boot_seconds": 0.1, "desktop": desktop},
            },
        )
        pool = await self.call(
            "POST",
            "/api/v1/pools",
            {
                "name": name,
                "cluster_id": cluster["id"],
                "template": "ubuntu-22.04",
                "kind": "non_persistent",
                "os_type": "linux",
                "min_size": 1,
                "spare": 0,
                "max_size": 1,
                "naming_pattern": f"{name}-{{n:02}}",
            },
        )
        if client:
            change = {"session_policy": {"client": client}}
            await self.call("PATCH", f"/api/v1/pools/{pool['id']}", change)
        me = await self.call("GET", "/api/v1/me", as_user=True)
        await self.call(
            "POST",
            f"/api/v1/pools/{pool['id']}/entitlements",
            {"subject_type": "user", "subject_id": me["id"]},
        )
        return dict(pool)


@contextlib.asynccontextmanager
async def desktop_page(instance: Instance, pool: str) -> AsyncIterator[Any]:
    """Chromium signed in as the user, the pool's desktop open and connected."""
    from playwright.async_api import async_playwright, expect

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=console.CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await (
                await browser.new_context(viewport={"width": 1280, "height": 900})
            ).new_page()
            await console.sign_in(instance, page, console.USER)
            await page.wait_for_url("**/my")
            await page.get_by_role("button", name=f"Open {pool}").click(timeout=120_000)
            await expect(page.locator('[data-state="connected"]')).to_be_visible(
                timeout=console.TIMEOUT
            )
            yield page
        finally:
            await browser.close()


async def test_clipboard_both_ways_between_the_console_and_the_x_clipboard(
    instance: Instance, display: XDisplay, vnc: VncServer
) -> None:
    from playwright.async_api import expect

    async with aiohttp.ClientSession(base_url=instance.api) as http:
        await Admin(instance, http).pool(vnc, "clip-open", {})
    async with desktop_page(instance, "clip-open") as page:
        await page.get_by_role("button", name="Clipboard and files").click()
        panel = page.get_by_test_id("transfer-panel")
        await panel.get_by_label("Clipboard for the desktop").fill("typed in the console")
        send = panel.get_by_role("button", name="Send to the desktop")

        async def in_x() -> bool:
            await send.click()
            return await display.clipboard() == "typed in the console"

        # x11vnc owns the X selection only once its event loop made its window: send again
        # until it holds.
        await until(in_x, "the console's text is on the X clipboard", seconds=30, every=1)
        await display.set_clipboard("copied by an X program")
        # x11vnc sends the selection about 15 s after a viewer connects, polling it each second.
        await expect(page.get_by_test_id("desktop-copied")).to_have_text(
            "copied by an X program", timeout=60_000
        )
        await page.screenshot(path=str(instance.artifacts / "clipboard-open.png"))


async def test_refused_copy_and_paste_say_so_in_words_and_reach_nothing(
    instance: Instance, display: XDisplay, vnc: VncServer
) -> None:
    from playwright.async_api import expect

    async with aiohttp.ClientSession(base_url=instance.api) as http:
        admin = Admin(instance, http)
        pool = await admin.pool(vnc, "clip-shut", {})
        async with desktop_page(instance, "clip-shut") as page:
            await page.get_by_role("button", name="Clipboard and files").click()
            panel = page.get_by_test_id("transfer-panel")
            copied = page.get_by_test_id("desktop-copied")
            await expect(copied).to_have_text("Nothing yet.")
            # Both ways turned off while the desktop is open (guacd was told to pass both): the
            # gateway withholds the X clipboard from the browser and refuses the next paste.
            await admin.call(
                "PATCH",
                f"/api/v1/pools/{pool['id']}",
                {
                    "session_policy": {
                        "client": {
                            "clipboard": {
                                "to_desktop": {"mode": "off"},
                                "to_browser": {"mode": "off"},
                            }
                        }
                    }
                },
            )
            # The change reaches the open tunnel within 2 s (test_client_policy_live proves the
            # bound); after it, what the desktop copies and what the user pastes are refused.
            await asyncio.sleep(2.5)
            await display.set_clipboard("kept in the desktop")
            refused = panel.get_by_role("alert")
            # x11vnc sends the selection about 15 s after a viewer connects, polling it each second.
            await expect(refused).to_have_text(COPY_OFF, timeout=60_000)
            await expect(copied).to_have_text("Nothing yet.")
            await panel.get_by_label("Clipboard for the desktop").fill("not for the desktop")
            await panel.get_by_role("button", name="Send to the desktop").click()
            await expect(refused).to_have_text(PASTE_OFF, timeout=10_000)
            await page.screenshot(path=str(instance.artifacts / "clipboard-refused.png"))
            await asyncio.sleep(2)  # x11vnc polls the selection each second: time to leak
            assert await display.clipboard() == "kept in the desktop"
            await expect(copied).to_have_text("Nothing yet.")
            sessions = await admin.call("GET", f"/api/v1/sessions?pool_id={pool['id']}")
            session_id = sessions["items"][0]["id"]
            await page.get_by_role("button", name="Disconnect").click()
            await page.wait_for_url("**/my")

            async def audited() -> list[tuple[str, str, str | None]] | None:
                listing = await admin.call("GET", f"/api/v1/sessions/{session_id}/transfers")
                found = [
                    (t["direction"], t["sha256"], t["reason"])
                    for t in listing["items"]
                    if t["kind"] == "clipboard" and t["outcome"] == "refused"
                ]
                return found if {d for d, _, _ in found} == {"to_browser", "to_desktop"} else None

            refusals = await until(audited, "both refusals are audited", seconds=30, every=0.5)
            assert ("to_browser", sha256(b"kept in the desktop"), "clipboard_off") in refusals
            assert ("to_desktop", sha256(b"not for the desktop"), "clipboard_off") in refusals

            # Opened again under the new policy: the panel says so before the user tries.
            await page.get_by_role("button", name="Open clip-shut").click(timeout=120_000)
            await expect(page.locator('[data-state="connected"]')).to_be_visible(
                timeout=console.TIMEOUT
            )
            await page.get_by_role("button", name="Clipboard and files").click()
            await expect(panel.get_by_test_id("copy-off")).to_have_text(COPY_OFF)
            await expect(panel.get_by_role("note").filter(has_text=PASTE_OFF)).to_have_count(1)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def bright(picture: Image.Image) -> int:
    """Pixels far brighter than the X root window's colour (the watermark's white text)."""
    grey = picture.convert("L")
    root = Image.new("RGB", (1, 1), ROOT_COLOUR).convert("L").getpixel((0, 0))
    assert isinstance(root, int)
    return sum(count for level, count in enumerate(grey.histogram()) if level > root + 40)


async def test_the_watermark_shows_over_the_desktop_in_the_browser(
    instance: Instance, display: XDisplay, vnc: VncServer
) -> None:
    watermark = {"enabled": True, "text": "CONFIDENTIAL {name}", "opacity": 0.8, "spacing": 80}
    async with aiohttp.ClientSession(base_url=instance.api) as http:
        await Admin(instance, http).pool(vnc, "marked", {"watermark": watermark})
    async with desktop_page(instance, "marked") as page:
        screen = page.locator(".desktop-screen")

        async def marked() -> bool:
            shot = Image.open(io.BytesIO(await screen.screenshot()))
            shot.save(instance.artifacts / "watermark-screen.png")
            return bright(shot) > 2000

        await until(marked, "the watermark shows over the desktop", seconds=30, every=0.5)

        # The desktop's own layer is still exactly the X screen: the watermark is a layer of
        # its own above it, drawn by the gateway.
        async def same_as_the_screen() -> bool:
            picture = await console.canvas_picture(page, SCREEN)
            x_screen = await display.screenshot()
            return picture is not None and not ImageChops.difference(picture, x_screen).getbbox()

        await until(same_as_the_screen, "the desktop's layer is the X screen", seconds=30)


async def test_the_watermark_is_in_the_sessions_recording_and_its_playback(
    instance: Instance, display: XDisplay, vnc: VncServer
) -> None:
    from playwright.async_api import async_playwright, expect

    watermark = {"enabled": True, "text": "CONFIDENTIAL {name}", "opacity": 0.8, "spacing": 80}
    async with aiohttp.ClientSession(base_url=instance.api) as http:
        admin = Admin(instance, http)
        pool = await admin.pool(vnc, "marked-rec", {"watermark": watermark})
        await admin.call(
            "PATCH",
            f"/api/v1/pools/{pool['id']}",
            {"session_policy": {"recording": {"enabled": True, "include_keys": False}}},
        )
        shown = await admin.call("GET", f"/api/v1/pools/{pool['id']}")
        assert shown["session_policy"]["client"]["watermark"]["enabled"], shown["session_policy"]
        async with desktop_page(instance, "marked-rec") as page:
            screen = page.locator(".desktop-screen")

            async def marked() -> bool:
                shot = Image.open(io.BytesIO(await screen.screenshot()))
                shot.save(instance.artifacts / "watermark-recorded-session.png")
                return bright(shot) > 2000

            await until(marked, "the watermark shows over the desktop", seconds=30, every=0.5)
            await page.get_by_role("button", name="Disconnect").click()

        async def ended() -> str | None:
            listed = await admin.call("GET", f"/api/v1/recordings?pool_id={pool['id']}")
            done = [item for item in listed["items"] if item.get("ended_at")]
            return str(done[0]["id"]) if done else None

        recording_id = await until(ended, "the session's recording ended", seconds=60, every=1)

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=console.CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await (
                await browser.new_context(viewport={"width": 1280, "height": 900})
            ).new_page()
            await console.sign_in(instance, page, console.ADMIN)
            await page.goto(f"{instance.console}/recordings/{recording_id}")
            slider = page.get_by_role("slider", name="Position")
            await expect(slider).to_be_enabled(timeout=console.TIMEOUT)
            await slider.focus()
            await page.keyboard.press("End")
            await expect(page.locator('.recording-screen[aria-busy="true"]')).to_have_count(
                0, timeout=console.TIMEOUT
            )
            player = page.locator(".recording-screen")

            async def played_marked() -> bool:
                shot = Image.open(io.BytesIO(await player.screenshot()))
                shot.save(instance.artifacts / "watermark-playback.png")
                return bright(shot) > 2000

            await until(played_marked, "the playback shows the watermark", seconds=30, every=0.5)
        finally:
            await browser.close()
