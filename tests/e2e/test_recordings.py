"""Session recording end to end, with real ``deskpool run`` processes (issue 26 §3).

An api, a worker and two gateways share a database, a simulated cluster and the desktop daemon
simulator (the tests' guacd), and a ``RECORDINGS_PATH`` of this test's own. An administrator
creates a pool whose session policy records sessions with the user's keys. Then:

1. the user's session through gateway A is recorded: once it ends, the recording is listed
   (filters by session, pool and user), downloads as a Guacamole instruction stream (the
   daemon's frames and the user's ``key`` events with their timestamps), a ``Range`` gives the
   same bytes as the whole, a range past the end is 416, every download is audited, a user
   without ``recordings:read`` is refused, and no chunk on disk holds any of it in plain text.
   The session's logon has every phase recorded (``powered_on`` aside: its desktop was on), and
   the usage report counts it in the hour it started, as JSON and as CSV;
2. a session through gateway B, SIGKILLed mid-session, leaves a recording that ends when its
   session ends (``gateway_lost``) and plays up to the kill: complete instructions, frames
   included, everything the gateway wrote before it died;
3. the console (an ``api`` and ``web`` process serving the built ``web/dist``) plays both in
   Chromium: the administrator signs in, finds the recordings on the Recordings page, and the
   player's canvas is not blank a second into the first; seeking to its end shows another
   picture (the simulator's clock moved on), back to the start the first again, and 4x plays
   to that last picture; the killed gateway's recording, opened from its session's page, plays
   to its last frame, its timeline as long as the frames the download holds. Every playback is
   a download the API audits.
"""

from __future__ import annotations

import base64
import csv
import io
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from tests.e2e.console_instance import CHROMIUM, DIST, TIMEOUT, Instance, visit
from tests.e2e.test_desktop_sessions import (
    LEASE_SECONDS,
    PUBLIC_URL,
    ApiCaller,
    entitled_simulator_pool,
    processes,
    tunnel_url,
)
from tests.secret_leak_guard import LeakGuard
from tests.support.e2e import (
    DeploymentEnviron,
)

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.guacamole import InstructionParser
from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.processes import ANY_PORT, DeskpoolProcess, running, until
from deskpool.testing.tunnels import TunnelClosed, WebSocketTunnelClient
from deskpool_recording_files import SEGMENTS

ADMIN = "e2e-recording-admin"
ADMIN_NAME = "Recordings Administrator"
USER = "e2e-recording-user"
#: The logon phases of a session on a desktop that was already on.
PHASES = [
    "asked",
    "allocated",
    "guest_ready",
    "token_issued",
    "tunnel_opened",
    "daemon_connected",
    "first_frame",
]
#: The api, a worker and two gateways, as the session test runs them (with this environ).
__all__ = ["processes"]

pytestmark = pytest.mark.slow


@pytest.fixture
def recordings_path(tmp_path: Path) -> Path:
    """Where the ``files`` store keeps this test's recordings."""
    return tmp_path / "recordings"


@pytest.fixture
def environ(
    quick_deployment: DeploymentEnviron,
    desktop_daemon: DesktopDaemonSimulator,
    leak_guard: LeakGuard,
    recordings_path: Path,
    identity_provider: TestIdentityProvider,
) -> dict[str, str]:
    """The environment every process shares."""
    return quick_deployment(
        ADMIN,
        API_ADDR=ANY_PORT,
        SECRETS_MASTER_KEY=leak_guard.master_key(),
        GATEWAY_PUBLIC_WS_URL=PUBLIC_URL,
        DESKTOPD_ADDRESS=desktop_daemon.address,
        GATEWAY_LEASE_DURATION=f"{LEASE_SECONDS}s",
        WORKER_LEASE_DURATION="5s",
        RECORDINGS_PATH=str(recordings_path),
        RECORDINGS_CHUNK_SECONDS="500ms",
        WEB_DIST_PATH=str(DIST),
        WEB_PUBLIC_OIDC_AUTHORITY=identity_provider.issuer_url,
        WEB_PUBLIC_OIDC_CLIENT_ID="deskpool-console",
        WEB_PUBLIC_OIDC_SCOPE="openid profile email",
    )


