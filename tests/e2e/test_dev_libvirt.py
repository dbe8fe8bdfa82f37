"""``deskpool dev --hypervisor libvirt``: the quick start on real tiny VMs, seen in Chromium.

``deskpool dev`` runs with a libvirt prefix of this run (so the run's template, storage pool
and desktops are removed at the end, and by the next run if this one is killed). It makes the
tiny guest's template on the local libvirt, connects a libvirt cluster, creates the demo pool of
linked clones, and bridges their VNC displays with the desktop daemon simulator. Then the
development desktop user signs in with Chromium and opens the demo pool from My desktops:

- the display's canvas reads the guest's VGA banner (tesseract on the pixels the browser drew);
- a line with a token of this run, written to the guest's screen (``/dev/tty1``) through the
  VM's serial console (the guest runs a shell there), appears in the browser: the console shown
  is that VM's, live.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import signal
import subprocess
import termios
import time
import tty
from pathlib import Path
from typing import Any

import aiohttp
import libvirt
import pytest
from tests.e2e import console_instance as console
from tests.support.e2e import (
    dev_process_environ,
)
from tests.support.paths import REPO

from deskpool.testing.libvirt import LOCAL_URI, LibvirtLab, check_libvirt
from deskpool.testing.libvirt.guest import SCREEN_BANNER
from deskpool.testing.processes import deskpool_command, read_addresses, until, until_ready

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DEV_USER = "Development Desktop User"
POOL = "demo-vms"


def write_to_screen(vm_id: str, text: str) -> str:
    """Through the VM's serial console (a shell), print ``text`` on its VGA console.

    QEMU reads a pty only while someone holds it open (it looks every second): the pty is held
    until the shell answered a newline, then given the command, then read until the command's
    own end marker comes back. :returns: what the serial console printed meanwhile.
    """
    connection = libvirt.open(LOCAL_URI)
    try:
        xml = connection.lookupByUUIDString(vm_id).XMLDesc(0)
    finally:
        connection.close()
    match = re.search(r"<serial type='pty'>\s*<source path='([^']+)'", xml)
    assert match, "the VM has no serial console on a pty"
    marker = f"done-{secrets.token_hex(4)}"
    fd = os.open(match.group(1), os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    received = b""
    try:
        tty.setraw(fd, termios.TCSANOW)  # no echo: the guest's output is not typed back to it
        deadline = time.monotonic() + 90
        while not received and time.monotonic() < deadline:
            os.write(fd, b"\r")
            time.sleep(1)
            with contextlib.suppress(BlockingIOError):
                received += os.read(fd, 65536)
        os.write(fd, f'echo "{text}" > /dev/tty1; echo {marker}\r'.encode())
        while f"\n{marker}".encode() not in received.replace(b"\r", b""):
            assert time.monotonic() < deadline, f"the serial console said {received!r}"
            time.sleep(0.2)
            with contextlib.suppress(BlockingIOError):
                received += os.read(fd, 65536)
    finally:
        os.close(fd)
    return received.decode(errors="replace")


async def test_dev_with_libvirt_shows_a_real_vms_console(
    deskpool_environ: dict[str, str], module_database_url: str, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright, expect

    check_libvirt()
    prefix = f"dpt{os.getpid()}x{secrets.token_hex(3)}"
    addresses_file = tmp_path / "addresses.json"
    env = dev_process_environ(deskpool_environ, addresses_file)
    env |= {
        # A database of this module's own: deskpool dev seeds its demo only on a fresh one.
        "DATABASE_URL": module_database_url,
        "WEB_DIST_PATH": str(REPO / "web" / "dist"),
        "GUEST_AGENT_WAIT_TIMEOUT": "180s",
    }
    log = tmp_path / "dev.log"
    with log.open("w") as output:
        process = subprocess.Popen(  # noqa: ASYNC220 (started once, then awaited by polling)
            [*deskpool_command(), "dev", "--state-dir", str(tmp_path), "--issuer-port", "0",
             "--hypervisor", "libvirt", "--libvirt-prefix", prefix],
            env=env, cwd=REPO, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as session:

            async def token() -> str | None:
                assert process.poll() is None, log.read_text()
                match = re.search(r"Bearer ([\w.-]+)'", log.read_text())
                return match.group(1) if match else None

            headers = {"Authorization": f"Bearer {await until(token, 'dev prints a token', 240)}"}
            bound = await until(
                lambda: asyncio.to_thread(read_addresses, addresses_file), "dev wrote its addresses"
            )
            await until_ready(session, f"http://{bound['ops']}/readyz", "dev is ready")
            api = f"http://{bound['api']}/api/v1"
            web = f"http://{bound['web']}"

            async def ready_desktops() -> list[dict[str, Any]]:
                async with session.get(f"{api}/desktops", headers=headers) as response:
                    body = await response.json()
                assert response.status == 200, body
                return [d for d in body["items"] if d["state"] in ("ready", "in_use")]

            await until(ready_desktops, "a demo VM is ready (its guest agent answers)", 300, 1)
            assert "bridging the VNC servers on loopback" in log.read_text()

            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(
                    executable_path=console.CHROMIUM,
                    args=["--headless", "--no-sandbox", "--disable-gpu"],
                )
                try:
                    page = await browser.new_page(viewport={"width": 1280, "height": 900})
                    await page.goto(web + "/")
                    await page.get_by_role("button", name="Sign in").click()
                    await page.get_by_role("button", name=DEV_USER).click()
                    await page.wait_for_url(web + "/my")
                    await page.get_by_role("button", name=f"Open {POOL}").click()
                    connected = page.locator('[data-state="connected"]')
                    await expect(connected).to_be_visible(timeout=60_000)
                    await shows(page, SCREEN_BANNER, tmp_path)

                    async def in_session() -> list[dict[str, Any]]:
                        return [d for d in await ready_desktops() if d["in_session"]]

                    (desktop,) = await until(in_session, "the opened desktop is in session", 60)
                    line = f"DESKPOOL TEST {console.ocr_token()}"
                    serial = await asyncio.to_thread(write_to_screen, desktop["vm_id"], line)
                    assert line in serial  # the shell echoed the command it ran
                    await shows(page, line, tmp_path)
                finally:
                    await browser.close()
        process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(process.wait, 60) == 0, log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        await asyncio.to_thread(LibvirtLab(prefix=prefix).remove)


async def shows(page: Any, text: str, folder: Path) -> None:
    """Wait until the display's canvas reads ``text`` (its last picture and reading kept)."""
    last = {"read": ""}

    async def reads() -> bool:
        picture = await console.canvas_picture(page)
        if picture is None:
            return False
        picture.save(folder / "vm-canvas.png")
        last["read"] = await console.read_words(picture)
        return text in last["read"]

    with contextlib.suppress(AssertionError):
        await until(reads, f"the canvas reads {text!r}", seconds=120, every=1)
    assert text in last["read"], f"the canvas reads {last['read']!r} (see {folder})"
