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
import contextlib
import secrets
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


#: How often a waiter retries a held lock whose release it was not told of, at most.
LOCK_RETRY_SECONDS = 0.02


class InMemorySharedState:
    """:class:`SharedState` in one process's memory, for unit tests and single-process use.

    It behaves as the platform's Redis implementation does where a driver can tell (one
    contract suite runs against both): every operation is a suspension point, as a round trip
    is, so a caller can be cancelled there (an operation cancelled before it ran did not
    happen); values and locks expire after their ``ttl``; a lock is the key ``lock:NAME``
    holding a random token, taken only while absent and released only by the holder of that
    token (a holder whose lock expired and was taken by another releases nothing).
    """

    def __init__(self) -> None:
        self._values: dict[str, tuple[bytes, float | None]] = {}
        self._released = asyncio.Event()

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

    def _swap(
        self, key: str, expected: bytes | None, value: bytes | None, ttl: float | None
    ) -> bool:
        if self._live(key) != expected:
            return False
        self._store(key, value, ttl)
        return True

    async def get(self, key: str) -> bytes | None:
        """The value stored under ``key``, or ``None``."""
        await asyncio.sleep(0)
        return self._live(key)

    async def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """Store ``value`` under ``key``."""
        await asyncio.sleep(0)
        self._store(key, value, ttl)

    async def delete(self, key: str) -> None:
        """Remove ``key``."""
        await asyncio.sleep(0)
        self._values.pop(key, None)

    async def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes | None, *, ttl: float | None = None
    ) -> bool:
        """Replace ``key``'s value if it is still ``expected``."""
        await asyncio.sleep(0)
        return self._swap(key, expected, value, ttl)

    def lock(
        self, name: str, *, ttl: float = 30.0, wait: float = 10.0
    ) -> AbstractAsyncContextManager[None]:
        """A lock named ``name`` within this process (expires after ``ttl``)."""
        return self._hold(name, ttl, wait)

    def _release(self, key: str, token: bytes) -> None:
        if self._swap(key, token, None, None):
            self._released.set()
            self._released = asyncio.Event()

    @asynccontextmanager
    async def _hold(self, name: str, ttl: float, wait: float) -> AsyncIterator[None]:
        key = f"lock:{name}"
        token = secrets.token_hex(16).encode()
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait
        try:
            await asyncio.sleep(0)
            while not self._swap(key, None, token, max(ttl, 0.001)):
                left = give_up - loop.time()
                if left <= 0:
                    raise DriverBusy(f"shared lock {name!r} is held elsewhere")
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(LOCK_RETRY_SECONDS, left)):
                        await self._released.wait()
        except BaseException:
            self._release(key, token)
            raise
        try:
            yield
        finally:
            self._release(key, token)
