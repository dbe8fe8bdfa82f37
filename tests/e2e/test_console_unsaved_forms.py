"""Unsaved-changes warnings on every form that edits something, in Chromium (issue 37).

Issue 37's finding: unsaved form changes were lost on Back without a warning (only the pool and
rollout forms asked). Now every form of the console that edits something asks before its
changes are lost: a cluster's connection (new and changed), a schedule, a person, a group and
its members, a grant, an OIDC binding, a pool's entitlements, the help desk's message and the
license. For each, a change then a click on a link of the navigation asks (and, declined, stays
on the page with the change); for some, the browser's Back asks too, and closing the tab gets
the browser's own question. A form left unchanged asks nothing. Every page visited is saved as a
screenshot and checked with axe-core.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from tests.e2e.console_instance import ADMIN, TIMEOUT, USER, Instance, api_call, visit
from tests.e2e.console_pools import chromium, entitled_pool, signed_in_page, simulated_cluster

from deskpool.testing.processes import until

#: The question of the console's unsaved-changes warning.
LEAVE = "You have changes that are not saved. Leave this page and lose them?"


@dataclass(frozen=True)
class Form:
    """A form: where it is, what opens it (a button's words, if any), a field to change.

    The field is changed to ``value``; a select to its first choice (``value`` says which).
    """

    name: str
    path: str
    field: str
    value: str
    opener: str | None = None
    select: bool = False


async def _forms(instance: Instance) -> list[Form]:
    pool = await entitled_pool(instance, "unsaved", "unsaved", min_size=0, max_size=1)
    cluster = await api_call(instance, "POST", "/clusters", json=simulated_cluster("other"))
    group = await api_call(instance, "POST", "/groups", json={"key": "ops", "name": "Ops"})
    user = await api_call(instance, "GET", "/me", USER)
    return [
        Form("new cluster", "/clusters", "Name", "lab", opener="Connect a cluster"),
        Form(
            "cluster",
            f"/clusters/{cluster['id']}",
            "Endpoint",
            "simulator://moved",
            opener="Change the connection",
        ),
        Form("new schedule", "/schedules/new", "Name", "office hours"),
        Form(
            "person",
            "/people/users",
            "Name to show",
            "Ann Other",
            opener="Add a person who has not signed in yet",
        ),
        Form("group", "/people/groups", "Group key", "finance"),
        Form("member", f"/people/groups/{group['id']}", "Add a user", USER[1], select=True),
        Form("grant", "/people/grants", "Group", "Ops", select=True),
        Form("binding", "/people/bindings", "Claim value", "finance-team"),
        Form(
            "entitlement",
            f"/pools/{pool['id']}",
            "Entitle a group or user",
            "group Ops",
            select=True,
        ),
        Form("message", f"/helpdesk/{user['id']}", "Message", "Call the help desk"),
        Form("license", "/license", "Signed license document", "-----BEGIN"),
    ]


async def _asked(questions: list[str], count: int) -> None:
    """Wait until ``count`` questions were asked (the page's dialogs arrive as events)."""
    await until(
        lambda: asyncio.sleep(0, len(questions) >= count), f"{count} question(s)", seconds=5
    )
    assert len(questions) == count, questions


async def _change(page: Any, form: Form) -> None:
    if form.opener:
        await page.get_by_text(form.opener, exact=True).click()
    field = page.get_by_label(form.field, exact=True).first
    if form.select:
        await field.select_option(index=1)  # the first choice after "Choose…"
    else:
        await field.fill(form.value)


async def test_every_form_asks_before_its_changes_are_lost(instance: Instance) -> None:
    from playwright.async_api import async_playwright, expect

    forms = await _forms(instance)
    async with async_playwright() as playwright:
        browser = await chromium(playwright)
        try:
            page = await signed_in_page(instance, browser, ADMIN)
            # Unchanged, a form asks nothing.
            await page.goto(f"{instance.console}/people/bindings")
            await expect(page.get_by_label("Claim value", exact=True)).to_be_visible(
                timeout=TIMEOUT
            )
            asked: list[str] = []

            async def record(dialog: Any) -> None:
                asked.append(dialog.message)
                await dialog.accept()

            page.on("dialog", record)
            await page.get_by_role("link", name="Dashboard", exact=True).click()
            await page.wait_for_url("**/dashboard")
            assert asked == [], asked
            page.remove_listener("dialog", record)

            for form in forms:
                await page.goto(f"{instance.console}{form.path}")
                await _change(page, form)
                await visit(instance, page, f"unsaved-{form.name.replace(' ', '-')}")
                questions: list[str] = []

                async def decline(dialog: Any, questions: list[str] = questions) -> None:
                    questions.append(dialog.message)
                    await dialog.dismiss()

                page.once("dialog", decline)
                await page.get_by_role("link", name="Dashboard", exact=True).click()
                await _asked(questions, 1)
                assert page.url == f"{instance.console}{form.path}", (form.name, page.url)
                field = page.get_by_label(form.field, exact=True).first
                if not form.select:
                    await expect(field).to_have_value(form.value)
                assert questions == [LEAVE], (form.name, questions)

            # Back asks too (declined: the page and its change stay), and leaves when accepted.
            last = forms[-1]
            questions = []

            async def answer(dialog: Any) -> None:
                questions.append(dialog.message)
                await (dialog.dismiss() if len(questions) == 1 else dialog.accept())

            page.on("dialog", answer)
            await page.go_back()
            await _asked(questions, 1)
            assert questions == [LEAVE], questions
            await expect(page.get_by_label(last.field, exact=True)).to_have_value(last.value)
            assert page.url == f"{instance.console}{last.path}", page.url
            await page.go_back()
            await _asked(questions, 2)
            await expect(page).not_to_have_url(f"{instance.console}{last.path}", timeout=TIMEOUT)
            # Asked once: the browser's own question (beforeunload) does not follow the answer.
            await asyncio.sleep(0.5)
            assert questions == [LEAVE, LEAVE], questions
            page.remove_listener("dialog", answer)

            # Closing the tab with a change: the browser's own question (beforeunload).
            closing = await signed_in_page(instance, browser, ADMIN, "/people/bindings")
            await _change(closing, Form("binding", "", "Claim value", "x"))
            kinds: list[str] = []

            async def on_unload(dialog: Any) -> None:
                kinds.append(dialog.type)
                await dialog.dismiss()

            closing.on("dialog", on_unload)
            await closing.close(run_before_unload=True)
            await _asked(kinds, 1)
            assert kinds == ["beforeunload"], kinds
        finally:
            await browser.close()
    assert instance.violations == {}, instance.violations