@pytest.fixture
async def console(
    processes: dict[str, DeskpoolProcess], environ: dict[str, str]
) -> AsyncIterator[str]:
    """The console and an api of its own, in one process on ports it picked; the console's URL.

    The process names its own listeners in the URLs it derives (the api's base URL the console
    is given, the console's origin the api allows); its api shares the others' database.
    """
    if not (DIST / "index.html").is_file():
        pytest.fail("the console is not built: run `make console` (or `make test`)", pytrace=False)
    web = DeskpoolProcess(["api", "web"], {**environ, "API_ADDR": ANY_PORT, "WEB_ADDR": ANY_PORT})
    async with running({"web": web}):
        yield web.url("web")


async def test_a_recorded_session_is_listed_downloaded_sealed_and_survives_a_killed_gateway(
    processes: dict[str, DeskpoolProcess],
    console: str,
    identity_provider: TestIdentityProvider,
    desktop_daemon: DesktopDaemonSimulator,
    db: asyncpg.Connection,
    recordings_path: Path,
    tmp_path: Path,
) -> None:
    api = f"{processes['api'].url('api')}/api/v1"
    admin = {"Authorization": f"Bearer {identity_provider.issue_token(ADMIN)}"}
    user = {"Authorization": f"Bearer {identity_provider.issue_token(USER)}"}
    async with aiohttp.ClientSession() as http:
        call = ApiCaller(http, api)

        async def download(recording_id: str, **headers: str) -> tuple[int, Any, bytes]:
            async with http.get(
                f"{api}/recordings/{recording_id}/download", headers={**admin, **headers}
            ) as response:
                return response.status, response.headers, await response.read()

        me = await call("GET", "/me", user)
        pool = await entitled_simulator_pool(
            call,
            admin,
            me["id"],
            "e2e-recordings",
            kind="persistent",
            os_type="linux",
            min_size=1,
            spare=1,
            max_size=2,
            naming_pattern="rec-{n:02}",
            session_policy={"recording": {"enabled": True, "include_keys": True}},
        )
        assert pool["session_policy"]["recording"] == {"enabled": True, "include_keys": True}
        pool_id = pool["id"]

        async def ready() -> int:
            return int(
                await db.fetchval(
                    "SELECT count(*) FROM desktops WHERE pool_id = $1::uuid AND state = 'ready'",
                    pool_id,
                )
            )

        await until(ready, "the pool has a ready desktop")

        async def recording_of(session_id: str, ended: bool = True) -> Any:
            page = await call("GET", f"/recordings?session_id={session_id}", admin)
            items = page["items"]
            return items[0] if items and (items[0]["ended_at"] or not ended) else None

        # 1. A recorded session through gateway A.
        opened = await call("POST", f"/me/pools/{pool_id}/desktop", user)
        assert opened["connection"]["recorded"] is True  # the desktop view says so first
        client = await WebSocketTunnelClient.connect(
            http, tunnel_url(processes["gateway-a"]), {"token": opened["connection"]["token"]}
        )
        await client.until("sync", within=20)
        drawn = time.monotonic()
        await client.send("key", ord("q"), 1)
        await client.send("key", ord("q"), 0)
        await client.until("sync")
        while time.monotonic() - drawn < 3:  # a few seconds of the simulator's clock
            await client.until("sync")
        session_id = client.uuid
        assert session_id is not None
        await client.ws.close()
        recording = await until(lambda: recording_of(session_id), "the recording ended")
        assert recording["user_id"] == me["id"]
        assert recording["pool_id"] == pool_id
        assert recording["size_bytes"] > 0
        assert recording["chunks"] >= 1
        assert not recording["truncated"]
        for query in (f"pool_id={pool_id}", f"user_id={me['id']}"):
            listed = await call("GET", f"/recordings?{query}", admin)
            assert recording["id"] in [item["id"] for item in listed["items"]]
        other = str(uuid.uuid4())
        assert (await call("GET", f"/recordings?pool_id={other}", admin))["items"] == []

        status, headers, whole = await download(recording["id"])
        assert status == 200
        assert len(whole) == recording["size_bytes"]
        assert headers["Accept-Ranges"] == "bytes"
        instructions = InstructionParser().feed_instructions(whole.decode())
        opcodes = [instruction.opcode for instruction in instructions]
        assert "sync" in opcodes
        assert "img" in opcodes or "png" in opcodes
        keys = [i.args for i in instructions if i.opcode == "key"]
        assert [k[:2] for k in keys] == [(str(ord("q")), "1"), (str(ord("q")), "0")]
        assert all(k[2].isdigit() for k in keys)
        assert not any(i.opcode == "" for i in instructions)  # the tunnel's own: not recorded

        status, headers, part = await download(recording["id"], Range="bytes=10-99")
        assert status == 206
        assert part == whole[10:100]
        assert headers["Content-Range"] == f"bytes 10-99/{len(whole)}"
        status, _, tail = await download(recording["id"], Range="bytes=-25")
        assert status == 206
        assert tail == whole[-25:]
        status, headers, _ = await download(recording["id"], Range=f"bytes={len(whole)}-")
        assert status == 416
        assert headers["Content-Range"] == f"bytes */{len(whole)}"

        audited = await db.fetch(
            "SELECT details FROM audit_events WHERE action = 'recording.download' "
            "AND resource_id = $1",
            recording["id"],
        )
        assert len(audited) >= 3

        async with http.get(f"{api}/recordings", headers=user) as refused:
            assert refused.status == 403
        async with http.get(
            f"{api}/recordings/{recording['id']}/download", headers=user
        ) as refused:
            assert refused.status == 403

        files = sorted((recordings_path / recording["id"]).iterdir())
        assert [path.name for path in files] == [SEGMENTS]  # the chunks appended to one file
        on_disk = files[0].read_bytes()
        assert _frame_count(on_disk) == recording["chunks"]
        for plain in (b"sync", b"3.key", whole[:24], whole[-24:]):
            assert plain not in on_disk
        seconds = (
            datetime.fromisoformat(recording["ended_at"])
            - datetime.fromisoformat(recording["started_at"])
        ).total_seconds()
        print(
            f"recording: {len(whole)} bytes over {seconds:.1f} s "
            f"({len(whole) / max(seconds, 0.001):.0f} B/s), {len(files)} chunk(s), "
            f"{len(on_disk)} bytes sealed on disk"
        )

        # The session's logon phases are all recorded...
        session = await call("GET", f"/sessions/{session_id}", admin)
        logon = session["logon"]
        assert logon["outcome"] == "connected", logon
        assert [phase["phase"] for phase in logon["phases"]] == PHASES
        times = [datetime.fromisoformat(phase["at"]) for phase in logon["phases"]]
        assert times == sorted(times)
        assert logon["duration_seconds"] >= 0
        # ...and the usage report counts it in the hour it started, as JSON and as CSV.
        # (A logon counts in the hour it was asked in, its session in the hour it started in:
        # the same hour unless one came just before the hour turned.)
        started = datetime.fromisoformat(session["started_at"]).astimezone(UTC)
        hour = started.replace(minute=0, second=0, microsecond=0)
        asked = times[0].astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        period = {
            "from": (hour - timedelta(hours=1)).isoformat(),
            "to": (hour + timedelta(hours=2)).isoformat(),
            "bucket": "hour",
            "pool_id": pool_id,
        }
        async with http.get(f"{api}/reports/usage", headers=admin, params=period) as answer:
            assert answer.status == 200, await answer.text()
            report = await answer.json()
        buckets = {datetime.fromisoformat(b["start"]): b for b in report["buckets"]}
        assert set(buckets) == {hour - timedelta(hours=1), hour, hour + timedelta(hours=1)}
        assert buckets[hour]["sessions_started"] == 1
        assert buckets[hour]["distinct_users"] == 1
        assert buckets[hour]["peak_concurrent"] == 1
        assert buckets[asked]["logons"] == 1
        assert buckets[asked]["failed_connections"] == 0
        assert buckets[hour]["connected_hours"] > 0
        assert buckets[asked]["logon_seconds_p50"] == pytest.approx(
            logon["duration_seconds"], abs=0.001
        )
        for other in (hour - timedelta(hours=1), hour + timedelta(hours=1)):
            assert buckets[other]["sessions_started"] == 0
        assert report["totals"]["sessions_started"] == 1
        async with http.get(
            f"{api}/reports/usage", headers={**admin, "Accept": "text/csv"}, params=period
        ) as answer:
            assert answer.status == 200
            assert answer.headers["Content-Type"].startswith("text/csv")
            rows = list(csv.DictReader(io.StringIO(await answer.text())))
        by_start = {datetime.fromisoformat(row["start"]): row for row in rows}
        assert set(by_start) == set(buckets)
        assert by_start[hour]["sessions_started"] == "1"
        assert by_start[hour]["distinct_users"] == "1"
        assert by_start[asked]["logons"] == "1"
        assert float(by_start[hour]["connected_hours"]) == pytest.approx(
            buckets[hour]["connected_hours"]
        )
        for other in (hour - timedelta(hours=1), hour + timedelta(hours=1)):
            assert by_start[other]["sessions_started"] == "0"

        # 2. A session through gateway B, whose gateway is SIGKILLed mid-session.
        again = await call("POST", f"/me/pools/{pool_id}/desktop", user)
        client = await WebSocketTunnelClient.connect(
            http, tunnel_url(processes["gateway-b"]), {"token": again["connection"]["token"]}
        )
        await client.until("sync", within=20)
        connected = time.monotonic()
        lost_session = client.uuid
        assert lost_session is not None

        async def written() -> Any:
            found = await recording_of(lost_session, ended=False)
            return found if found and found["chunks"] >= 2 else None

        await until(written, "the gateway wrote chunks of the recording", seconds=30)
        processes["gateway-b"].kill()
        recorded_for = time.monotonic() - connected
        assert isinstance(await client.closed(within=10), TunnelClosed)
        kept = await until(
            lambda: recording_of(lost_session),
            "the recording of the lost gateway's session ended",
            seconds=LEASE_SECONDS + 20,
        )
        status, _, played = await download(kept["id"])
        assert status == 200
        assert len(played) == kept["size_bytes"] > 0
        parser = InstructionParser()
        instructions = parser.feed_instructions(played.decode())
        assert parser.pending == 0  # ends on a complete instruction: plays to the kill
        print(f"killed gateway's recording: {len(played)} bytes over ~{recorded_for:.1f} s")
        syncs = [int(i.args[0]) for i in instructions if i.opcode == "sync"]
        assert len(syncs) >= 2
        first_syncs = [
            int(i.args[0])
            for i in InstructionParser().feed_instructions(whole.decode())
            if i.opcode == "sync"
        ]

        # 3. Both play in the console, in Chromium.
        downloads = await _downloads(db)
        await _play_in_chromium(
            Instance(
                console,
                api,
                identity_provider,
                desktop_daemon,
                tmp_path / "console",
                tmp_path / "web.log",
            ),
            played={
                recording["id"]: first_syncs[-1] - first_syncs[0],
                kept["id"]: syncs[-1] - syncs[0],
            },
            first=recording["id"],
            killed=kept["id"],
            killed_session=lost_session,
        )
        # Every playback downloaded its recording once, and the API audited it.
        playbacks = await _downloads(db)
        for recording_id in (recording["id"], kept["id"]):
            assert playbacks.get(recording_id, 0) > downloads.get(recording_id, 0)
    for name in ("api", "worker", "gateway-a"):
        assert "Traceback" not in processes[name].output, processes[name].output


