"""The console's first load and the pools page with 1,000 pools, in Debian's Chromium.

Two figures (issue 14's targets in brackets):

- the gzipped size of the JavaScript (and CSS) the browser loads before the first page renders:
  the entry script of ``web/dist/index.html`` and the chunks it imports statically [≤ 250 KB];
- the time from navigation to the pools page showing 1,000 pools, signed in, min/median/max
  over the rounds [< 1 s]. The peer, measured in the same run: the same 1,000 rows as a static
  HTML table from the same server, no script at all; the ratio is console / static page.

The console is the real build (``make console``) served on loopback with its ``/config.json``;
the API answers are canned (intercepted in the browser), so the figure is the console's own
work: fetching two JSON documents, rendering, and virtualizing the table. The session is a
signed-in user placed in the tab's storage, as oidc-client-ts keeps it.

Run from the repository root::

    .venv/bin/python bench/console.py [--rounds 5] [--pools 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import re
import socket
import statistics
import time
from pathlib import Path
from typing import Any

from aiohttp import web

REPO = Path(__file__).resolve().parent.parent
DIST = REPO / "web" / "dist"
CHROMIUM = "/usr/bin/chromium"
API = "http://api.bench.invalid"
AUTHORITY = "http://issuer.bench.invalid"
CLIENT = "deskpool-console"


#: Records in the page when the list's count first reads "COUNT pools" (no polling delay).
RENDERED = """
new MutationObserver((changes, observer) => {
  const count = document.querySelector(".count");
  if (count && count.textContent === "COUNT pools" && window.__rendered === undefined) {
    window.__rendered = performance.now();
    observer.disconnect();
  }
}).observe(document, {childList: true, subtree: true, characterData: true});
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
    states = ("provisioning", "starting", "waiting_for_agent", "waiting_for_windows", "ready")
    states += ("in_use", "refreshing", "deleting", "failed")
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
        f"<tr><td>{p['name']}</td><td>{p['state']}</td><td>healthy</td><td>non-persistent</td>"
        f"<td>2-10</td><td>3</td><td>3</td><td>0</td><td>0</td><td>0</td></tr>"
        for p in items
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>peer</title></head>"
        f"<body><h1>Pools</h1><table><tbody>{rows}</tbody></table>"
        f"<p class='count'>{len(items)} pools</p></body></html>"
    )


async def serve(items: list[dict[str, Any]]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    config = {
        "apiBaseUrl": API,
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
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def main(rounds: int, count: int) -> None:
    from playwright.async_api import Route, async_playwright

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
        "/api/v1/pools": {"items": items, "next": None},
    }
    user = {
        "access_token": "bench",
        "token_type": "Bearer",
        "scope": "openid profile",
        "profile": {"sub": "admin", "iss": AUTHORITY, "aud": CLIENT, "exp": 0, "iat": 0},
        "expires_at": int(time.time()) + 3600,
    }
    storage_key = f"oidc.user:{AUTHORITY}:{CLIENT}"
    runner, base = await serve(items)
    console_ms: list[float] = []
    peer_ms: list[float] = []
    try:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
            )

            async def api(route: Route) -> None:
                path = route.request.url.removeprefix(API).split("?")[0]
                if path == "/api/v1/events":
                    await route.fulfill(status=204)
                    return
                body = answers.get(path, {"items": [], "next": None})
                await route.fulfill(
                    status=200, content_type="application/json", body=json.dumps(body)
                )

            for _ in range(rounds + 1):  # the first round warms the browser's caches up
                context = await browser.new_context(
                    viewport={"width": 1280, "height": 800}, bypass_csp=True
                )
                await context.add_init_script(
                    f"sessionStorage.setItem({json.dumps(storage_key)}, "
                    f"{json.dumps(json.dumps(user))});" + RENDERED.replace("COUNT", str(count))
                )
                await context.route(f"{API}/**", api)
                page = await context.new_page()
                await page.goto(f"{base}/pools")
                await page.get_by_text(f"{count} pools").wait_for(timeout=30_000)
                console_ms.append(await page.evaluate("window.__rendered"))
                rows = await page.locator("tbody tr").count()
                await page.goto(f"{base}/peer")
                await page.get_by_text(f"{count} pools").wait_for(timeout=30_000)
                peer_ms.append(await page.evaluate("window.__rendered"))
                await context.close()
            await browser.close()
    finally:
        await runner.cleanup()
    console_ms, peer_ms = console_ms[1:], peer_ms[1:]

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
        f"pools page with {count} pools, {rounds} rounds: {spread(console_ms)} (target < 1000 ms)"
    )
    print(f"  rows in the DOM: {rows} of {count} (virtualized)")
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
