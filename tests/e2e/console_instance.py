"""The console served by real deskpool processes, for the browser tests (Chromium, Playwright).

:func:`console_instance` runs ``deskpool run all`` (API, worker, gateway and the console from
the built ``web/dist``) on a database of its own, signing in at a test OIDC issuer with a
sign-in page, its desktops drawn (or bridged) by the desktop daemon simulator it is given. Every
listener binds port 0: the console's API URL, the API's allowed origin and the gateway's tunnel
URL are left for the process to derive from what it bound (:mod:`deskpool.bound_ahead`), and
the test reads those addresses from ``LISTEN_ADDRESSES_FILE``.
:func:`sign_in` signs a user in through the issuer's page; :func:`visit` saves a screenshot
of a page and records its serious or critical axe-core violations. :func:`canvas_picture` takes
the desktop view's picture out of the browser (the display's default layer, as a PNG) and
:func:`read_words` reads its text (tesseract); :func:`ocr_token` makes a word to read back.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from PIL import Image
from tests.support.paths import REPO

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.ocr import read_text
from deskpool.testing.processes import (
    ANY_PORT,
    deskpool_command,
    read_addresses,
    until,
    until_ready,
)

CHROMIUM = "/usr/bin/chromium"
DIST = REPO / "web" / "dist"
AXE = REPO / "web" / "node_modules" / "axe-core" / "axe.min.js"
ADMIN = ("dev-admin", "Development Administrator")
USER = ("desk-user", "Desk User")
TIMEOUT = 30_000


@dataclass
class Instance:
    """The running deskpool processes and what the test drives them with."""

    console: str
    api: str
    idp: TestIdentityProvider
    daemon: DesktopDaemonSimulator
    artifacts: Path
    log: Path
    visited: list[str] = field(default_factory=list)
    violations: dict[str, list[str]] = field(default_factory=dict)


@contextlib.asynccontextmanager
async def console_instance(
    database_url: str,
    test_servers: Any,
    tmp_path: Path,
    daemon: DesktopDaemonSimulator,
    extra_env: dict[str, str] | None = None,
) -> AsyncIterator[Instance]:
    """``deskpool run all`` on ``database_url``, its desktops drawn by ``daemon`` (started here).

    ``extra_env`` adds settings (``RECORDINGS_PATH``...).
    """
    if not (DIST / "index.html").is_file() or not AXE.is_file():
        pytest.fail("the console is not built: run `make console` (or `make test`)", pytrace=False)
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: run `sudo bash scripts/ensure-browser.sh`")
    artifacts = Path(os.environ.get("DESKPOOL_TEST_ARTIFACTS") or tmp_path) / "console"
    artifacts.mkdir(parents=True, exist_ok=True)
    addresses_file = tmp_path / "deskpool-addresses.json"
    idp = TestIdentityProvider(sign_in_page=True)
    idp.users.clear()
    idp.add_user(ADMIN[0], email="admin@deskpool.test", email_verified=True, name=ADMIN[1])
    idp.add_user(USER[0], email="user@deskpool.test", email_verified=True, name=USER[1])
    await idp.start()
    await daemon.start()
    env = {
        "PATH": os.environ["PATH"],
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "DATABASE_URL": database_url,
        "KVSTORE_ADDR": test_servers.kv_addr,
        "KVSTORE_KEY_PREFIX": f"deskpool-console-{secrets.token_hex(4)}:",
        "SECRETS_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
        "APP_ENV": "development",
        "API_ADDR": ANY_PORT,
        "WEB_ADDR": ANY_PORT,
        "GATEWAY_ADDR": ANY_PORT,
        "METRICS_ADDR": ANY_PORT,
        "LISTEN_ADDRESSES_FILE": str(addresses_file),
        "WEB_DIST_PATH": str(DIST),
        "AUTH_OIDC_ISSUER_URL": idp.issuer_url,
        "AUTH_OIDC_AUDIENCE": idp.audience,
        "AUTH_BOOTSTRAP_ADMIN_EMAILS": "admin@deskpool.test",
        "WEB_PUBLIC_OIDC_AUTHORITY": idp.issuer_url,
        "WEB_PUBLIC_OIDC_CLIENT_ID": "deskpool-console",
        "WEB_PUBLIC_OIDC_SCOPE": "openid profile email offline_access",
        "DESKTOPD_ADDRESS": daemon.address,
        "WORKER_POLL_INTERVAL": "1s",
        "POOL_RECONCILE_INTERVAL": "2s",
        **(extra_env or {}),
    }
    log = artifacts / "deskpool.log"
    with log.open("w") as output:
        process = subprocess.Popen(  # noqa: ASYNC220 (started once, then awaited by polling)
            [*deskpool_command(), "run", "all"], env=env, cwd=REPO, stdout=output, stderr=output
        )
    try:
        async with aiohttp.ClientSession() as session:
            try:
                bound = await until(
                    lambda: bound_addresses(addresses_file, process),
                    "deskpool wrote the addresses it bound",
                    seconds=60,
                )
                await until_ready(
                    session,
                    f"http://{bound['ops']}/readyz",
                    "deskpool is ready",
                    exited=lambda: process.poll() is not None,
                )
            except AssertionError as failed:
                pytest.fail(f"{failed}:\n{log.read_text()[-3000:]}")
            console, api = f"http://{bound['web']}", f"http://{bound['api']}"
            # The desktop user has signed in once before (their user record exists).
            token = idp.issue_token(USER[0], email="user@deskpool.test", name=USER[1])
            async with session.get(
                f"{api}/api/v1/me", headers={"Authorization": f"Bearer {token}"}
            ) as me:
                assert me.status == 200
        yield Instance(console, api, idp, daemon, artifacts, log)
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        await daemon.stop()
        await idp.stop()


async def bound_addresses(path: Path, process: subprocess.Popen[bytes]) -> dict[str, str] | None:
    """What the process's listeners bound, once it wrote them; fails when it exited first."""
    if process.poll() is not None:
        raise AssertionError("deskpool exited before it wrote the addresses it bound")
    return read_addresses(path)


