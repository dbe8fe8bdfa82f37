"""Session recording end to end, with real ``deskpool run`` processes (issue 26 §3).

An api, a worker and two gateways share a database, a simulated cluster and the desktop daemon
simulator (the tests' guacd), and a ``RECORDINGS_PATH`` of this test's own. An administrator
creates a pool whose session policy records sessions with the user's keys. Then:

1. the user's session through gateway A is recorded: once it ends, the recording is listed
   (filters by session, pool and user), downloads as a Guacamole instruction stream (the
   daemon's frames and the user's ``key`` events with their timestamps), a ``Range`` gives the
   same bytes as the whole, a range past the end is 416, every download is audited, a user
   without ``recordings:read`` is refused, and no chunk on disk holds any of it in plain text;
2. a session through gateway B, SIGKILLed mid-session, leaves a recording that ends when its
   session ends (``gateway_lost``) and plays up to the kill: complete instructions, frames
   included, everything the gateway wrote before it died.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from tests.e2e.conftest import DeploymentEnviron
from tests.e2e.test_desktop_sessions import (
    LEASE_SECONDS,
    PUBLIC_URL,
    SIMULATOR_OPTIONS,
    processes,
    tunnel_url,
)
from tests.secret_leak_guard import LeakGuard

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.guacamole import InstructionParser
from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.processes import ANY_PORT, DeskpoolProcess, until
from deskpool.testing.tunnels import TunnelClosed, WebSocketTunnelClient

ADMIN = "e2e-recording-admin"
USER = "e2e-recording-user"
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
    )


async def test_a_recorded_session_is_listed_downloaded_sealed_and_survives_a_killed_gateway(
    processes: dict[str, DeskpoolProcess],
    identity_provider: TestIdentityProvider,
    db: asyncpg.Connection,
    recordings_path: Path,
) -> None:
    api = f"{processes['api'].url('api')}/api/v1"
    admin = {"Authorization": f"Bearer {identity_provider.issue_token(ADMIN)}"}
    user = {"Authorization": f"Bearer {identity_provider.issue_token(USER)}"}
    async with aiohttp.ClientSession() as http:

        async def call(method: str, path: str, headers: dict[str, str], **kw: Any) -> Any:
            async with http.request(method, f"{api}{path}", headers=headers, **kw) as response:
                body = await response.json()
                assert response.status < 300, (method, path, response.status, body)
                return body

        async def download(recording_id: str, **headers: str) -> tuple[int, Any, bytes]:
            async with http.get(
                f"{api}/recordings/{recording_id}/download", headers={**admin, **headers}
            ) as response:
                return response.status, response.headers, await response.read()

        me = await call("GET", "/me", user)
        cluster = await call(
            "POST",
            "/clusters",
            admin,
            json={
                "name": "e2e-recordings",
                "driver": "simulator",
                "endpoint": "simulator://e2e-recordings",
                "options": SIMULATOR_OPTIONS,
            },
        )
        pool = await call(
            "POST",
            "/pools",
            admin,
            json={
                "name": "e2e-recordings",
                "cluster_id": cluster["id"],
                "template": "ubuntu-22.04",
                "kind": "persistent",
                "os_type": "linux",
                "min_size": 1,
                "spare": 1,
                "max_size": 2,
                "naming_pattern": "rec-{n:02}",
                "session_policy": {"recording": {"enabled": True, "include_keys": True}},
            },
        )
        assert pool["session_policy"]["recording"] == {"enabled": True, "include_keys": True}
        pool_id = pool["id"]
        await call(
            "POST",
            f"/pools/{pool_id}/entitlements",
            admin,
            json={"subject_type": "user", "subject_id": me["id"]},
        )

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
        await client.send("key", ord("q"), 1)
        await client.send("key", ord("q"), 0)
        await client.until("sync")
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

        files = sorted((recordings_path / recording["id"]).glob("*.chunk"))
        assert len(files) == recording["chunks"]
        on_disk = b"".join(path.read_bytes() for path in files)
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
        assert [i.opcode for i in instructions].count("sync") >= 2
    for name in ("api", "worker", "gateway-a"):
        assert "Traceback" not in processes[name].output, processes[name].output
