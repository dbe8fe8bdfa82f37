"""People and desktops found, errors at their fields, filters, live state (issue 37 §2, §4, §6).

In Chromium against ``deskpool run all`` (:mod:`tests.e2e.console_instance`): the Desktops page
searched by the user's name and filtered by pool, with a pool column, and several desktops chosen
for one action whose confirmation names the user; a person added before his first sign-in and
entitled to a pool; a taken name marked at the cluster form's and the pool form's name field, a
taken subject at its field, and no schema message ("Not a valid UUID.") shown raw; the
single-choice filters sized to their content; the live status "Reconnecting…", never "Offline",
while the event stream is refused and the API answers. Every page visited is checked by axe-core.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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

OPTIONS = {
    "clone_seconds": 0.3,
    "boot_seconds": 0.05,
    "agent_seconds": 0.05,
    "shutdown_seconds": 0.05,
    "templates": [{"name": "ubuntu-22.04"}, {"name": "ubuntu-24.04"}],
}
LAUNCH = {"executable_path": CHROMIUM, "args": ["--headless", "--no-sandbox", "--disable-gpu"]}
#: The API's schema messages, never shown as they are.
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
RAW = re.compile(r"Not a valid UUID|Length must be between|Missing data for required|max_size")


async def _prepare(instance: Instance) -> dict[str, str]:
    """A cluster and two pools (two ready desktops each, one entitled to the user); their ids."""
    cluster = await api_call(
        instance,
        "POST",
        "/clusters",
        json={
            "name": "findable",
            "driver": "simulator",
            "endpoint": "simulator://findable",
            "options": OPTIONS,
        },
    )
    ids = {"cluster": cluster["id"]}
    for name, prefix in (("find-pool", "fp"), ("other-pool", "op")):
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
                "min_size": 2,
                "spare": 0,
                "max_size": 2,
                "naming_pattern": prefix + "-{n:02}",
            },
        )
        ids[name] = str(uuid.UUID(pool["id"]))
    await entitle_the_user(instance, ids["find-pool"])

    async def ready() -> bool:
        for name in ("find-pool", "other-pool"):
            shown = await api_call(instance, "GET", f"/pools/{ids[name]}")
            if shown["counts"]["by_state"]["ready"] + shown["counts"]["by_state"]["in_use"] < 2:
                return False
        return True

    await until(ready, "both pools have two ready desktops", seconds=90, every=0.5)
    return ids


async def test_people_and_desktops_are_found_and_errors_are_in_words(instance: Instance) -> None:
    """Each finding a section; every section runs and all their failures are told."""
    from playwright.async_api import async_playwright

    ids = await _prepare(instance)
    failures: dict[str, str] = {}
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(**LAUNCH)
        try:
            for section in (
                desktops_by_user_and_pool,
                person_before_first_sign_in,
                errors_at_their_fields,
                filters_and_live_state,
                webhook_form,
                jobs_name_their_resources,
            ):
                try:
                    await section(instance, browser, ids)
                except Exception as failed:
                    failures[section.__name__] = str(failed)[:1500]
        finally:
            await browser.close()
    assert failures == {}, "\n\n".join(f"{k}: {v}" for k, v in failures.items())
    assert instance.violations == {}, instance.violations


async def _admin(instance: Instance, browser: Any, width: int = 1280) -> Any:
    page = await (await browser.new_context(viewport={"width": width, "height": 900})).new_page()
    await sign_in(instance, page, ADMIN)
    return page


@asynccontextmanager
async def _admin_page(
    instance: Instance, browser: Any, name: str, width: int = 1280
) -> AsyncIterator[Any]:
    """The administrator's page; its picture kept as failed-``name``.png when the section fails."""
    admin = await _admin(instance, browser, width)
    try:
        yield admin
    except BaseException:
        await admin.screenshot(path=str(instance.artifacts / f"failed-{name}.png"))
        raise
    finally:
        await admin.context.close()


