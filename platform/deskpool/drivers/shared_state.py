"""State a driver shares between processes, without importing Redis itself.

A driver instance lives in one process, but deskpool runs several (api, worker...). What a
driver must see the same way everywhere (the simulator's whole cluster, a token cache, a lock
around id allocation) goes through :class:`SharedState`: bytes by key, compare-and-set, and
named locks. The platform hands each driver a :class:`RedisSharedState` whose keys are
prefixed per cluster; unit tests use :class:`InMemorySharedState`.

Failures of the store itself surface as
:class:`~deskpool.drivers.errors.TransientDriverError`, so a driver only ever sees driver errors.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from redis.exceptions import LockError, RedisError

from deskpool.drivers.errors import DriverBusy, TransientDriverError

if TYPE_CHECKING:
    import redis.asyncio as redis

log = logging.getLogger(__name__)


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


# KEYS[1]: key. ARGV: has_expected (0/1), expected, has_value (0/1), value, ttl_ms (0 = none)
_COMPARE_AND_SET = """
local current = redis.call('GET', KEYS[1])
if ARGV[1] == '0' then
  if current then return 0 end
else
  if (not current) or current ~= ARGV[2] then return 0 end
end
if ARGV[3] == '0' then
  redis.call('DEL', KEYS[1])
elseif tonumber(ARGV[5]) > 0 then
  redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[5])
else
  redis.call('SET', KEYS[1], ARGV[4])
end
return 1
"""


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode()


class RedisSharedState:
    """:class:`SharedState` in Redis, every key under ``prefix``.

    :param client: a ``redis.asyncio.Redis`` client (the platform's key-value client).
    :param prefix: prepended to every key and lock name, e.g. ``deskpool:driver:<cluster id>:``.
    """

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self._compare_and_set = client.register_script(_COMPARE_AND_SET)

    def _key(self, key: str) -> str:
        return self.prefix + key

    async def get(self, key: str) -> bytes | None:
        """The value stored under ``key``, or ``None``."""
        try:
            return _as_bytes(await self.client.get(self._key(key)))
        except (RedisError, OSError) as error:
            raise SharedStateUnavailable(f"reading driver state failed: {error}") from error

    async def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """Store ``value`` under ``key``."""
        try:
            await self.client.set(self._key(key), value, px=int(ttl * 1000) if ttl else None)
        except (RedisError, OSError) as error:
            raise SharedStateUnavailable(f"writing driver state failed: {error}") from error

    async def delete(self, key: str) -> None:
        """Remove ``key``."""
        try:
            await self.client.delete(self._key(key))
        except (RedisError, OSError) as error:
            raise SharedStateUnavailable(f"deleting driver state failed: {error}") from error

    async def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes | None, *, ttl: float | None = None
    ) -> bool:
        """Replace ``key``'s value if it is still ``expected`` (one Lua script, atomic)."""
        args = [
            "0" if expected is None else "1",
            expected or b"",
            "0" if value is None else "1",
            value or b"",
            str(int(ttl * 1000)) if ttl else "0",
        ]
        try:
            replaced = await self._compare_and_set(keys=[self._key(key)], args=args)
        except (RedisError, OSError) as error:
            raise SharedStateUnavailable(f"updating driver state failed: {error}") from error
        return bool(replaced)

    def lock(
        self, name: str, *, ttl: float = 30.0, wait: float = 10.0
    ) -> AbstractAsyncContextManager[None]:
        """A Redis lock named ``name`` (expires after ``ttl`` if its holder dies)."""
        return self._hold(name, ttl, wait)

    @asynccontextmanager
    async def _hold(self, name: str, ttl: float, wait: float) -> AsyncIterator[None]:
        lock = self.client.lock(self._key(f"lock:{name}"), timeout=ttl, blocking_timeout=wait)
        try:
            acquired = await lock.acquire()
        except (RedisError, OSError) as error:
            raise SharedStateUnavailable(f"taking driver lock {name!r} failed: {error}") from error
        if not acquired:
            raise DriverBusy(f"shared lock {name!r} is held elsewhere")
        try:
            yield
        finally:
            try:
                await lock.release()
            except LockError:
                log.warning("driver lock %r expired while held (ttl %ss)", name, ttl)
            except (RedisError, OSError) as error:
                raise SharedStateUnavailable(
                    f"releasing driver lock {name!r} failed: {error}"
                ) from error
