"""The recording store contract: where recorded chunks are kept.

``RECORDING_STORE`` chooses one store among those plugins register with
``deskpool_register_recording_stores``; the first-party one, ``files``
(:mod:`deskpool_recording_files`), writes each chunk to ``RECORDINGS_PATH`` sealed with the
platform's secret store. A store never keeps a chunk in plain text: it seals what it is given
and opens what it returns. Its methods block (files, a network): callers run them off the event
loop (``asyncio.to_thread``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from deskpool.errors import StartupError

if TYPE_CHECKING:
    from deskpool.plugins import PluginHost
    from deskpool.runtime import Runtime

__all__ = ["RecordingStore", "RecordingStoreFactory", "build_recording_store"]


class RecordingStore(ABC):
    """Keeps the chunks of recordings, by the recording's store key and the chunk's index."""

    @abstractmethod
    def put_chunk(self, key: str, index: int, data: bytes) -> None:
        """Keep chunk ``index`` of recording ``key`` (sealed; replaces one of that index)."""

    def put_chunks(self, key: str, first_index: int, chunks: Sequence[bytes]) -> None:
        """Keep ``chunks`` as chunks ``first_index``, ``first_index + 1``... of recording ``key``.

        Every one is kept, durably, when this returns: :meth:`write_chunks`, then :meth:`sync`.
        """
        self.write_chunks(key, first_index, chunks)
        self.sync(key)

    def write_chunks(self, key: str, first_index: int, chunks: Sequence[bytes]) -> None:
        """Write ``chunks`` as chunks ``first_index``... of ``key``; durable after :meth:`sync`.

        The gateway's recording writer hands a store every chunk of a recording that waited
        while it wrote the last ones, and syncs each recording about once a second: a store that
        can write several chunks at the cost of one and sync later (the ``files`` store: one
        append, one ``fsync`` a second) overrides this and :meth:`sync`; by default each chunk
        is :meth:`put_chunk`, durable at once.
        """
        for offset, data in enumerate(chunks):
            self.put_chunk(key, first_index + offset, data)

    def sync(self, key: str) -> None:
        """Make every chunk written to ``key`` durable.

        Nothing to do by default: :meth:`put_chunk` keeps each chunk durably at once.
        """
        return

    @abstractmethod
    def get_chunk(self, key: str, index: int) -> bytes:
        """The plaintext of chunk ``index`` of recording ``key``.

        :raises KeyError: there is no such chunk.
        """

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove every chunk of recording ``key`` (nothing when there is none)."""


#: What ``deskpool_register_recording_stores`` registers: builds the store from the runtime
#: (its configuration, and its secret store to seal chunks with).
RecordingStoreFactory: TypeAlias = Callable[["Runtime"], RecordingStore]


def build_recording_store(plugins: PluginHost, runtime: Runtime) -> RecordingStore:
    """The recording store ``RECORDING_STORE`` chooses.

    :raises StartupError: no store of that name is registered (a process that does not record
        starts without one: the plugin is checked here, when a recording is first kept or read).
    """
    name = runtime.config["RECORDING_STORE"]
    try:
        factory = plugins.recording_stores().get(name)
    except KeyError as error:
        raise StartupError(
            f"RECORDING_STORE: {error.args[0]} (is its plugin installed in the "
            "'deskpool.recording_stores' entry-point group?)"
        ) from None
    store = factory(runtime)
    if not isinstance(store, RecordingStore):
        raise StartupError(f"recording store {name!r} did not build a RecordingStore")
    return store