async def _submit(form: Any, button: str, **values: str) -> None:
    """Fill ``form``'s fields (by label, ``_`` for a space; a select chosen by value), submit."""
    for label, value in values.items():
        field = form.get_by_label(label.replace("_", " "), exact=True)
        if await field.evaluate("(e) => e.tagName") == "SELECT":
            await field.select_option(value)
        else:
            await field.fill(value)
    await form.get_by_role("button", name=button).click()


async def _name_marked(form: Any) -> None:
    """The form's Name field marked, its error (the field's description) about the name."""
    from playwright.async_api import expect

    name = form.get_by_label("Name", exact=True)
    await expect(name).to_have_attribute("aria-invalid", "true", timeout=TIMEOUT)
    await expect(name).to_have_accessible_description(re.compile("name", re.I))
    assert not RAW.search(await form.inner_text()), await form.inner_text()


async def desktops_by_user_and_pool(instance: Instance, browser: Any, ids: dict[str, str]) -> None:
    """1. Desktops: a pool column, searched by user, filtered by pool, chosen for one action."""
    from playwright.async_api import expect

    user = await (await browser.new_context(viewport={"width": 1280, "height": 800})).new_page()
    admin = await _admin(instance, browser)
    try:
        await open_as_the_user(instance, user, "find-pool")
        await admin.goto(f"{instance.console}/desktops")
        table = admin.get_by_role("table", name="Desktops")
        await expect(table.get_by_role("cell", name="other-pool").first).to_be_visible(
            timeout=TIMEOUT
        )
        await expect(table.get_by_role("cell", name="find-pool").first).to_be_visible()
        # Filtered by pool: only that pool's desktops.
        await admin.get_by_label("Pool").select_option(label="other-pool")
        await expect(table.get_by_role("cell", name="find-pool")).to_have_count(0, timeout=TIMEOUT)
        await expect(table.get_by_role("row").filter(has_text="op-")).to_have_count(2)
        await admin.get_by_label("Pool").select_option(label="Any pool")
        # Searched by the user's name: only his desktop.
        await admin.get_by_label("User", exact=True).fill("Desk")
        await admin.locator("datalist option[value^='Desk User']").first.wait_for(state="attached")
        await admin.get_by_label("User", exact=True).fill("Desk User (user@deskpool.test)")
        await expect(table.get_by_role("row").filter(has_text="op-")).to_have_count(
            0, timeout=TIMEOUT
        )
        mine = table.get_by_role("row").filter(has_text=USER[1])
        await expect(mine).to_have_count(1)
        await visit(instance, admin, "desktops-by-user")
        # Several chosen: the action's confirmation names the user it affects.
        await admin.get_by_label("User", exact=True).fill("")
        await expect(table.get_by_role("row").filter(has_text="op-")).to_have_count(
            2, timeout=TIMEOUT
        )
        await admin.get_by_role("button", name="Select all").click()
        await admin.get_by_role("button", name="Power off 4 selected", exact=True).click()
        dialog = admin.get_by_role("dialog")
        await expect(dialog).to_contain_text(f"{USER[1]} on fp-", timeout=TIMEOUT)
        await visit(instance, admin, "desktops-bulk-confirmation")
        await dialog.get_by_role("button", name="Cancel").click()
        await expect(admin.get_by_role("dialog")).to_have_count(0)
        await expect(user.locator('[data-state="connected"]')).to_be_visible()
    except BaseException:
        for name, page in (("admin", admin), ("user", user)):
            await page.screenshot(path=str(instance.artifacts / f"failed-desktops-{name}.png"))
        raise
    finally:
        await user.context.close()
        await admin.context.close()


