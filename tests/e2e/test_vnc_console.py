"""A real VNC server's screen in the console, through the gateway and the simulator's VNC bridge.

``deskpool run all`` serves the console; the desktop daemon simulator bridges the VNC servers on
loopback. The desktop is a real X server (Xvfb) served by x11vnc with a VNC password, showing an
xterm that prints a line with a token of this run and writes the next line typed into it to a
file. The cluster is the simulator driver's, its ``desktop`` option pointing every VM's desktop
at that VNC server. A user signs in with Chromium, opens a desktop from My desktops, and:

- the text the xterm printed is read back from the display's canvas (its pixels, taken out of
  the browser as a PNG, read by tesseract), and the canvas equals the X server's own screenshot
  (``xwd``) pixel for pixel;
- what the user types into the page, once the pointer is over the xterm, reaches the xterm.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from PIL import ImageChops
from tests.e2e import console_instance as console
from tests.e2e.console_instance import Instance

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.desktopd.vnc import VncBridge
from deskpool.testing.processes import until
from deskpool.testing.pytest_plugin import fresh_database
from deskpool.testing.x11 import VncServer, XDisplay, vnc_server, x_display

pytestmark = pytest.mark.slow

PASSWORD = "vnc-e2e-pw"
#: A font tesseract reads without mistakes (xterm's default bitmap font is too small for it).
XTERM_FONT = ("-fa", "DejaVu Sans Mono", "-fs", "16")
SCREEN = (800, 600)
XTERM_AT = (120, 90)
#: Where the display is on the page, and how much it is scaled.
DISPLAY_BOX = f"""() => {{
  const canvas = ({console.DEFAULT_LAYER})();
  const box = canvas.getBoundingClientRect();
  return {{x: box.x, y: box.y, scale: box.width / canvas.width}};
}}"""


@pytest.fixture(scope="module")
def console_database(test_servers: Any) -> Iterator[str]:
    with fresh_database(test_servers, "deskpool_vnc_console") as url:
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
    async with console.console_instance(
        console_database, test_servers, tmp_path, daemon
    ) as running:
        yield running


async def entitled_pool(instance: Instance, vnc: VncServer) -> str:
    """A simulated cluster whose desktops are the VNC server, a pool on it, the user entitled."""
    admin = instance.idp.issue_token(
        console.ADMIN[0], email="admin@deskpool.test", email_verified=True
    )
    user = instance.idp.issue_token(
        console.USER[0], email="user@deskpool.test", name=console.USER[1]
    )
    async with aiohttp.ClientSession(base_url=instance.api) as http:

        async def call(method: str, path: str, token: str, body: Any = None) -> Any:
            headers = {"Authorization": f"Bearer {token}"}
            async with http.request(method, path, json=body, headers=headers) as response:
                answer = await response.json()
                assert response.status < 300, (method, path, answer)
                return answer

        desktop = {"protocol": "vnc", "host": "127.0.0.1", "port": vnc.port, "password": PASSWORD}
        cluster = await call(
            "POST",
            "/api/v1/clusters",
            admin,
            {
                "name": "x11vnc",
                "driver": "simulator",
                "endpoint": "simulator://x11vnc",
                "options": {"clone_seconds": 0.1, "boot_seconds": 0.1, "desktop": desktop},
            },
        )
        pool = await call(
            "POST",
            "/api/v1/pools",
            admin,
            {
                "name": "x-desktops",
                "cluster_id": cluster["id"],
                "template": "ubuntu-22.04",
                "kind": "non_persistent",
                "os_type": "linux",
                "min_size": 1,
                "spare": 0,
                "max_size": 1,
                "naming_pattern": "x-{n:02}",
            },
        )
        me = await call("GET", "/api/v1/me", user)
        await call(
            "POST",
            f"/api/v1/pools/{pool['id']}/entitlements",
            admin,
            {"subject_type": "user", "subject_id": me["id"]},
        )
        return str(pool["name"])


async def test_a_real_vnc_servers_screen_in_the_browser(
    instance: Instance, display: XDisplay, vnc: VncServer, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright, expect

    token = console.ocr_token()
    banner = f"DESKPOOL VNC BRIDGE {token}"
    typed = tmp_path / "typed.txt"
    script = f'echo "{banner}"; read line; printf %s "$line" > {typed}; exec sleep 600'
    x, y = XTERM_AT
    display.spawn("xterm", *XTERM_FONT, "-geometry", f"40x6+{x}+{y}", "-e", "sh", "-c", script)
    pool = await entitled_pool(instance, vnc)

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
            # Open is enabled once a desktop is ready: the live events say so (pool.availability).
            await page.get_by_role("button", name=f"Open {pool}").click(timeout=120_000)
            await expect(page.locator('[data-state="connected"]')).to_be_visible(
                timeout=console.TIMEOUT
            )

            last: dict[str, Any] = {"text": None}

            async def shows_the_banner() -> bool:
                picture = await console.canvas_picture(page, SCREEN)
                if picture is not None:
                    picture.save(instance.artifacts / "vnc-canvas.png")
                    last["text"] = await console.read_words(picture)
                return banner in (last["text"] or "")

            try:
                await until(shows_the_banner, f"the canvas reads {banner!r}", seconds=90, every=1)
            finally:
                await page.screenshot(path=str(instance.artifacts / "vnc-desktop.png"))
            assert banner in last["text"], last

            async def same_as_the_screen() -> bool:
                picture = await console.canvas_picture(page, SCREEN)
                screen = await display.screenshot()
                return picture is not None and not ImageChops.difference(picture, screen).getbbox()

            await until(same_as_the_screen, "the canvas is the X screen", seconds=60, every=0.5)

            box = await page.evaluate(DISPLAY_BOX)
            await page.mouse.click(
                box["x"] + (x + 80) * box["scale"], box["y"] + (y + 60) * box["scale"]
            )
            await page.keyboard.type(f"typed in chromium {token}\n")
            await until(
                lambda: asyncio.to_thread(lambda: typed.exists() and typed.read_text()),
                "the line typed in the browser reached the xterm",
                seconds=60,
                every=0.2,
            )
            assert typed.read_text() == f"typed in chromium {token}"
        finally:
            await browser.close()
