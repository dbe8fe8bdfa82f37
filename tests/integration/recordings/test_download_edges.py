"""A recording download whose recording is deleted under it, or whose client leaves (issue 33 §7).

Before: retention deleting a recording while it was downloaded made the handler's next chunk
raise ``KeyError`` (logged as an unhandled error: a 500 that could not even be sent), and a
client that left mid-download was logged as the database or key-value store being unavailable
(``ConnectionResetError`` counted as a dependency outage). Now the first is cut short and
logged as one line saying why, the second is logged as the client having left.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from tests.support.recordings import new_recording

from deskpool.recordings import store
from deskpool.recordings.model import store_key
from deskpool.testing.pytest_plugin import served

ADMIN = "download-edges-admin"
CHUNK = 60 * 1024
CHUNKS = 160


@dataclass
class Downloads:
    runtime: Any
    client: Any
    headers: dict[str, str]


@pytest.fixture
async def downloads(
    secure_environ: dict[str, str],
    recordings_environ: dict[str, str],
    identity_provider: Any,
    aiohttp_client: Any,
) -> AsyncIterator[Downloads]:
    environ = (
        secure_environ
        | {k: recordings_environ[k] for k in ("SECRETS_MASTER_KEY", "RECORDINGS_PATH")}
        | {"AUTH_BOOTSTRAP_ADMIN_SUBJECTS": ADMIN, "API_RATE_LIMIT_PER_MINUTE": "0"}
    )
    async with served(environ, aiohttp_client) as (runtime, client):
        token = identity_provider.issue_token(ADMIN, expires_in=3600)
        headers = {"Authorization": f"Bearer {token}"}
        assert (await client.get("/api/v1/me", headers=headers)).status == 200
        yield Downloads(runtime, client, headers)


async def big_recording(runtime: Any) -> str:
    recording = await new_recording(runtime, "dl-01")
    key = store_key(recording.id)
    for index in range(CHUNKS):
        runtime.recording_store.put_chunk(key, index, bytes([65 + index % 26]) * CHUNK)
    await store.add_chunks(runtime.db, recording.id, 0, [CHUNK] * CHUNKS)
    return str(recording.id)


async def drain(response: Any) -> tuple[int, bool]:
    """How many more bytes arrive, and whether the body broke off before its length."""
    received = 0
    try:
        while chunk := await response.content.read(65536):
            received += len(chunk)
    except aiohttp.ClientPayloadError:
        return received, True
    return received, False


def unexpected(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno >= logging.WARNING
        and ("unhandled" in record.getMessage() or "unavailable" in record.getMessage())
    ]


async def test_a_recording_deleted_while_it_downloads_is_cut_short_without_a_500(
    downloads: Downloads, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="deskpool")
    recording_id = await big_recording(downloads.runtime)
    response = await downloads.client.get(
        f"/api/v1/recordings/{recording_id}/download", headers=downloads.headers
    )
    assert response.status == 200
    first = await response.content.readexactly(CHUNK)
    assert first == b"A" * CHUNK
    # Retention's work: the chunks go, then the row.
    downloads.runtime.recording_store.delete(store_key(uuid.UUID(recording_id)))
    received, broke = await drain(response)
    assert broke
    assert len(first) + received < CHUNK * CHUNKS
    await asyncio.sleep(0.2)
    assert unexpected(caplog) == []
    assert any("deleted while" in record.getMessage() for record in caplog.records)


async def test_a_client_that_leaves_a_download_is_logged_as_leaving(
    downloads: Downloads, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="deskpool")
    recording_id = await big_recording(downloads.runtime)
    response = await downloads.client.get(
        f"/api/v1/recordings/{recording_id}/download", headers=downloads.headers
    )
    assert response.status == 200
    await response.content.readexactly(CHUNK)
    response.close()  # the client goes away with most of the body unsent
    for _ in range(50):
        await asyncio.sleep(0.1)
        if any("client left" in record.getMessage() for record in caplog.records):
            break
    assert unexpected(caplog) == []
    assert any("client left" in record.getMessage() for record in caplog.records)
    answered = [r.getMessage() for r in caplog.records if r.name == "deskpool.api.access"]
    assert not any("download 500" in line or "download 503" in line for line in answered)