async def visit(instance: Instance, page: Any, name: str) -> None:
    """Save a screenshot of the page and record its serious or critical axe violations."""
    # Not "networkidle": the console keeps its live event stream open.
    await page.wait_for_load_state("load")
    from playwright.async_api import expect

    await expect(page.locator('[aria-busy="true"]')).to_have_count(0, timeout=TIMEOUT)
    await page.screenshot(path=str(instance.artifacts / f"{len(instance.visited):02}-{name}.png"))
    instance.visited.append(name)
    if not await page.evaluate("typeof window.axe !== 'undefined'"):
        await page.evaluate(AXE.read_text())
    result = await page.evaluate(
        "axe.run(document, {resultTypes: ['violations']}).then(r => JSON.stringify(r.violations))"
    )
    serious = [
        f"{v['id']}: {v['help']} ({len(v['nodes'])}: {v['nodes'][0]['target']})"
        for v in json.loads(result)
        if v.get("impact") in {"serious", "critical"}
    ]
    if serious:
        instance.violations[name] = serious


#: What a chart's canvas (``components/Chart.tsx``, found by its figure's ``data-testid``) holds:
#: its size, the pixels drawn (not transparent), how many colours, how many pixels of ``rgb`` (±2).
CHART_PIXELS = """([testId, rgb]) => {
  const canvas = document.querySelector(`[data-testid="${testId}"] canvas`);
  if (!canvas || !canvas.width || !canvas.height) return null;
  const d = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  const colours = new Set();
  let drawn = 0, matching = 0;
  for (let i = 0; i < d.length; i += 4) {
    if (d[i + 3] === 0) continue;
    drawn += 1;
    colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
    if (Math.abs(d[i] - rgb[0]) <= 2 && Math.abs(d[i + 1] - rgb[1]) <= 2
        && Math.abs(d[i + 2] - rgb[2]) <= 2) matching += 1;
  }
  return {width: canvas.width, height: canvas.height, drawn, colours: colours.size, matching};
}"""


async def chart_drawn(page: Any, test_id: str, rgb: tuple[int, int, int]) -> dict[str, int]:
    """The chart's canvas (:data:`CHART_PIXELS`) once it holds pixels of the colour ``rgb``."""

    async def pixels() -> dict[str, int] | None:
        found: dict[str, int] | None = await page.evaluate(CHART_PIXELS, [test_id, list(rgb)])
        return found if found and found["colours"] > 2 and found["matching"] > 20 else None

    result: dict[str, int] = await until(pixels, f"the chart {test_id} is drawn", seconds=30)
    return result


