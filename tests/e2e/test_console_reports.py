"""The Reports page, the session waterfall and the pool's logon phases in Chromium (issue 26).

The instance is the console test's (:mod:`tests.e2e.console_instance`): ``deskpool run all``
with the test's OIDC issuer, the simulator driver and the desktop daemon simulator. Through the
API a pool of one desktop is entitled to the user, who then opens it three times through the
gateway with a WebSocket tunnel, as the browser's would: twice to the first frame, and once
closing the tunnel after the daemon's handshake but before any frame (the daemon held back by
its connect gate), so that logon fails with the phases it reached. Then the administrator, in
Chromium:

1. opens Reports (last 24 hours, all pools, by the hour): every chart's canvas is drawn (its
   pixels read back: the bars in their series' colour), the table holds the sessions;
2. downloads the CSV: the API's header, 24 hour rows, the three sessions and the failure in
   the right hour;
3. opens a connected session from the Sessions list: the waterfall holds every phase (its label
   and the phases table), its bars drawn; the failed session's page shows the phases it reached
   and why it stopped;
4. the pool page gives the median and 95th percentile of each phase, as a chart and a table;
5. the dashboard's sessions chart is drawn from the usage report.

Every page visited is saved as a screenshot and checked with axe-core (no serious or critical
violation), as in the console test.
"""

from __future__ import annotations

import asyncio
import csv
import io
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from tests.e2e.console_instance import (
    ADMIN,
    CHROMIUM,
    TIMEOUT,
    Instance,
    chart_drawn,
    sign_in,
    visit,
)
from tests.e2e.console_pools import callers, ready_persistent_pool

from deskpool.reports.model import CSV_COLUMNS
from deskpool.testing.processes import until
from deskpool.testing.tunnels import WebSocketTunnelClient

#: The series colours of web/src/reports/palette.ts, as RGB.
PRIMARY = (0x1C, 0x7E, 0xD6)
FAILURE = (0xE0, 0x31, 0x31)
SECONDARY = (0xF0, 0x8C, 0x00)
#: Every phase of a logon that drew (no start on connect: no ``powered_on``).
DREW = [
    "asked",
    "allocated",
    "guest_ready",
    "token_issued",
    "tunnel_opened",
    "daemon_connected",
    "first_frame",
]


async def _sessions(instance: Instance) -> dict[str, Any]:
    """The pool, two sessions that drew and one whose logon failed; their ids and the pool's."""
    async with aiohttp.ClientSession() as http:
        admin, user = callers(http, instance)
        pool = await ready_persistent_pool(admin, user, "reports", max_size=2)

        async def tunnel() -> WebSocketTunnelClient:
            opened = await user("POST", f"/me/pools/{pool['id']}/desktop")
            connection = opened["connection"]
            return await WebSocketTunnelClient.connect(
                http, connection["url"], {"token": connection["token"]}
            )

        async def logon_of(session_id: str) -> Any:
            return (await admin("GET", f"/sessions/{session_id}"))["logon"]

        async def ended(session_id: str) -> Any:
            shown = await admin("GET", f"/sessions/{session_id}")
            done = shown["state"] == "ended" and shown["logon"]["outcome"] != "pending"
            return shown if done else None

        async def session_that_drew() -> str:
            client = await tunnel()
            await client.until("sync", within=30)
            session_id = await client.tunnel_id()
            await until(
                lambda: _reached(logon_of, session_id, "first_frame"), "the first frame is recorded"
            )
            await client.ws.close()
            await until(lambda: ended(session_id), "the session ended", seconds=60)
            return session_id

        drew = [await session_that_drew(), await session_that_drew()]

        # The third logon: the daemon holds the connection before its first frame, and the
        # tunnel is closed once the handshake is recorded.
        instance.daemon.connect_gate.clear()
        try:
            client = await tunnel()
            failed_id = await client.tunnel_id(within=30)
            await until(
                lambda: _reached(logon_of, failed_id, "daemon_connected"),
                "the daemon's handshake is recorded",
            )
            await client.ws.close()
            failed = await until(lambda: ended(failed_id), "the session ended", seconds=60)
        finally:
            instance.daemon.connect_gate.set()
        assert failed["logon"]["outcome"] == "failed"
        assert failed["logon"]["failure_reason"]
        return {
            "pool_id": pool["id"],
            "drew": drew,
            "failed": failed_id,
            "failure_reason": failed["logon"]["failure_reason"],
            "failed_phases": [phase["phase"] for phase in failed["logon"]["phases"]],
        }


