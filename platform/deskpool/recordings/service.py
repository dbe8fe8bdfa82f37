"""Session recordings for administrators: list, read (audited) and expire.

Every playback and download is audited (``recording.download`` with the byte range asked, in
the same call that opens the recording): reading what a user's session showed is itself on
the record. Chunks are opened one by one, off the event loop, as the answer is written, so a
download of any size holds one chunk in memory at a time.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from deskpool.actor import Actor
from deskpool.errors import DeskpoolError, NotFound
from deskpool.jobs.periodic import PeriodicContext, each_alone
from deskpool.recordings import store
from deskpool.recordings.model import (
    ByteRange,
    Recording,
    UnsatisfiableRange,
    chunks_for_range,
    header_total,
    parse_range,
    retention_cutoff,
)
from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: Recordings deleted per database round trip by the retention task.
RETENTION_BATCH = 200


class RangeNotSatisfiable(DeskpoolError):
    """A ``Range`` no byte of the recording satisfies."""

    status = 416
    code = "range_not_satisfiable"
    title = "Range not satisfiable"


async def get_recording(runtime: Runtime, recording_id: uuid.UUID) -> Recording:
    """The recording ``recording_id``. :raises NotFound: there is none."""
    recording = await store.get_recording(runtime.db, recording_id)
    if recording is None:
        raise NotFound(f"No recording has the id {recording_id}.")
    return recording


async def list_recordings(
    runtime: Runtime,
    where: store.RecordingFilter,
    *,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None,
) -> list[Recording]:
    """Recordings matching ``where``, newest first."""
    return await store.list_recordings(runtime.db, where, limit=limit, after=after)


async def open_download(
    runtime: Runtime, recording_id: uuid.UUID, range_header: str | None, actor: Actor
) -> tuple[Recording, ByteRange | None]:
    """Check the range asked of a recording and audit the read; return what to send.

    :raises NotFound: no such recording.
    :raises RangeNotSatisfiable: the range starts past the end (``Content-Range: bytes */n``).
    """
    recording = await get_recording(runtime, recording_id)
    try:
        wanted = parse_range(range_header, recording.size_bytes)
    except UnsatisfiableRange:
        raise RangeNotSatisfiable(
            f"The recording holds {recording.size_bytes} bytes.",
            headers={"Content-Range": header_total(recording.size_bytes)},
        ) from None
    details: dict[str, Any] = {
        "session_id": str(recording.session_id),
        "pool_id": str(recording.pool_id),
        "user_id": str(recording.user_id),
        "range": None if wanted is None else [wanted.start, wanted.end],
    }
    async with runtime.db.acquire() as connection:
        await actor.record(
            connection, "recording.download", "recordings", str(recording.id), details
        )
    return recording, wanted


class RecordingGone(NotFound):
    """The recording's chunks went while it was read (retention deleted it under a download)."""


async def chunks(
    runtime: Runtime, recording: Recording, wanted: ByteRange | None
) -> AsyncIterator[bytes]:
    """The plaintext bytes of ``wanted`` (everything for ``None``), one opened chunk at a time.

    :raises RecordingGone: a chunk is gone (retention deleted the recording meanwhile).
    """
    if recording.size_bytes == 0:
        return
    start, end = (0, recording.size_bytes - 1) if wanted is None else (wanted.start, wanted.end)
    recordings = runtime.recording_store
    for index, first, last in chunks_for_range(recording.chunk_sizes, start, end):
        try:
            data = await asyncio.to_thread(recordings.get_chunk, recording.store_key, index)
        except KeyError:
            raise RecordingGone(
                f"Recording {recording.id} was deleted while it was read."
            ) from None
        yield data[first:last]


async def delete_expired(runtime: Runtime, now: datetime | None = None) -> int:
    """Delete the recordings older than ``RECORDINGS_RETENTION_DAYS``; return how many."""
    cutoff = retention_cutoff(
        now or datetime.now(UTC), int(runtime.config["RECORDINGS_RETENTION_DAYS"])
    )
    if cutoff is None:
        return 0
    deleted = 0
    kept: set[uuid.UUID] = set()

    async def delete(recording: Recording) -> uuid.UUID:
        await asyncio.to_thread(runtime.recording_store.delete, recording.store_key)
        await store.delete_recording(runtime.db, recording.id)
        return recording.id

    while True:
        limit = RETENTION_BATCH + len(kept)
        expired = await store.expired_recordings(runtime.db, cutoff, limit)
        todo = [recording for recording in expired if recording.id not in kept]
        # Each recording alone: one that cannot be deleted is kept (the next run tries again).
        outcome = await each_alone(
            "recording_retention", todo, delete, lambda recording: f"recording {recording.id}"
        )
        deleted += len(outcome.done)
        kept |= {recording.id for recording in todo} - set(outcome.done)
        if len(expired) < limit or not outcome.done:
            break
    if deleted:
        log.info("deleted %d session recording(s) past retention", deleted)
    return deleted


async def retention_task(context: PeriodicContext) -> int:
    """The worker's ``recording_retention`` task."""
    return await delete_expired(context.runtime)
