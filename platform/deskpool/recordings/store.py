"""The SQL of session recordings (table ``session_recordings``, migration ``0018_recordings``).

Reads take a :class:`~deskpool.db.rows.Db`; writes take a connection or the pool. No business
rules and no HTTP errors here.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from deskpool.db.rows import Db
from deskpool.recordings.model import Recording, store_key

_COLUMNS = """id, session_id, pool_id, user_id, desktop_name, include_keys, store, store_key,
    started_at, ended_at, chunk_sizes, size_bytes, truncated"""


def recording_of(row: Any) -> Recording:
    """A :class:`Recording` from a ``session_recordings`` row."""
    return Recording(
        id=row["id"],
        session_id=row["session_id"],
        pool_id=row["pool_id"],
        user_id=row["user_id"],
        desktop_name=row["desktop_name"],
        include_keys=row["include_keys"],
        store=row["store"],
        store_key=row["store_key"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        chunk_sizes=tuple(row["chunk_sizes"]),
        size_bytes=row["size_bytes"],
        truncated=row["truncated"],
    )


async def insert_recording(
    db: Db,
    *,
    session_id: uuid.UUID,
    pool_id: uuid.UUID,
    user_id: uuid.UUID,
    desktop_name: str,
    include_keys: bool,
    store: str,
) -> Recording:
    """Start the recording of a session (no chunk yet)."""
    recording_id = uuid.uuid4()
    row = await db.fetchrow(
        f"""
        INSERT INTO session_recordings (id, session_id, pool_id, user_id, desktop_name,
                                        include_keys, store, store_key)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
        RETURNING {_COLUMNS}
        """,
        recording_id,
        session_id,
        pool_id,
        user_id,
        desktop_name,
        include_keys,
        store,
        store_key(recording_id),
    )
    return recording_of(row)


async def add_chunks(
    db: Db, recording_id: uuid.UUID, first_index: int, sizes: Sequence[int]
) -> None:
    """Record that chunks ``first_index``... (``sizes`` plaintext bytes each) are written.

    Chunks are written in order by one writer; chunks recorded twice (a retry) are not added
    again.
    """
    await db.execute(
        """
        UPDATE session_recordings
           SET chunk_sizes = chunk_sizes || $3::bigint[], size_bytes = size_bytes + $4
         WHERE id = $1 AND cardinality(chunk_sizes) = $2
        """,
        recording_id,
        first_index,
        list(sizes),
        sum(sizes),
    )


async def finish_recording(db: Db, recording_id: uuid.UUID, *, truncated: bool) -> None:
    """The recording ended (the tunnel closed, or the writer gave up: ``truncated``)."""
    await db.execute(
        """
        UPDATE session_recordings SET ended_at = coalesce(ended_at, now()),
               truncated = truncated OR $2
         WHERE id = $1
        """,
        recording_id,
        truncated,
    )


async def finish_session_recording(db: Db, session_id: uuid.UUID) -> None:
    """The recording of a session whose gateway was lost ends with what was written."""
    await db.execute(
        "UPDATE session_recordings SET ended_at = coalesce(ended_at, now()) WHERE session_id = $1",
        session_id,
    )


async def get_recording(db: Db, recording_id: uuid.UUID) -> Recording | None:
    """The recording ``recording_id``, or ``None``."""
    row = await db.fetchrow(
        f"SELECT {_COLUMNS} FROM session_recordings WHERE id = $1", recording_id
    )
    return None if row is None else recording_of(row)


@dataclass(frozen=True)
class RecordingFilter:
    """Which recordings a listing returns (every member optional)."""

    pool_id: uuid.UUID | None = None
    user_id: uuid.UUID | None = None
    session_id: uuid.UUID | None = None
    started_after: datetime | None = None
    started_before: datetime | None = None


async def list_recordings(
    db: Db,
    where: RecordingFilter,
    *,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None = None,
) -> list[Recording]:
    """Recordings matching ``where``, newest first, after the cursor ``after``."""
    clauses: list[str] = []
    args: list[Any] = []

    def add(clause: str, value: Any) -> None:
        args.append(value)
        clauses.append(clause.replace("?", f"${len(args)}"))

    if where.pool_id is not None:
        add("pool_id = ?", where.pool_id)
    if where.user_id is not None:
        add("user_id = ?", where.user_id)
    if where.session_id is not None:
        add("session_id = ?", where.session_id)
    if where.started_after is not None:
        add("started_at >= ?", where.started_after)
    if where.started_before is not None:
        add("started_at < ?", where.started_before)
    if after is not None:
        args.extend(after)
        clauses.append(f"(started_at, id) < (${len(args) - 1}, ${len(args)})")
    args.append(limit)
    condition = " AND ".join(clauses) or "true"
    rows = await db.fetch(
        f"""
        SELECT {_COLUMNS} FROM session_recordings WHERE {condition}
         ORDER BY started_at DESC, id DESC LIMIT ${len(args)}
        """,
        *args,
    )
    return [recording_of(row) for row in rows]


async def expired_recordings(db: Db, cutoff: datetime, limit: int) -> Sequence[Recording]:
    """Up to ``limit`` recordings started before ``cutoff``, oldest first."""
    rows = await db.fetch(
        f"""
        SELECT {_COLUMNS} FROM session_recordings WHERE started_at < $1
         ORDER BY started_at LIMIT $2
        """,
        cutoff,
        limit,
    )
    return [recording_of(row) for row in rows]


async def delete_recording(db: Db, recording_id: uuid.UUID) -> None:
    """Remove the row of a recording whose chunks are gone."""
    await db.execute("DELETE FROM session_recordings WHERE id = $1", recording_id)