async def person_before_first_sign_in(
    instance: Instance, browser: Any, ids: dict[str, str]
) -> None:
    """2. A person added by his subject, entitled, found by his name; his subject again refused."""
    from playwright.async_api import expect

    async with _admin_page(instance, browser, "person") as admin:
        await admin.goto(f"{instance.console}/people/users")
        await admin.get_by_text("Add a person who has not signed in yet").click()
        form = admin.get_by_role("form", name="Add a person")
        await form.get_by_label("Subject at the identity provider").fill("new-hire")
        await form.get_by_label("Name to show").fill("Nora Newhire")
        await form.get_by_role("button", name="Add the person").click()
        await expect(admin.get_by_role("cell", name="Nora Newhire").first).to_be_visible(
            timeout=TIMEOUT
        )
        # The same subject again: refused at its field, in words.
        await form.get_by_label("Subject at the identity provider").fill("new-hire")
        await form.get_by_role("button", name="Add the person").click()
        subject = form.get_by_label("Subject at the identity provider")
        await expect(subject).to_have_attribute("aria-invalid", "true", timeout=TIMEOUT)
        await visit(instance, admin, "person-added")

        await admin.goto(f"{instance.console}/pools/{ids['find-pool']}")
        entitle = admin.get_by_role("form", name="Entitle")
        await entitle.get_by_label("Entitle a group or user").select_option(
            label="user Nora Newhire"
        )
        await entitle.get_by_role("button", name="Entitle").click()
        entitlements = admin.get_by_role("region", name="Entitlements")
        entitled = entitlements.get_by_role("listitem").filter(has_text="Nora Newhire")
        await expect(entitled).to_be_visible(timeout=TIMEOUT)
        await visit(instance, admin, "person-entitled")


async def errors_at_their_fields(instance: Instance, browser: Any, ids: dict[str, str]) -> None:
    """3. A taken name at the name field of the cluster and pool forms; no schema message."""
    from playwright.async_api import expect

    async with _admin_page(instance, browser, "errors") as admin:
        await admin.goto(f"{instance.console}/clusters")
        await admin.get_by_role("button", name="Connect a cluster").click()
        form = admin.get_by_role("form", name="Connect a cluster")
        await _submit(
            form, "Connect", Name="findable", Driver="simulator", Endpoint="simulator://another"
        )
        await _name_marked(form)
        await visit(instance, admin, "cluster-name-taken")

        await admin.goto(f"{instance.console}/pools/new")
        pool_form = admin.locator("form").filter(has=admin.get_by_label("Naming pattern"))
        await pool_form.get_by_label("Name", exact=True).fill("find-pool")
        await pool_form.get_by_label("Naming pattern").fill("fx-{n:02}")
        await pool_form.get_by_label("Cluster").select_option(label="findable")
        template = pool_form.get_by_label("Template")
        await expect(template.locator("option", has_text="ubuntu-22.04")).to_have_count(
            1, timeout=TIMEOUT
        )
        chosen = template.locator("option", has_text="ubuntu-22.04")
        await template.select_option(await chosen.get_attribute("value"))
        await pool_form.get_by_role("button", name="Create pool").click()
        await _name_marked(pool_form)
        await visit(instance, admin, "pool-name-taken")


