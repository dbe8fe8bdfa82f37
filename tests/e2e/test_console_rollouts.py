"""The rollout page and the user's warning banner in Chromium, against ``deskpool run all``.

The instance is the console test's (:mod:`tests.e2e.console_instance`): every component in one
process, the test's OIDC issuer with its sign-in page, the simulator driver and the desktop
daemon simulator. Through the API, a simulated cluster with two templates and a pool of two
desktops entitled to the user are made. Then:

1. the user signs in and opens a desktop;
2. the administrator opens the pool's rollout page, starts a rollout to the other template
   (warning the users and logging them off after 8 s, with a message), and the page follows it
   live to 100 %;
3. meanwhile the user's desktop view shows the warning banner: the message and a countdown;
4. the image history offers "Roll back to this" for the former template.

Every page visited is saved as a screenshot and checked with axe-core (no serious or critical
violation), as in the console test.
"""

from __future__ import annotations

import uuid
from typing import Any

import aiohttp
from tests.e2e.console_instance import (
    ADMIN,
    CHROMIUM,
    TIMEOUT,
    USER,
    Instance,
    open_as_the_user,
    sign_in,
    visit,
)

from deskpool.testing.processes import until

SIMULATOR_OPTIONS = {
    "clone_seconds": 0.3,
    "boot_seconds": 0.05,
    "agent_seconds": 0.05,
    "shutdown_seconds": 0.05,
    "templates": [{"name": "ubuntu-22.04"}, {"name": "ubuntu-24.04"}],
}


async def _prepare(instance: Instance) -> str:
    """A simulated cluster, a pool of two ready desktops entitled to the user; the pool's id."""
    admin = instance.idp.issue_token(
        ADMIN[0], email="admin@deskpool.test", email_verified=True, name=ADMIN[1]
    )
    user = instance.idp.issue_token(USER[0], email="user@deskpool.test", name=USER[1])
    headers = {"Authorization": f"Bearer {admin}"}
    async with aiohttp.ClientSession() as http:

        async def call(method: str, path: str, token: dict[str, str], **kw: Any) -> Any:
            url = f"{instance.api}/api/v1{path}"
            async with http.request(method, url, headers=token, **kw) as response:
                body = await response.json()
                assert response.status < 300, (method, path, response.status, body)
                return body

        cluster = await call(
            "POST",
            "/clusters",
            headers,
            json={
                "name": "rollouts",
                "driver": "simulator",
                "endpoint": "simulator://rollouts",
                "options": SIMULATOR_OPTIONS,
            },
        )
        pool = await call(
            "POST",
            "/pools",
            headers,
            json={
                "name": "rollout-pool",
                "cluster_id": cluster["id"],
                "template": "ubuntu-22.04",
                "kind": "non_persistent",
                "os_type": "linux",
                "min_size": 2,
                "spare": 0,
                "max_size": 2,
                "naming_pattern": "rp-{n:02}",
            },
        )
        me = await call("GET", "/me", {"Authorization": f"Bearer {user}"})
        await call(
            "POST",
            f"/pools/{pool['id']}/entitlements",
            headers,
            json={"subject_type": "user", "subject_id": me["id"]},
        )

        async def ready() -> bool:
            shown = await call("GET", f"/pools/{pool['id']}", headers)
            return bool(shown["counts"]["by_state"]["ready"] == 2)

        await until(ready, "the pool has two ready desktops", seconds=90, every=0.5)
    return str(uuid.UUID(pool["id"]))


async def test_the_rollout_page_follows_a_rollout_and_the_user_sees_the_warning(
    instance: Instance,
) -> None:
    from playwright.async_api import async_playwright, expect

    pool_id = await _prepare(instance)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        admin = await (
            await browser.new_context(viewport={"width": 1280, "height": 900})
        ).new_page()
        user = await (await browser.new_context(viewport={"width": 1280, "height": 800})).new_page()
        try:
            # 1. The user opens a desktop.
            await open_as_the_user(instance, user, "rollout-pool")

            # 2. The administrator starts a rollout from the pool's rollout page.
            await sign_in(instance, admin, ADMIN)
            await admin.goto(f"{instance.console}/pools/{pool_id}")
            await admin.get_by_role("link", name="Rollouts and image history").click()
            await admin.wait_for_url(f"**/pools/{pool_id}/rollouts")
            await visit(instance, admin, "rollouts-empty")
            await admin.get_by_role("button", name="Start a rollout").click()
            await admin.get_by_label("New template").select_option("9001")
            await admin.get_by_label("Batch size").fill("2")
            await admin.get_by_label("Desktops in use").select_option("force_logoff")
            await admin.get_by_label("Warning (seconds)").fill("8")
            await admin.get_by_label("Message to users").fill("Save your work: new image")
            await visit(instance, admin, "rollout-form")
            await admin.get_by_role("button", name="Start the rollout").click()
            rollout = admin.get_by_test_id("rollout").first
            await expect(rollout).to_be_visible(timeout=TIMEOUT)

            # 3. The user's desktop view shows the warning: the message and a countdown.
            banner = user.get_by_test_id("notice-banner")
            await expect(banner).to_be_visible(timeout=60_000)
            await expect(user.get_by_test_id("notice-message")).to_have_text(
                "Save your work: new image"
            )
            countdown = await user.get_by_test_id("notice-countdown").inner_text()
            assert countdown.startswith("0:0"), countdown  # at most the 8 s of the warning
            await visit(instance, user, "desktop-warned")

            # The page follows the rollout live to 100 %.
            await expect(admin.get_by_test_id("rollout-percent").first).to_have_text(
                "100 %", timeout=120_000
            )
            await expect(rollout.get_by_text("succeeded")).to_be_visible(timeout=TIMEOUT)
            await visit(instance, admin, "rollout-done")

            # 4. The image history offers the former template back.
            await expect(
                admin.get_by_role("table", name="Image history").get_by_role(
                    "button", name="Roll back to this"
                )
            ).to_have_count(1)
        except BaseException:
            for name, page in (("admin", admin), ("user", user)):
                await page.screenshot(path=str(instance.artifacts / f"failed-rollout-{name}.png"))
            raise
        finally:
            await browser.close()
    assert instance.violations == {}, instance.violations