async def _downloads(db: asyncpg.Connection) -> dict[str, int]:
    """How many downloads of each recording the API audited."""
    rows = await db.fetch(
        "SELECT resource_id, count(*) AS n FROM audit_events "
        "WHERE action = 'recording.download' GROUP BY resource_id"
    )
    return {row["resource_id"]: int(row["n"]) for row in rows}


#: The player's display layer (the largest canvas) as a PNG data URL, and whether it holds one
#: colour only (blank); null before the display has a canvas.
PICTURE = """() => {
  const canvas = [...document.querySelectorAll('.recording-screen canvas')]
    .reduce((a, c) => (!a || c.width * c.height > a.width * a.height ? c : a), null);
  if (!canvas || !canvas.width || !canvas.height) return null;
  const d = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let blank = true;
  for (let i = 4; i < d.length && blank; i += 4) {
    if (d[i] !== d[0] || d[i + 1] !== d[1] || d[i + 2] !== d[2] || d[i + 3] !== d[3]) blank = false;
  }
  return {url: canvas.toDataURL('image/png'), blank};
}"""


async def _picture(page: Any) -> str:
    """The player's picture (a PNG data URL), which must not be blank."""
    shown = await page.evaluate(PICTURE)
    assert shown is not None, "the player has no canvas"
    assert not shown["blank"], "the player's canvas is blank"
    base64.b64decode(shown["url"].partition(",")[2], validate=True)
    return str(shown["url"])