async def api_call(
    instance: Instance, method: str, path: str, who: tuple[str, str] = ADMIN, **kw: Any
) -> Any:
    """Call the instance's API as the administrator (or as ``who``); the JSON of a success."""
    email = "admin@deskpool.test" if who == ADMIN else "user@deskpool.test"
    token = instance.idp.issue_token(who[0], email=email, email_verified=True, name=who[1])
    async with (
        aiohttp.ClientSession() as http,
        http.request(
            method,
            f"{instance.api}/api/v1{path}",
            headers={"Authorization": f"Bearer {token}"},
            **kw,
        ) as response,
    ):
        body = await response.json()
        assert response.status < 300, (method, path, response.status, body)
        return body


async def entitle_the_user(instance: Instance, pool_id: str) -> str:
    """Entitle the desktop user (:data:`USER`) to the pool ``pool_id``; the user's id."""
    me = await api_call(instance, "GET", "/me", USER)
    await api_call(
        instance,
        "POST",
        f"/pools/{pool_id}/entitlements",
        json={"subject_type": "user", "subject_id": me["id"]},
    )
    return str(me["id"])


async def open_as_the_user(instance: Instance, page: Any, pool_name: str) -> None:
    """Sign the desktop user in on ``page`` and open a desktop of ``pool_name``, connected."""
    from playwright.async_api import expect

    await sign_in(instance, page, USER)
    await page.wait_for_url("**/my")
    await page.get_by_role("button", name=f"Open {pool_name}").click()
    await expect(page.locator('[data-state="connected"]')).to_be_visible(timeout=TIMEOUT)


async def sign_in(instance: Instance, page: Any, who: tuple[str, str]) -> None:
    await page.goto(instance.console + "/")
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(instance.idp.issuer_url + "/authorize*")
    await visit(instance, page, f"issuer-sign-in-{who[0]}")
    await page.get_by_role("button", name=who[1]).click()
    await page.wait_for_url(instance.console + "/**")
    await page.get_by_role("button", name="Sign out").wait_for(timeout=TIMEOUT)


#: The display's default layer: the largest canvas of the display (guacamole-common-js sizes
#: a layer's canvas in steps of 64 pixels, so it can be larger than the remote screen).
DEFAULT_LAYER = """() => [...document.querySelectorAll('.desktop-screen canvas')]
  .reduce((a, c) => (!a || c.width * c.height > a.width * a.height ? c : a), null)"""
#: The default layer as a PNG data URL, or null before there is one. A layer not sized yet
#: (0 by 0 until the remote screen's first size) is none: its toDataURL is "data:," with no image.
DEFAULT_LAYER_PNG = f"""() => {{
  const canvas = ({DEFAULT_LAYER})();
  return canvas && canvas.width > 0 && canvas.height > 0 ? canvas.toDataURL('image/png') : null;
}}"""
#: The letters of OCR tokens: none that tesseract readily takes for a digit or another letter.
TOKEN_LETTERS = "ACEFHKMNPRTWXY"


def ocr_token(length: int = 6) -> str:
    """A random word of :data:`TOKEN_LETTERS`, to be read back from a screen."""
    return "".join(secrets.choice(TOKEN_LETTERS) for _ in range(length))


async def canvas_picture(page: Any, size: tuple[int, int] | None = None) -> Image.Image | None:
    """The display's default layer as the browser holds it (cropped to ``size``), or ``None``.

    ``None`` also while the layer is smaller than ``size`` (the remote screen not yet sized).
    """
    url = await page.evaluate(DEFAULT_LAYER_PNG)
    if url is None:
        return None
    layer = Image.open(io.BytesIO(base64.b64decode(url.partition(",")[2]))).convert("RGB")
    if size is None:
        return layer
    if layer.width < size[0] or layer.height < size[1]:
        return None
    return layer.crop((0, 0, *size))


async def read_words(picture: Image.Image) -> str:
    """The text tesseract reads in ``picture``, its words separated by single spaces."""
    return " ".join((await read_text(picture)).split())
