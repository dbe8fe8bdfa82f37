"""State a driver shares between processes: the protocol, and an in-memory implementation.

A driver instance lives in one process, but deskpool runs several (api, worker...). What a
driver must see the same way everywhere (the simulator's whole cluster, a token cache, a lock
around id allocation) goes through :class:`SharedState`: bytes by key, compare-and-set, and
named locks. The platform hands each driver a Redis-backed implementation whose keys are
prefixed per cluster (``deskpool.clusters.shared_state.RedisSharedState``; the contract does not
import Redis); unit tests and conformance runs use :class:`InMemorySharedState`.

Failures of the store itself surface as
:class:`~deskpool_driver_api.errors.TransientDriverError`, so a driver only ever sees driver errors.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol, runtime_checkable

from deskpool_driver_api.errors import DriverBusy, TransientDriverError


class SharedStateUnavailable(TransientDriverError):
    """The shared state store (Redis) did not answer."""

    code = "driver_shared_state_unavailable"
    title = "The driver's shared state store is unavailable"


@runtime_checkable
class SharedState(Protocol):
    """Bytes by key, visible to every process of the deployment.

    Keys are plain strings chosen by the driver; the platform has already namespaced them per
    cluster. Values are bytes (a driver encodes its own JSON).
    """

    async def get(self, key: str) -> bytes | None:
        """The value stored under ``key``, or ``None``."""
        ...

    async def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """Store ``value`` under ``key``, expiring after ``ttl`` seconds when given."""
        ...

    async def delete(self, key: str) -> None:
        """Remove ``key`` (no error when absent)."""
        ...

    async def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes | None, *, ttl: float | None = None
    ) -> bool:
        """Atomically replace the value of ``key`` if it is still ``expected``.

        :param expected: the value last read; ``None`` means "only if absent".
        :param value: the new value; ``None`` deletes the key.
        :param ttl: expiry of the new value in seconds, when given.
        :returns: whether the value was replaced.
        """
        ...

    def lock(
        self, name: str, *, ttl: float = 30.0, wait: float = 10.0
    ) -> AbstractAsyncContextManager[None]:
        """A lock named ``name``, held across every process while the block runs.

        :param ttl: the lock expires after this long even if its holder died.
        :param wait: how long to wait for it.
        :raises DriverBusy: when the lock is not acquired within ``wait`` seconds.
        """
        ...


class InMemorySharedState:
    """:class:`SharedState` in one process's memory, for unit tests and single-process use.

    Lock ``ttl`` is not enforced (a holder in the same process cannot die without its
    event loop).
    """

    def __init__(self) -> None:
        self._values: dict[str, tuple[bytes, float | None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def _live(self, key: str) -> bytes | None:
        item = self._values.get(key)
        if item is None:
            return None
        value, expires = item
        if expires is not None and time.monotonic() >= expires:
            del self._values[key]
            return None
        return value

    def _store(self, key: str, value: bytes | None, ttl: float | None) -> None:
        if value is None:
            self._values.pop(key, None)
        else:
            self._values[key] = (bytes(value), time.monotonic() + ttl if ttl else None)

    async def get(self, key: str) -> bytes | None:
        """The value stored under ``key``, or ``None``."""
        return self._live(key)

    async def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """Store ``value`` under ``key``."""
        self._store(key, value, ttl)

    async def delete(self, key: str) -> None:
        """Remove ``key``."""
        self._values.pop(key, None)

    async def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes | None, *, ttl: float | None = None
    ) -> bool:
        """Replace ``key``'s value if it is still ``expected``."""
        if self._live(key) != expected:
            return False
        self._store(key, value, ttl)
        return True

    def lock(
        self, name: str, *, ttl: float = 30.0, wait: float = 10.0
    ) -> AbstractAsyncContextManager[None]:
        """A lock named ``name`` within this process."""
        return self._hold(name, wait)

    @asynccontextmanager
    async def _hold(self, name: str, wait: float) -> AsyncIterator[None]:
        lock = self._locks.setdefault(name, asyncio.Lock())
        try:
            async with asyncio.timeout(wait):
                await lock.acquire()
        except TimeoutError:
            raise DriverBusy(f"shared lock {name!r} is held elsewhere") from None
        try:
            yield
        finally:
            lock.release()
