"""The ``files`` recording store: sealed chunk files under ``RECORDINGS_PATH``.

Registered in ``deskpool.recording_stores`` and chosen by ``RECORDING_STORE=files`` (the
default). Chunk ``n`` of recording ``key`` is ``RECORDINGS_PATH/<key>/<n>.chunk`` (``n`` written
with eight digits): its plaintext sealed by the platform's secret store (envelope encryption
under ``SECRETS_MASTER_KEY``, bound to the recording and the chunk's index, so a chunk moved to
another recording or position does not open). Nothing is written in plain text, not even for a
moment: a chunk is sealed in memory, written to a temporary file, and renamed into place. Files
are ``0600`` in ``0700`` folders.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from deskpool.plugins import hookimpl
from deskpool.recordings.stores import RecordingStore, RecordingStoreFactory
from deskpool.registry import Registry
from deskpool.runtime import Runtime
from deskpool.secrets import SecretContext, SecretStore

__all__ = ["FileRecordingStore"]

#: The secret context kind chunks are sealed under.
SECRET_KIND = "recording"
_KEY = re.compile(r"[0-9a-f-]{36}")


class FileRecordingStore(RecordingStore):
    """Chunks as sealed files in ``root``."""

    def __init__(self, root: Path, secrets: SecretStore) -> None:
        self.root = root
        self.secrets = secrets

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
        """Seal ``data`` and write it as chunk ``index`` (atomically)."""
        folder = self._folder(key)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        sealed = self.secrets.encrypt(data, self._context(key, index))
        final = folder / f"{index:08d}.chunk"
        temporary = folder / f".{index:08d}.tmp"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(sealed)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, final)

    def get_chunk(self, key: str, index: int) -> bytes:
        """Open chunk ``index``; :class:`KeyError` when it is not there."""
        path = self._folder(key) / f"{index:08d}.chunk"
        try:
            sealed = path.read_bytes()
        except FileNotFoundError:
            raise KeyError(f"{key}/{index}") from None
        return self.secrets.decrypt(sealed, self._context(key, index))

    def delete(self, key: str) -> None:
        """Remove the recording's folder."""
        shutil.rmtree(self._folder(key), ignore_errors=True)


@hookimpl
def deskpool_register_recording_stores(registry: Registry[RecordingStoreFactory]) -> None:
    """Register the ``files`` store."""
    registry.add("files", FileRecordingStore.from_runtime)
