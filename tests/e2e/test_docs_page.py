"""``/docs`` in headless Chromium, with no request leaving the machine.

The page renders every operation of the document, and "Authorize" signs in through the
instance's OIDC issuer (authorization code with PKCE) so "Try it out" calls the instance with
the token.

Chromium is Debian's package (``scripts/ensure-browser.sh`` installs it); Playwright drives it.
Every request the browser makes is routed through the test: one to a host other than the
loopback addresses is aborted and recorded, and the test fails if there was any.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from tests.support.paths import REPO

from deskpool.testing.idp import TestIdentityProvider

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}
CONSOLE_CLIENT = "deskpool-console"
ADMIN = "dev-admin"  # the test identity provider's default user


def document_operations() -> int:
    document = yaml.safe_load((REPO / "api" / "openapi" / "openapi.yaml").read_text())
    return sum(len(item) for item in document["paths"].values())


@dataclass
class Browser:
    """A page in Chromium and the requests it tried to send off the machine."""

    page: Any
    context: Any
    blocked: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(
            f"{CHROMIUM} is missing: run `sudo bash scripts/ensure-browser.sh` "
            "(apt-get install chromium)",
            pytrace=False,
        )
    from playwright.async_api import Route, async_playwright

    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = await chromium.new_context()
        page = await context.new_page()
        seen = Browser(page=page, context=context)

        async def local_only(route: Route) -> None:
            url = route.request.url
            host = urlsplit(url).hostname or ""
            if url.startswith(("data:", "blob:", "about:")) or host in LOCAL_HOSTS:
                await route.continue_()
            else:
                seen.blocked.append(url)
                await route.abort("blockedbyclient")

        await context.route("**/*", local_only)
        page.on(
            "console",
            lambda message: (
                seen.console_errors.append(message.text) if message.type == "error" else None
            ),
        )
        try:
            yield seen
        finally:
            await context.close()
            await chromium.close()


ServeApi = Callable[..., Any]


@pytest.fixture
async def serve_api(
    make_config: Callable[..., Any], aiohttp_server: Any
) -> AsyncIterator[ServeApi]:
    """``await serve_api(**settings)``: the API application served on loopback; its base URL."""
    from deskpool.api.app import create_app
    from deskpool.runtime import Runtime

    runtimes: list[Runtime] = []
    servers: list[Any] = []

    async def serve(**settings: str) -> str:
        process = make_config(**settings)
        runtime = Runtime(process.config, process.plugins)
        await runtime.open()
        runtimes.append(runtime)
        server = await aiohttp_server(create_app(runtime), host="127.0.0.1")
        servers.append(server)
        return str(server.make_url("")).rstrip("/")

    yield serve
    for server in servers:
        await server.close()
    for runtime in runtimes:
        await runtime.close()


async def test_docs_lists_every_operation_with_nothing_from_the_internet(
    browser: Browser, serve_api: ServeApi, tmp_path: Path
) -> None:
    base = await serve_api()
    page = browser.page
    response = await page.goto(f"{base}/docs")
    assert response is not None
    assert response.status == 200
    await page.wait_for_selector(".opblock", timeout=30_000)
    summaries = await page.locator(".opblock .opblock-summary-path").all_inner_texts()
    assert len(summaries) == document_operations()
    assert any("/api/v1/pools" in path for path in summaries)
    assert "/openapi.yaml" in [path.strip() for path in summaries]
    title = await page.locator(".info .title").inner_text()
    assert "deskpool API" in title
    assert "OAS 3.1" in title
    await page.screenshot(path=str(tmp_path / "docs.png"), full_page=False)
    assert browser.blocked == []
    assert not [error for error in browser.console_errors if "Content Security Policy" in error]


async def test_authorize_signs_in_through_the_issuer_and_try_it_out_uses_the_token(
    browser: Browser, serve_api: ServeApi
) -> None:
    async with TestIdentityProvider() as idp:
        base = await serve_api(
            AUTH_OIDC_ISSUER_URL=idp.issuer_url,
            AUTH_OIDC_AUDIENCE=idp.audience,
            WEB_PUBLIC_OIDC_CLIENT_ID=CONSOLE_CLIENT,
            AUTH_BOOTSTRAP_ADMIN_SUBJECTS=ADMIN,
        )
        page = browser.page
        await page.goto(f"{base}/docs")
        await page.wait_for_selector(".opblock", timeout=30_000)

        # Sign in: the openIdConnect scheme, discovered from the issuer, with PKCE.
        await page.locator(".auth-wrapper .authorize").click()
        dialog = page.locator(".dialog-ux .modal-ux")
        oidc = dialog.locator(".auth-container", has_text="authorization_code with PKCE")
        await oidc.wait_for()
        assert await oidc.locator("#client_id_authorization_code").input_value() == CONSOLE_CLIENT
        async with page.expect_popup() as popup_info:
            await oidc.locator("button.authorize").click()
        popup = await popup_info.value
        if not popup.is_closed():
            await popup.wait_for_event("close", timeout=30_000)
        await oidc.locator("button", has_text="Logout").wait_for(timeout=30_000)
        await dialog.locator("button.close-modal").click()

        # Try it out: the protected list answers 200 with the token Swagger UI holds.
        operation = page.locator("#operations-pools-listPools")
        await operation.locator(".opblock-summary").click()
        await operation.locator("button.try-out__btn").click()
        await operation.locator("button.execute").click()
        status = operation.locator(".live-responses-table .response .response-col_status")
        await status.first.wait_for(timeout=30_000)
        assert (await status.first.inner_text()).strip() == "200"

    assert browser.blocked == []
