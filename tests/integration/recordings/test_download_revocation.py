"""A recording download ends within 10 s of its reader losing ``recordings:read`` or being disabled.

Through the API of an api runtime on a real socket: a reader holding ``recordings:read`` starts
downloading a recording of some 24 MB and reads it at about 1.3 MB/s, as a slow client would
(the whole would take some 18 s). An administrator takes the permission away (deletes the
grant), or disables the reader. The download must stop within 10 s: the connection is cut, the
bytes read fall short of the recording.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.support.pools import Caller

from deskpool.recordings import store
from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker

NewCaller = Callable[..., Awaitable[Caller]]

#: Chunks of the recording and the size of each (the writer cuts chunks of at most 60 KiB).
CHUNKS = 400
CHUNK_SIZE = 60 * 1024
#: What the slow client reads at a time, and how long it waits between two reads.
READ_SIZE = 64 * 1024
READ_PAUSE = 0.05


@pytest.fixture
def client_runtime(pools_runtime: Runtime) -> Runtime:
    """``client`` calls the API of ``pools_runtime`` (tests/support/pool_api.py)."""
    return pools_runtime


@pytest.fixture
def pools_environ(sealing_environ: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The pool tests' environment, with recordings kept in ``tmp_path``."""
    return {**sealing_environ, "RECORDINGS_PATH": str(tmp_path)}


async def big_recording(runtime: Runtime) -> uuid.UUID:
    """A finished recording of :data:`CHUNKS` chunks of :data:`CHUNK_SIZE` bytes."""
    broker = PlatformSessionBroker(runtime)
    recording = await store.insert_recording(
        runtime.db,
        session_id=uuid.uuid4(),
        pool_id=uuid.uuid4(),
        user_id=uuid.uuid4(),
        desktop_name="rec-big",
        include_keys=False,
        store="files",
    )
    recording_id = recording.id
    chunk = (b"4.sync,13.1234567890123;" * (CHUNK_SIZE // 24 + 1))[:CHUNK_SIZE]
    await asyncio.to_thread(
        runtime.recording_store.put_chunks, recording.store_key, 0, [chunk] * CHUNKS
    )
    await broker.count_chunks(recording_id, 0, [CHUNK_SIZE] * CHUNKS)
    await broker.recording_ended(recording_id, truncated=False)
    return recording_id


async def take_away(client: Any, admin: Caller, runtime: Runtime, reader: Caller, how: str) -> None:
    if how == "disabled":
        answered = await client.patch(
            f"/api/v1/users/{reader.id}", json={"disabled": True}, headers=admin.headers
        )
    else:
        async with runtime.db.acquire() as connection:
            grant_id = await connection.fetchval(
                "SELECT id FROM grants WHERE subject_id = $1 AND permission = 'recordings:read'",
                uuid.UUID(reader.id),
            )
        answered = await client.delete(f"/api/v1/grants/{grant_id}", headers=admin.headers)
    assert answered.status in (200, 204), await answered.text()


@pytest.mark.parametrize("how", ["recordings_read_removed", "disabled"])
async def test_a_download_stops_within_ten_seconds_of_access_lost(
    client: Any,
    pools_runtime: Runtime,
    new_caller: NewCaller,
    how: str,
) -> None:
    recording_id = await big_recording(pools_runtime)
    total = CHUNKS * CHUNK_SIZE
    admin = await new_caller("platform:admin")
    reader = await new_caller("recordings:read")
    url = client.make_url(f"/api/v1/recordings/{recording_id}/download")
    async with aiohttp.ClientSession() as http:
        response = await http.get(url, headers=reader.headers)
        assert response.status == 200
        assert response.content_length == total
        received = 0
        while received < 1024 * 1024:
            received += len(await response.content.read(READ_SIZE))
            await asyncio.sleep(READ_PAUSE)

        await take_away(client, admin, pools_runtime, reader, how)
        taken_at = time.monotonic()
        ended = "finished"
        try:
            async with asyncio.timeout(15):
                while True:
                    data = await response.content.read(READ_SIZE)
                    if not data:
                        break
                    received += len(data)
                    await asyncio.sleep(READ_PAUSE)
        except TimeoutError:  # (before OSError: it is one)
            ended = "still streaming"
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, OSError):
            ended = "cut"
        elapsed = time.monotonic() - taken_at
    assert (ended, received < total) == ("cut", True), (ended, received, total, elapsed)
    assert elapsed < 10, elapsed
    token = secrets.token_hex(2)  # the next download is refused at once
    refused = await client.get(
        f"/api/v1/recordings/{recording_id}/download?t={token}", headers=reader.headers
    )
    assert refused.status in (401, 403)


async def test_a_reader_who_keeps_access_downloads_the_whole_recording_and_ranges(
    client: Any,
    pools_runtime: Runtime,
    new_caller: NewCaller,
) -> None:
    recording_id = await big_recording(pools_runtime)
    total = CHUNKS * CHUNK_SIZE
    reader = await new_caller("recordings:read")
    url = f"/api/v1/recordings/{recording_id}/download"
    whole = await client.get(url, headers=reader.headers)
    assert whole.status == 200
    body = await whole.read()
    assert len(body) == total
    part = await client.get(url, headers={**reader.headers, "Range": "bytes=100-70000"})
    assert part.status == 206
    assert await part.read() == body[100:70001]
