"""The rules of session recordings, with no I/O.

A recording is the Guacamole instruction stream the desktop daemon sent to the browser, exactly
as guacd writes its own recordings (the raw output stream; with ``include_keys`` the user's key
events too, as ``key`` instructions carrying the keysym, whether it is pressed, and the time in
milliseconds), so ``Guacamole.SessionRecording`` of guacamole-common-js plays it. It is kept as
numbered chunks of complete instructions; each chunk's plaintext size is recorded, so a byte
range of the whole stream maps to the chunks that hold it (:func:`chunks_for_range`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from deskpool.values import ascii_int

__all__ = [
    "NO_RECORDING",
    "ByteRange",
    "Recording",
    "RecordingPolicy",
    "UnsatisfiableRange",
    "chunks_for_range",
    "header_total",
    "key_instruction",
    "parse_range",
    "retention_cutoff",
    "store_key",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordingPolicy:
    """Whether a pool's sessions are recorded, and whether the user's key events are too."""

    enabled: bool = False
    include_keys: bool = False

    def as_json(self) -> dict[str, Any]:
        """The policy as the API shows it."""
        return {"enabled": self.enabled, "include_keys": self.include_keys}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> RecordingPolicy:
        """The policy of ``document`` (members left out are off)."""
        return cls(
            enabled=bool(document.get("enabled", False)),
            include_keys=bool(document.get("include_keys", False)),
        )


#: A pool that does not record.
NO_RECORDING = RecordingPolicy()


@dataclass(frozen=True, slots=True, kw_only=True)
class Recording:
    """One session's recording, as the database holds it."""

    id: uuid.UUID
    session_id: uuid.UUID
    pool_id: uuid.UUID
    user_id: uuid.UUID
    desktop_name: str
    include_keys: bool
    store: str
    store_key: str
    started_at: datetime
    ended_at: datetime | None
    chunk_sizes: tuple[int, ...]
    size_bytes: int
    truncated: bool

    @property
    def chunks(self) -> int:
        """How many chunks are written."""
        return len(self.chunk_sizes)


def store_key(recording_id: uuid.UUID) -> str:
    """Where a recording's chunks are kept in its store (its id: nothing about the user)."""
    return str(recording_id)


def key_instruction(keysym: str, pressed: str, timestamp_ms: int) -> str:
    """A recorded key event as guacd writes it: ``key,<keysym>,<pressed>,<timestamp>``."""
    args = (keysym, pressed, str(timestamp_ms))
    return "3.key," + ",".join(f"{len(arg)}.{arg}" for arg in args) + ";"


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Bytes ``start`` to ``end`` inclusive of a stream of ``total`` bytes."""

    start: int
    end: int
    total: int

    @property
    def length(self) -> int:
        """How many bytes the range holds."""
        return self.end - self.start + 1


class UnsatisfiableRange(ValueError):
    """A ``Range`` header no byte of the stream satisfies (a 416)."""


def parse_range(header: str | None, total: int) -> ByteRange | None:
    """The single byte range ``header`` asks of ``total`` bytes (``None``: the whole stream).

    ``bytes=a-b``, ``bytes=a-`` and ``bytes=-n`` are understood; a header of another unit or
    with several ranges is ignored (the whole stream is sent, as RFC 9110 allows).

    :raises UnsatisfiableRange: the range starts past the end, or the stream is empty.
    """
    if header is None or not header.startswith("bytes=") or "," in header:
        return None
    first, dash, last = header[len("bytes=") :].strip().partition("-")
    if not dash:
        return None
    return _range(first.strip(), last.strip(), total)


def _digits(text: str) -> bool:
    """Whether ``text`` is ASCII digits a client may send (``²`` and ``٣`` are not)."""
    return ascii_int(text) is not None and text.isdigit()


def _range(first: str, last: str, total: int) -> ByteRange | None:
    if not (first == "" or _digits(first)) or not (last == "" or _digits(last)):
        return None  # a malformed range is ignored (RFC 9110 §14.2): the whole stream
    if first == "":
        if last == "" or int(last) == 0:
            raise UnsatisfiableRange(header_total(total))
        start = max(total - int(last), 0)
        end = total - 1
    else:
        start = int(first)
        end = total - 1 if last == "" else min(int(last), total - 1)
        if last != "" and int(last) < start:
            return None
    if start >= total or total == 0:
        raise UnsatisfiableRange(header_total(total))
    return ByteRange(start, end, total)


def header_total(total: int) -> str:
    """The ``Content-Range`` of a refused range: ``bytes */<total>``."""
    return f"bytes */{total}"


def chunks_for_range(sizes: Sequence[int], start: int, end: int) -> list[tuple[int, int, int]]:
    """The chunks holding bytes ``start``..``end`` (inclusive) of the stream.

    :returns: ``(chunk index, first byte in the chunk, last byte in the chunk + 1)`` in order.
    """
    pieces: list[tuple[int, int, int]] = []
    offset = 0
    for index, size in enumerate(sizes):
        chunk_start, chunk_end = offset, offset + size
        offset = chunk_end
        if chunk_end <= start or size == 0:
            continue
        if chunk_start > end:
            break
        pieces.append((index, max(start - chunk_start, 0), min(end + 1, chunk_end) - chunk_start))
    return pieces


def retention_cutoff(now: datetime, days: int) -> datetime | None:
    """Recordings started before this are deleted (``None``: ``days`` 0 keeps everything)."""
    return None if days <= 0 else now - timedelta(days=days)