async def _shown(page: Any, expect: Any) -> str:
    """The picture once the player has brought its display to the position it shows."""
    await expect(page.locator('.recording-screen[aria-busy="true"]')).to_have_count(
        0, timeout=TIMEOUT
    )
    return await _picture(page)


async def _open_player(
    instance: Instance,
    page: Any,
    recording_id: str,
    duration_ms: int,
    expect: Any,
    session_id: str | None = None,
) -> Any:
    """Open a recording's player; its timeline, once loaded.

    From the Recordings page, or from its session's page when ``session_id`` is given.
    """
    if session_id is None:
        await page.get_by_role("link", name="Recordings", exact=True).click()
        await page.wait_for_url("**/recordings")
        link = page.locator(f'a[href="/recordings/{recording_id}"]')
        await expect(link).to_be_visible(timeout=TIMEOUT)
        await visit(instance, page, "recordings")
    else:
        await page.goto(f"{page.url.split('/recordings')[0]}/sessions/{session_id}")
        link = page.get_by_role("link", name="Play the session's recording")
    await expect(link).to_be_visible(timeout=TIMEOUT)
    await link.click()
    await page.wait_for_url(f"**/recordings/{recording_id}")
    slider = page.get_by_role("slider", name="Position")
    await expect(slider).to_be_enabled(timeout=TIMEOUT)
    await expect(page.locator(".recording-time")).not_to_contain_text("loading", timeout=TIMEOUT)
    # The timeline is the recording's: from its first frame to its last.
    await expect(slider).to_have_attribute("max", str(duration_ms), timeout=TIMEOUT)
    return slider


