"""The ``files`` recording store: sealed chunks under ``RECORDINGS_PATH``.

Registered in ``deskpool.recording_stores`` and chosen by ``RECORDING_STORE=files`` (the
default). Every chunk's plaintext is sealed by the platform's secret store (envelope encryption
under ``SECRETS_MASTER_KEY``, bound to the recording and the chunk's index, so a chunk moved to
another recording or position does not open). Nothing is written in plain text, not even for a
moment: chunks are sealed in memory before they reach a file. Files are ``0600`` in ``0700``
folders.

The layout (:data:`SEGMENTS`): the chunks of recording ``key`` are appended, in order, to one
file ``RECORDINGS_PATH/<key>/chunks.sealed``, each as a frame: an 8-byte header (the sealed
length and the chunk's index, both big-endian 32-bit) and the sealed chunk. A call to
:meth:`FileRecordingStore.write_chunks` appends every chunk it is given in one write, and
:meth:`FileRecordingStore.sync` syncs the file (the gateway's recording writer does so about once
a second per recording, and counts chunks only once synced), so a writer that fell behind
catches up in a few large writes instead of a file, an ``fsync`` and a rename per chunk
(``bench/recording_writer.py`` measures both). A gateway killed between
a write and the recording's row update leaves frames the row does not count (they are never
read), or a torn last frame (never read either, and cut off before the next append).

Recordings written before this layout keep one file per chunk,
``RECORDINGS_PATH/<key>/<n>.chunk`` (``n`` with eight digits); :meth:`FileRecordingStore.get_chunk`
reads such a chunk file first when there is one.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from deskpool.plugins import hookimpl
from deskpool.recordings.stores import RecordingStore, RecordingStoreFactory
from deskpool.registry import Registry
from deskpool.runtime import Runtime
from deskpool.secrets import SecretContext, SecretStore

__all__ = ["SEGMENTS", "FileRecordingStore"]

#: The secret context kind chunks are sealed under.
SECRET_KIND = "recording"
#: The file a recording's sealed chunks are appended to.
SEGMENTS = "chunks.sealed"
_KEY = re.compile(r"[0-9a-f-]{36}")
_FRAME = struct.Struct(">II")
#: Recordings whose frame offsets one store remembers (readers seek without rescanning).
_REMEMBERED = 64
#: Most buffers one ``pwritev`` is given (below the system's ``IOV_MAX``).
_IOV_MAX = 512


class _Frames:
    """Where the complete frames of one segment file start (and where the last one ends)."""

    __slots__ = ("end", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.end = 0


class FileRecordingStore(RecordingStore):
    """Chunks as sealed frames appended to one file per recording in ``root``."""

    def __init__(self, root: Path, secrets: SecretStore) -> None:
        self.root = root
        self.secrets = secrets
        self._lock = threading.Lock()
        self._frames: OrderedDict[str, _Frames] = OrderedDict()

    @classmethod
    def from_runtime(cls, runtime: Runtime) -> FileRecordingStore:
        """The store of ``RECORDINGS_PATH``, sealing with the runtime's secret store."""
        return cls(Path(str(runtime.config["RECORDINGS_PATH"])), runtime.secret_store)

    def _folder(self, key: str) -> Path:
        if not _KEY.fullmatch(key):
            raise KeyError(key)
        return self.root / key

    @staticmethod
    def _context(key: str, index: int) -> SecretContext:
        return SecretContext.of(SECRET_KIND, key, f"chunk_{index}")

    def put_chunk(self, key: str, index: int, data: bytes) -> None:
        """Seal ``data`` and write it as chunk ``index`` (synced before it returns)."""
        self.put_chunks(key, index, [data])

    def write_chunks(self, key: str, first_index: int, chunks: Sequence[bytes]) -> None:
        """Seal ``chunks`` and append them as chunks ``first_index``, ``first_index + 1``...

        One write for all of them (:meth:`sync` makes them durable). Chunks the file already
        holds from ``first_index`` on (the same call again: a retry) are replaced: the file is
        cut there first.

        :raises ValueError: ``first_index`` is beyond the chunks the file holds, or the chunks
            would replace some of those it holds but not the last ones.
        """
        folder = self._folder(key)
        framed: list[bytes] = []
        for offset, data in enumerate(chunks):
            sealed = self.secrets.encrypt(data, self._context(key, first_index + offset))
            framed += (_FRAME.pack(len(sealed), first_index + offset), sealed)
        try:
            descriptor = os.open(folder / SEGMENTS, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:  # the recording's first chunks
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            descriptor = os.open(folder / SEGMENTS, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            with self._lock:
                known = self._scan(key, descriptor)
                held = len(known.starts)
                if first_index > held or first_index + len(chunks) < held:
                    raise ValueError(
                        f"chunks {first_index}-{first_index + len(chunks) - 1} of {key} do not "
                        f"end its {held} chunks"
                    )
                at = known.end if first_index == len(known.starts) else known.starts[first_index]
                del known.starts[first_index:]
                known.end = at
            if os.fstat(descriptor).st_size != at:
                os.ftruncate(descriptor, at)  # a torn frame, or chunks written again
            _write_all(descriptor, framed, at)
            with self._lock:
                for header, sealed in zip(framed[::2], framed[1::2], strict=True):
                    known.starts.append(known.end)
                    known.end += len(header) + len(sealed)
        finally:
            os.close(descriptor)

    def sync(self, key: str) -> None:
        """``fsync`` the recording's segment file (every chunk written so far is durable).

        Its pages then leave the page cache: a recording is rarely read back soon, and the
        cache of a gateway's host is better spent on anything else (and the writer's next
        chunks reuse the freed pages rather than new ones).
        """
        try:
            descriptor = os.open(self._folder(key) / SEGMENTS, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(descriptor)
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)

    def _scan(self, key: str, descriptor: int) -> _Frames:
        """The frames of ``key``'s open segment file: those remembered, then any after them.

        Called with the lock held.
        """
        known = self._frames.pop(key, None) or _Frames()
        self._frames[key] = known
        while len(self._frames) > _REMEMBERED:
            self._frames.popitem(last=False)
        size = os.fstat(descriptor).st_size
        if known.starts and not self._still(descriptor, known, size):
            known.starts.clear()  # cut since (the last chunks written again): read it anew
            known.end = 0
        while known.end + _FRAME.size <= size:
            header = os.pread(descriptor, _FRAME.size, known.end)
            length, index = _FRAME.unpack(header)
            end = known.end + _FRAME.size + length
            if index != len(known.starts) or end > size:
                break  # a torn frame: the writer was killed mid-write
            known.starts.append(known.end)
            known.end = end
        return known

    @staticmethod
    def _still(descriptor: int, known: _Frames, size: int) -> bool:
        """Whether the last remembered frame is still where it was remembered."""
        if size < known.end:
            return False
        header = os.pread(descriptor, _FRAME.size, known.starts[-1])
        if len(header) < _FRAME.size:
            return False
        length, index = _FRAME.unpack(header)
        ends: int = known.starts[-1] + _FRAME.size + length
        return bool(index == len(known.starts) - 1 and ends == known.end)

    def get_chunk(self, key: str, index: int) -> bytes:
        """Open chunk ``index``; :class:`KeyError` when it is not there."""
        folder = self._folder(key)
        try:
            sealed = (folder / f"{index:08d}.chunk").read_bytes()  # the layout before segments
        except FileNotFoundError:
            sealed = self._read_frame(key, folder / SEGMENTS, index)
        return self.secrets.decrypt(sealed, self._context(key, index))

    def _read_frame(self, key: str, path: Path, index: int) -> bytes:
        try:
            descriptor = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise KeyError(f"{key}/{index}") from None
        try:
            with self._lock:
                known = self._scan(key, descriptor)
                if index < 0 or index >= len(known.starts):
                    raise KeyError(f"{key}/{index}")
                start = known.starts[index]
            header = os.pread(descriptor, _FRAME.size, start)
            if len(header) < _FRAME.size or _FRAME.unpack(header)[1] != index:
                # Written again since it was remembered (by another process): read it anew.
                with self._lock:
                    self._frames.pop(key, None)
                return self._read_frame(key, path, index)
            return os.pread(descriptor, _FRAME.unpack(header)[0], start + _FRAME.size)
        finally:
            os.close(descriptor)

    def delete(self, key: str) -> None:
        """Remove the recording's folder."""
        folder = self._folder(key)
        with self._lock:
            self._frames.pop(key, None)
        shutil.rmtree(folder, ignore_errors=True)


def _write_all(descriptor: int, buffers: Sequence[bytes], position: int) -> None:
    """Write ``buffers`` one after the other from ``position`` (``pwritev``, resumed if short)."""
    pending = [memoryview(buffer) for buffer in buffers if buffer]
    while pending:
        written = os.pwritev(descriptor, pending[:_IOV_MAX], position)
        position += written
        while pending and written >= len(pending[0]):
            written -= len(pending.pop(0))
        if written:
            pending[0] = pending[0][written:]


@hookimpl
def deskpool_register_recording_stores(registry: Registry[RecordingStoreFactory]) -> None:
    """Register the ``files`` store."""
    registry.add("files", FileRecordingStore.from_runtime)