async def filters_and_live_state(instance: Instance, browser: Any, ids: dict[str, str]) -> None:
    """4. Single-choice filters sized to their content; "Reconnecting…" while the API answers."""
    from playwright.async_api import expect

    async with _admin_page(instance, browser, "filters", width=1440) as admin:
        for path in ("/sessions", "/desktops", "/audit", "/jobs"):
            await admin.goto(f"{instance.console}{path}")
            await expect(admin.locator(".filters select").first).to_be_visible(timeout=TIMEOUT)
            widths = await admin.eval_on_selector_all(
                "main select", "(all) => all.map((s) => s.getBoundingClientRect().width)"
            )
            assert widths, path
            assert max(widths) < 480, (path, widths)
        # The navigation's links apart: never run into one another ("AuditJobs").
        gaps = await admin.eval_on_selector_all(
            ".nav-group li a",
            """(items) => items.slice(1).map((li, i) => {
                const before = items[i].getBoundingClientRect();
                const now = li.getBoundingClientRect();
                return [li.innerText, Math.round(now.left - before.right), now.top === before.top];
            }).filter(([, , sameRow]) => sameRow).map(([text, gap]) => [text, gap])""",
        )
        assert gaps
        assert min(gap for _, gap in gaps) >= 8, gaps
        # ... and on one row at 1440 px (the finding: two header rows at that width).
        rows = await admin.eval_on_selector_all(
            ".main-nav a", "(all) => [...new Set(all.map((a) => a.getBoundingClientRect().top))]"
        )
        assert len(rows) == 1, rows
        await expect(admin.get_by_role("status").filter(has_text="Live")).to_be_visible(
            timeout=TIMEOUT
        )

        # The event stream refused, the API still answering: reconnecting, not offline.
        async def refuse(route: Any) -> None:
            await route.fulfill(status=503, headers={"Retry-After": "1"}, body="")

        await admin.route("**/api/v1/events**", refuse)
        await admin.reload()
        live = admin.locator(".live")
        await expect(live).to_have_text(re.compile("Reconnecting|Connecting"), timeout=TIMEOUT)
        await admin.wait_for_timeout(3000)
        await expect(live).not_to_have_text("Offline")
        await visit(instance, admin, "live-reconnecting")
        await admin.unroute("**/api/v1/events**")
        await expect(live).to_have_text("Live", timeout=TIMEOUT)


async def webhook_form(instance: Instance, browser: Any, ids: dict[str, str]) -> None:
    """5. Webhooks reached from the navigation; a bad URL and a taken name said at their fields."""
    from playwright.async_api import expect

    async with _admin_page(instance, browser, "webhooks") as admin:
        await (
            admin.get_by_role("navigation", name="Main")
            .get_by_role("link", name="Webhooks", exact=True)
            .click()
        )
        await admin.get_by_text("Add a webhook").click()
        form = admin.get_by_role("form", name="New webhook")
        await _submit(
            form,
            "Add the webhook",
            Name="siem",
            Receiver_URL="ftp://siem.example/in",
            Event_types="audit.pool.*, session.*",
        )
        url = form.get_by_label("Receiver URL")
        await expect(url).to_have_attribute("aria-invalid", "true", timeout=TIMEOUT)
        assert not RAW.search(await form.inner_text()), await form.inner_text()
        await url.fill("http://127.0.0.1:9/in")
        await form.get_by_role("button", name="Add the webhook").click()
        await expect(form.get_by_test_id("webhook-secret")).to_contain_text("whsec_")
        table = admin.get_by_role("table", name="Webhooks")
        await expect(table.get_by_role("cell", name="siem", exact=True)).to_be_visible()
        # The same name again: marked at the name field.
        await _submit(
            form,
            "Add the webhook",
            Name="siem",
            Receiver_URL="http://127.0.0.1:9/other",
            Event_types="*",
        )
        await _name_marked(form)
        await visit(instance, admin, "webhook-name-taken")


async def jobs_name_their_resources(instance: Instance, browser: Any, ids: dict[str, str]) -> None:
    """6. Jobs: a job's resource by its name ("desktops 25a3738c-..." was shown), id on hover."""
    from playwright.async_api import expect

    async with _admin_page(instance, browser, "jobs") as admin:
        await admin.goto(f"{instance.console}/jobs")
        table = admin.get_by_role("table", name="Jobs")
        named = table.get_by_role("cell", name=re.compile(r"^desktop (fp|op)-\d\d$"))
        await expect(named.first).to_be_visible(timeout=TIMEOUT)
        title = await named.first.locator("[title]").get_attribute("title")
        assert title is not None
        assert UUID.search(title), title
        resources = await table.evaluate(
            """(table) => {
                const column = [...table.querySelectorAll("thead th")]
                    .findIndex((th) => th.innerText.trim() === "Resource");
                return [...table.querySelectorAll("tbody tr")]
                    .map((row) => row.children[column]?.innerText ?? "");
            }"""
        )
        assert resources, "no job listed"
        assert not [text for text in resources if UUID.search(text)], resources
        await visit(instance, admin, "jobs-names")
