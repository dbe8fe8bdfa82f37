"""The client policy in the console, in Chromium, against ``deskpool run all`` (issue 36).

Through the API a pool of one desktop is entitled to the user, who opens it through the gateway
with a hand-written WebSocket client: the desktop (the daemon simulator, as guacd) copies text
out, which crosses; the client uploads a file, which the gateway refuses (a VNC desktop without
SFTP offers no file transfer). Then the administrator, in Chromium:

1. opens the pool, edits its settings: the client policy's fields show the pool's policy; turns
   copying out off and the watermark on, saves; the API shows the change, and the open tunnel no
   longer passes the desktop's clipboard (within 2 s, no reconnect);
2. opens the session's page: its transfers list the copy (allowed, with its SHA-256) and the
   refused upload and copy, in words.

Every page visited is checked with axe-core (no serious or critical violation).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time

import aiohttp
from tests.e2e.console_instance import ADMIN, CHROMIUM, TIMEOUT, Instance, sign_in, visit
from tests.e2e.console_pools import callers, ready_persistent_pool

from deskpool.guacamole import encode
from deskpool.testing.tunnels import WebSocketTunnelClient


def _copy(n: int) -> str:
    text = base64.b64encode(f"copied {n}".encode()).decode()
    return (
        encode("clipboard", n, "text/plain")
        + encode("blob", n, text)
        + encode("end", n)
        + encode("name", f"marker {n}")
    )


async def test_the_pool_form_sets_the_client_policy_and_the_session_page_lists_transfers(
    instance: Instance,
) -> None:
    from playwright.async_api import async_playwright, expect

    async with aiohttp.ClientSession() as http:
        admin_api, user_api = callers(http, instance)
        pool = await ready_persistent_pool(admin_api, user_api, "policy", max_size=1)
        opened = await user_api("POST", f"/me/pools/{pool['id']}/desktop")
        connection = opened["connection"]
        tunnel = await WebSocketTunnelClient.connect(
            http, connection["url"], {"token": connection["token"]}
        )
        await tunnel.until("sync", within=30)
        session_id = await tunnel.tunnel_id()
        desktop = instance.daemon.users[-1]

        async def copy_out(n: int) -> bool:
            await desktop.send(_copy(n))
            return any(i.opcode == "clipboard" for i in await tunnel.until("name"))

        assert await copy_out(1)

        async def keep_alive() -> None:
            # What Guacamole.Client does: a nop every few seconds, or the gateway hangs up.
            while True:
                await asyncio.sleep(2)
                await tunnel.send("nop")

        alive = asyncio.create_task(keep_alive())
        await tunnel.send("file", 7, "application/octet-stream", "tool.exe")
        await tunnel.send("blob", 7, base64.b64encode(b"MZ payload").decode())
        await tunnel.send("end", 7)

        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
            )
            page = await (
                await browser.new_context(viewport={"width": 1400, "height": 1000})
            ).new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            try:
                await sign_in(instance, page, ADMIN)
                # 1. The pool form's client policy.
                await page.goto(f"{instance.console}/pools/{pool['id']}")
                await page.get_by_role("button", name="Edit settings").click()
                form = page.get_by_role("form", name="Change the pool")
                await form.get_by_text("Session policy").click()
                copy = form.get_by_label("Clipboard to the browser (copy out)")
                await expect(copy).to_have_value("text", timeout=TIMEOUT)
                await expect(form.get_by_label("Copy limit (bytes)")).to_have_value("262144")
                await visit(instance, page, "pool-client-policy")
                await copy.select_option("off")
                await form.get_by_role("switch", name="Watermark").check()
                await form.get_by_label("Watermark text").fill("{email} {time}")
                await form.get_by_role("button", name="Save changes").click()
                await expect(form).to_have_count(0, timeout=TIMEOUT)
                saved = time.monotonic()
                shown = await admin_api("GET", f"/pools/{pool['id']}")
                client = shown["session_policy"]["client"]
                assert client["clipboard"]["to_browser"]["mode"] == "off"
                assert client["watermark"]["enabled"] is True
                assert client["watermark"]["text"] == "{email} {time}"
                n = 2
                while await copy_out(n):
                    assert time.monotonic() - saved < 3.0, "copying out goes on after the change"
                    n += 1
                    # A person copies a few times a second: the session's page lists its newest
                    # 500 transfers, and a loop as fast as the tunnel once copied more than 500
                    # times before the change reached the gateway (a fresh-clone make test),
                    # pushing the upload and the refusal below off the page.
                    await asyncio.sleep(0.02)
                assert not tunnel.ws.closed
                alive.cancel()
                await tunnel.ws.close()

                # 2. The session's page lists its transfers.
                # The refusal made just before the tunnel closed is audited as the gateway ends
                # the session, which may come after the page is loaded: load it again until it is.
                rows = page.get_by_test_id("session-transfers").locator("tbody tr")
                for _ in range(20):
                    await page.goto(f"{instance.console}/sessions/{session_id}")
                    await expect(rows.first).to_be_visible(timeout=TIMEOUT)
                    if await rows.filter(has_text="clipboard off").count():
                        break
                    await asyncio.sleep(0.5)
                await expect(rows.filter(has_text="tool.exe")).to_contain_text("upload off")
                digest = hashlib.sha256(b"copied 1").hexdigest()
                allowed = rows.filter(has_text="to the browser").filter(has_text="allowed")
                await expect(allowed.first.locator("code")).to_have_attribute("title", digest)
                await expect(rows.filter(has_text="clipboard off").first).to_be_visible()
                await visit(instance, page, "session-transfers")
            except BaseException:
                await page.screenshot(path=str(instance.artifacts / "failed-client-policy.png"))
                raise
            finally:
                await browser.close()
    assert errors == []
    assert instance.violations == {}, instance.violations