async def _reached(logon_of: Any, session_id: str, phase: str) -> bool:
    logon = await logon_of(session_id)
    return logon is not None and phase in [item["phase"] for item in logon["phases"]]


async def test_reports_page_csv_session_waterfall_and_pool_phases(instance: Instance) -> None:
    from playwright.async_api import async_playwright, expect

    facts = await _sessions(instance)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        context = await browser.new_context(
            viewport={"width": 1400, "height": 1000}, accept_downloads=True
        )
        admin = await context.new_page()
        page_errors: list[str] = []
        csp_errors: list[str] = []
        admin.on("pageerror", lambda error: page_errors.append(str(error)))
        admin.on(
            "console",
            lambda m: csp_errors.append(m.text) if "Content Security Policy" in m.text else None,
        )
        try:
            await _steps(instance, admin, expect, facts)
        except BaseException:
            await admin.screenshot(path=str(instance.artifacts / "failed-reports.png"))
            raise
        finally:
            await browser.close()
    assert page_errors == []
    assert csp_errors == []  # the charts' tooltips included: no inline style
    assert instance.violations == {}, instance.violations


async def _steps(instance: Instance, admin: Any, expect: Any, facts: dict[str, Any]) -> None:
    await sign_in(instance, admin, ADMIN)

    # 1. Reports: the last 24 hours of all pools, by the hour.
    await admin.get_by_role("navigation", name="Main").get_by_role("link", name="Reports").click()
    await admin.wait_for_url("**/reports")
    await expect(admin.get_by_test_id("chart-failures")).to_be_visible(timeout=TIMEOUT)
    await visit(instance, admin, "reports")
    sessions_chart = admin.get_by_test_id("chart-sessions").get_by_role("img")
    await expect(sessions_chart).to_have_attribute(
        "aria-label", "Sessions started per hour (3 in all) and distinct users (1 in all)."
    )
    await chart_drawn(admin, "chart-sessions", PRIMARY)
    # The tooltip of the hour under the pointer (the last one, where the sessions ran).
    canvas = admin.get_by_test_id("chart-sessions").locator("canvas").first
    box = await canvas.bounding_box()
    await canvas.hover(position={"x": box["width"] - 30, "y": box["height"] / 2})
    tooltip = admin.get_by_test_id("chart-sessions").get_by_text(re.compile(r"Distinct users: \d"))
    await expect(tooltip).to_be_visible(timeout=TIMEOUT)
    await chart_drawn(admin, "chart-concurrency", PRIMARY)
    await chart_drawn(admin, "chart-hours", (0x2F, 0x9E, 0x44))
    reason = facts["failure_reason"]
    await expect(admin.get_by_test_id("chart-failures").get_by_role("img")).to_have_attribute(
        "aria-label", f"Failed connections per hour by reason: {reason} 1."
    )
    await chart_drawn(admin, "chart-failures", FAILURE)
    await chart_drawn(admin, "chart-logon", PRIMARY)
    table = admin.get_by_test_id("usage-table")
    await expect(table.locator("tbody tr")).to_have_count(24)
    totals = table.locator("tfoot tr")
    await expect(totals.locator("td").nth(2)).to_have_text("3")  # sessions started

    # 2. The CSV: fetched with the bearer token, saved from a Blob.
    async with admin.expect_download() as waiting:
        await admin.get_by_role("button", name="Download CSV").click()
    download = await waiting.value
    assert download.suggested_filename.startswith("deskpool-usage-all-pools-hour-")
    assert download.suggested_filename.endswith(".csv")
    saved = await download.path()
    rows = list(csv.reader(io.StringIO(await asyncio.to_thread(Path(saved).read_text))))
    assert rows[0] == [*CSV_COLUMNS, f"failed_{reason}"]
    body = [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]
    assert len(body) == 24
    assert sum(int(row["sessions_started"]) for row in body) == 3
    assert sum(int(row["logons"]) for row in body) == 3
    hour = datetime.now(UTC).strftime("%Y-%m-%dT%H:00:00Z")
    this_hour = [row for row in body if row["start"] == hour]
    failed_hours = [row for row in body if row[f"failed_{reason}"] == "1"]
    # The sessions ran moments ago: in this hour (or the one before, at an hour's turn).
    assert len(failed_hours) == 1
    assert failed_hours[0]["start"] in {hour, body[-2]["start"]}
    assert this_hour == [body[-1]]
    assert int(failed_hours[0]["distinct_users"]) == 1

    # 3. A connected session, from the Sessions list.
    await admin.get_by_role("navigation", name="Main").get_by_role("link", name="Sessions").click()
    await admin.get_by_label("State").select_option("ended")
    await admin.locator(f'a[href="/sessions/{facts["drew"][0]}"]').click()
    await admin.wait_for_url(f"**/sessions/{facts['drew'][0]}")
    waterfall = admin.get_by_test_id("logon-waterfall").get_by_role("img")
    await expect(waterfall).to_have_attribute("aria-label", _every_phase_label())
    await expect(admin.get_by_test_id("logon-phases").locator("tbody tr")).to_have_count(len(DREW))
    await chart_drawn(admin, "logon-waterfall", PRIMARY)
    await expect(admin.get_by_test_id("logon-outcome")).to_contain_text("First frame")
    await visit(instance, admin, "session-connected")

    # The failed one: the phases it reached, and why it stopped.
    await admin.goto(f"{instance.console}/sessions/{facts['failed']}")
    waterfall = admin.get_by_test_id("logon-waterfall").get_by_role("img")
    words = reason.replace("_", " ")
    await expect(waterfall).to_have_attribute("aria-label", _phases_label(facts["failed_phases"]))
    await expect(waterfall).to_have_attribute("aria-label", re.compile(f"stopped: {words}\\.$"))
    assert facts["failed_phases"] == DREW[:-1]
    await expect(admin.get_by_test_id("logon-phases").locator("tbody tr")).to_have_count(
        len(DREW) - 1
    )
    await chart_drawn(admin, "logon-waterfall", FAILURE)
    await expect(admin.get_by_test_id("logon-outcome")).to_contain_text("Stopped")
    await visit(instance, admin, "session-failed")

    # 4. The pool's logon phases over the last 7 days.
    await admin.goto(f"{instance.console}/pools/{facts['pool_id']}")
    await expect(admin.get_by_test_id("logon-phase-counts")).to_contain_text(
        "3 logons: 2 connected, 1 failed, 0 under way."
    )
    phase_rows = admin.get_by_test_id("logon-phase-table").locator("tbody tr")
    # Every phase after asked, powered_on too (no logon reached it: no start on connect).
    await expect(phase_rows).to_have_count(len(DREW))
    reached = {"allocated": "3", "powered on": "0", "daemon connected": "3", "first frame": "2"}
    for index, name in enumerate(["allocated", "powered on", "daemon connected", "first frame"]):
        row = phase_rows.nth([0, 1, 5, 6][index])
        await expect(row.locator("th")).to_have_text(name)
        await expect(row.locator("td").nth(0)).to_have_text(reached[name])
    await chart_drawn(admin, "logon-phase-chart", PRIMARY)
    await chart_drawn(admin, "logon-phase-chart", SECONDARY)
    await visit(instance, admin, "pool-logon-phases")

    # 5. The dashboard's sessions chart, from the usage report.
    await admin.goto(f"{instance.console}/dashboard")
    chart = admin.get_by_test_id("sessions-chart").get_by_role("img")
    await expect(chart).to_have_attribute(
        "aria-label",
        re.compile(r"^peak concurrent sessions per hour over the last day \(UTC\); peak 1,"),
    )
    await chart_drawn(admin, "sessions-chart", PRIMARY)
    await visit(instance, admin, "dashboard")


def _phases_label(phases: list[str]) -> re.Pattern[str]:
    """A pattern of the waterfall's label naming ``phases`` in order."""
    names = r", ".join(rf"{re.escape(p.replace('_', ' '))} at \+[0-9.]+ s" for p in phases)
    return re.compile(rf"^Logon phases: {names}; ")


def _every_phase_label() -> re.Pattern[str]:
    return re.compile(_phases_label(DREW).pattern + r"first frame after [0-9.]+ s\.$")