async def _value(slider: Any) -> int:
    return int(float(await slider.input_value()))


async def _play_in_chromium(
    instance: Instance, *, played: dict[str, int], first: str, killed: str, killed_session: str
) -> None:
    """Sign in to the console and play ``first`` and ``killed`` (durations in ``played``).

    ``first`` is opened from the Recordings page, ``killed`` from its session's page.
    """
    from playwright.async_api import async_playwright, expect

    instance.artifacts.mkdir(parents=True, exist_ok=True)
    # The issuer signs the console's administrator in (the first of its users).
    instance.idp.users.clear()
    instance.idp.add_user(ADMIN, email="recordings@deskpool.test", name=ADMIN_NAME)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        page = await (await browser.new_context(viewport={"width": 1280, "height": 800})).new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on(
            "console",
            lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None,
        )
        try:
            await page.goto(instance.console + "/")
            await page.get_by_role("button", name="Sign in").click()
            await page.get_by_role("button", name="Sign out").wait_for(timeout=TIMEOUT)

            # The first recording: a second in, the canvas holds a picture.
            slider = await _open_player(instance, page, first, played[first], expect)
            await visit(instance, page, "recording-player")
            start = await _shown(page, expect)
            assert await _value(slider) == 0
            await page.get_by_role("button", name="Play").click()
            await page.wait_for_function(
                "() => Number(document.querySelector('.recording-controls input').value) >= 1000",
                timeout=TIMEOUT,
            )
            await page.get_by_role("button", name="Pause").click()
            await _picture(page)
            # Seeking: to the end (the simulator's clock moved on), back to the start.
            await slider.focus()
            await page.keyboard.press("End")
            await expect(slider).to_have_value(str(played[first]), timeout=TIMEOUT)
            end = await _shown(page, expect)
            assert end != start
            await page.keyboard.press("Home")
            await expect(slider).to_have_value("0", timeout=TIMEOUT)
            assert await _shown(page, expect) == start
            # At 4x from the start to the end, where playing stops.
            await page.get_by_label("Speed").select_option("4")
            await page.get_by_role("button", name="Play").click()
            await expect(page.get_by_role("button", name="Play")).to_be_visible(timeout=TIMEOUT)
            assert await _value(slider) == played[first]
            assert await _shown(page, expect) == end

            # The killed gateway's recording plays to its last frame.
            slider = await _open_player(
                instance, page, killed, played[killed], expect, killed_session
            )
            await visit(instance, page, "recording-player-killed-gateway")
            await page.get_by_label("Speed").select_option("4")
            await page.get_by_role("button", name="Play").click()
            await expect(page.get_by_role("button", name="Play")).to_be_visible(timeout=TIMEOUT)
            assert await _value(slider) == played[killed]
            await _shown(page, expect)
        except BaseException:
            await page.screenshot(path=str(instance.artifacts / "failed-recordings.png"))
            raise
        finally:
            await browser.close()
    assert errors == []
    assert instance.violations == {}, instance.violations


def _frame_count(segments: bytes) -> int:
    """The sealed frames of a segment file (an 8-byte header: length, index; then the seal)."""
    count, at = 0, 0
    while at < len(segments):
        assert int.from_bytes(segments[at + 4 : at + 8], "big") == count
        at += 8 + int.from_bytes(segments[at : at + 4], "big")
        count += 1
    assert at == len(segments)
    return count
