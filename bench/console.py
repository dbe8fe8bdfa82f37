"""The console's first load and the pools page with 1,000 pools, in Debian's Chromium.

Three figures (issue 14's targets in brackets), each min/median/max over the rounds:

- the gzipped size of the JavaScript (and CSS) the browser loads before the first page renders:
  the entry script of ``web/dist/index.html`` and the chunks it imports statically [≤ 250 KB];
- the time from navigation to the pools page showing the first rows of a list of 1,000 pools,
  signed in [< 1 s]. The peer, measured in the same run: the same 1,000 rows as a static HTML
  table from the same server, no script at all; the ratio is console / static page;
- the time from scrolling the table to its end until all 1,000 pools are loaded (the console
  fetches the API's cursor pages as the end comes into view).

The console is the real build (``make console``) served on loopback with its ``/config.json``;
the API is canned on a second loopback origin that answers as deskpool's does: CORS with
preflights, pages of at most 500 (``API_PAGE_SIZE_MAX``) with an opaque ``next`` cursor. So
the figure is the console's own work: its requests, rendering, and virtualizing the table. The
session is a signed-in user placed in the tab's storage, as oidc-client-ts keeps it.

Run from the repository root::

    .venv/bin/python bench/console.py [--rounds 5] [--pools 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gzip
import json
import re
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

REPO = Path(__file__).resolve().parent.parent
DIST = REPO / "web" / "dist"
CHROMIUM = "/usr/bin/chromium"
AUTHORITY = "http://issuer.bench.invalid"
CLIENT = "deskpool-console"
#: The API's largest page (``API_PAGE_SIZE_MAX``): a larger ``limit`` is reduced to it.
PAGE_SIZE_MAX = 500


#: Records in the page when the pools list first shows rows (``__rendered``), and when its
#: count first reads "COUNT pools", every page loaded (``__complete``).
RENDERED = """
new MutationObserver((changes, observer) => {
  const count = document.querySelector(".count");
  if (!count) return;
  if (window.__rendered === undefined && document.querySelector("tbody tr[data-index]")) {
    window.__rendered = performance.now();
  }
  if (count.textContent.replace(/,/g, "") === "COUNT pools" && window.__complete === undefined) {
    window.__complete = performance.now();
    observer.disconnect();
  }
}).observe(document, {childList: true, subtree: true, characterData: true});
"""


def first_load_assets() -> dict[str, list[Path]]:
    """The scripts and stylesheets ``index.html`` loads before anything renders."""
    index = (DIST / "index.html").read_text()
    scripts = re.findall(r'<script[^>]+src="/([^"]+)"', index)
    preloads = re.findall(r'<link[^>]+rel="modulepreload"[^>]+href="/([^"]+)"', index)
    styles = re.findall(r'<link[^>]+rel="stylesheet"[^>]+href="/([^"]+)"', index)
    return {
        "js": [DIST / name for name in dict.fromkeys(scripts + preloads)],
        "css": [DIST / name for name in styles],
    }


def gzipped(paths: list[Path]) -> int:
    return sum(len(gzip.compress(path.read_bytes(), compresslevel=9)) for path in paths)


def pools(count: int) -> list[dict[str, Any]]:
    states = (
        *("provisioning", "starting", "waiting_for_agent", "waiting_for_windows", "ready"),
        *("in_use", "refreshing", "deleting", "failed"),
    )
    return [
        {
            "id": f"00000000-0000-4000-8000-{n:012d}",
            "name": f"pool-{n:04d}",
            "description": "",
            "cluster_id": "00000000-0000-4000-8000-000000000000",
            "template": "ubuntu-22.04",
            "kind": "non_persistent",
            "os_type": "linux",
            "clone_mode": "linked",
            "min_size": 2,
            "max_size": 10,
            "spare": 1,
            "naming_pattern": "p{n}",
            "target_nodes": [],
            "storage": None,
            "state": "enabled",
            "domain_join": None,
            "generation": 1,
            "reconciled_generation": 1,
            "reconciled_at": None,
            "health": {"status": "healthy", "reasons": []},
            "counts": {
                "total": 3,
                "by_state": {state: (3 if state == "ready" else 0) for state in states},
                "assigned": 0,
                "in_session": 0,
                "available": 3,
            },
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
        for n in range(count)
    ]


def static_table(items: list[dict[str, Any]]) -> str:
    rows = "".join(
        f"<tr data-index='{n}'><td>{p['name']}</td><td>{p['state']}</td><td>healthy</td>"
        f"<td>non-persistent</td><td>2-10</td><td>3</td><td>3</td><td>0</td><td>0</td><td>0</td></tr>"
        for n, p in enumerate(items)
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>peer</title></head>"
        f"<body><h1>Pools</h1><table><tbody>{rows}</tbody></table>"
        f"<p class='count'>{len(items)} pools</p></body></html>"
    )


async def start(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve ``app`` on a loopback port the system picks; the runner and its URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


def canned_api(answers: dict[str, Any], items: list[dict[str, Any]]) -> web.Application:
    """The API's answers the pools page needs, with its CORS and its cursor pages."""

    @web.middleware
    async def cors(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.method == "OPTIONS":
            response: web.StreamResponse = web.Response(status=204)
            response.headers.update(
                {
                    "Access-Control-Allow-Methods": "GET, POST, PATCH, PUT, DELETE",
                    "Access-Control-Allow-Headers": "Authorization, Content-Type, Last-Event-ID",
                    "Access-Control-Max-Age": "600",
                }
            )
        else:
            response = await handler(request)
        response.headers["Access-Control-Allow-Origin"] = "*"
        return response

    async def pool_page(request: web.Request) -> web.Response:
        limit = min(int(request.query.get("limit", "50")), PAGE_SIZE_MAX)
        cursor = request.query.get("cursor")
        offset = int(base64.urlsafe_b64decode(cursor + "==")) if cursor else 0
        page = items[offset : offset + limit]
        after = offset + limit
        following = (
            base64.urlsafe_b64encode(str(after).encode()).decode().rstrip("=")
            if after < len(items)
            else None
        )
        return web.json_response({"items": page, "next": following})

    async def canned(request: web.Request) -> web.Response:
        body = answers.get(request.path, {"items": [], "next": None})
        return web.json_response(body)

    async def events(request: web.Request) -> web.Response:
        return web.Response(status=204)

    app = web.Application(middlewares=[cors])
    app.router.add_get("/api/v1/pools", pool_page)
    app.router.add_get("/api/v1/events", events)
    app.router.add_get("/{tail:.*}", canned)
    app.router.add_route("OPTIONS", "/{tail:.*}", canned)
    return app


async def serve(items: list[dict[str, Any]], api: str) -> tuple[web.AppRunner, str]:
    app = web.Application()
    config = {
        "apiBaseUrl": api,
        "oidcAuthority": AUTHORITY,
        "oidcClientId": CLIENT,
        "oidcScope": "openid profile",
        "oidcLogoutUrl": "",
    }
    peer = static_table(items)

    async def config_json(request: web.Request) -> web.Response:
        return web.json_response(config)

    async def peer_page(request: web.Request) -> web.Response:
        return web.Response(text=peer, content_type="text/html")

    async def index(request: web.Request) -> web.FileResponse:
        return web.FileResponse(DIST / "index.html")

    app.router.add_get("/config.json", config_json)
    app.router.add_get("/peer", peer_page)
    app.router.add_static("/assets", DIST / "assets")
    app.router.add_get("/{tail:.*}", index)
    return await start(app)


async def main(rounds: int, count: int) -> None:
    from playwright.async_api import async_playwright

    assets = first_load_assets()
    js, css = gzipped(assets["js"]), gzipped(assets["css"])
    items = pools(count)
    answers = {
        "/api/v1/me": {
            "id": "u",
            "issuer": AUTHORITY,
            "subject": "admin",
            "email": "admin@bench",
            "display_name": "Admin",
            "groups": [],
            "roles": ["platform_admin"],
            "permissions": ["platform:admin"],
            "is_platform_admin": True,
        },
        "/api/v1/setup": {
            "cluster_connected": True,
            "cluster_count": 1,
            "can_connect_cluster": True,
            "is_platform_admin": True,
            "installed_drivers": ["simulator"],
        },
    }
    user = {
        "access_token": "bench",
        "token_type": "Bearer",
        "scope": "openid profile",
        "profile": {"sub": "admin", "iss": AUTHORITY, "aud": CLIENT, "exp": 0, "iat": 0},
        "expires_at": int(time.time()) + 3600,
    }
    storage_key = f"oidc.user:{AUTHORITY}:{CLIENT}"
    api_runner, api = await start(canned_api(answers, items))
    runner, base = await serve(items, api)
    console_ms: list[float] = []
    complete_ms: list[float] = []
    peer_ms: list[float] = []
    try:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
            )

            for _ in range(rounds + 1):  # the first round warms the browser's caches up
                context = await browser.new_context(
                    viewport={"width": 1280, "height": 800}, bypass_csp=True
                )
                await context.add_init_script(
                    f"sessionStorage.setItem({json.dumps(storage_key)}, "
                    f"{json.dumps(json.dumps(user))});" + RENDERED.replace("COUNT", str(count))
                )
                page = await context.new_page()
                await page.goto(f"{base}/pools")
                await page.wait_for_function("window.__rendered !== undefined", timeout=30_000)
                console_ms.append(await page.evaluate("window.__rendered"))
                rows = await page.locator("tbody tr[data-index]").count()
                # Scroll to the end until every page is loaded (each end fetches the next page).
                scrolled = await page.evaluate("performance.now()")
                deadline = time.monotonic() + 60
                while await page.evaluate("window.__complete === undefined"):
                    if time.monotonic() > deadline:
                        raise SystemExit(f"the list never showed all {count} pools")
                    await page.evaluate("document.querySelector('.table-scroller').scrollTop = 1e9")
                    await page.wait_for_timeout(20)
                complete_ms.append(await page.evaluate("window.__complete") - scrolled)
                await page.goto(f"{base}/peer")
                await page.get_by_text(f"{count} pools").wait_for(timeout=30_000)
                peer_ms.append(await page.evaluate("window.__rendered"))
                await context.close()
            await browser.close()
    finally:
        await runner.cleanup()
        await api_runner.cleanup()
    console_ms, complete_ms, peer_ms = console_ms[1:], complete_ms[1:], peer_ms[1:]

    def spread(values: list[float]) -> str:
        return (
            f"min {min(values):.0f} ms, median {statistics.median(values):.0f} ms, "
            f"max {max(values):.0f} ms"
        )

    print(
        f"first load: JavaScript {js / 1024:.1f} KB gzipped (target ≤ 250 KB), "
        f"CSS {css / 1024:.1f} KB"
    )
    print(f"  files: {', '.join(p.name for p in assets['js'] + assets['css'])}")
    print(
        f"pools page with {count} pools, first rows shown, {rounds} rounds: {spread(console_ms)}"
        " (target < 1000 ms)"
    )
    print(f"  rows in the DOM: {rows} of the first page's (virtualized)")
    print(f"scrolled to the end until all {count} pools are loaded: {spread(complete_ms)}")
    print(f"peer (static HTML table, no script): {spread(peer_ms)}")
    print(
        f"ratio console / peer (median): "
        f"{statistics.median(console_ms) / statistics.median(peer_ms):.2f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pools", type=int, default=1000)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.rounds, arguments.pools))
