"""Drivers' shared state in Redis: the platform's implementation of the contract's protocol.

:class:`RedisSharedState` implements :class:`deskpool_driver_api.SharedState` over the
platform's key-value client, every key under a per-cluster prefix (see
:mod:`deskpool.clusters.drivers`). Failures of Redis surface as
:class:`~deskpool_driver_api.SharedStateUnavailable`, a transient driver error, so a driver
only ever sees driver errors.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from redis.exceptions import RedisError

from deskpool_driver_api import DriverBusy, SharedStateUnavailable

if TYPE_CHECKING:
    import redis.asyncio as redis

log = logging.getLogger(__name__)

T = TypeVar("T")


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

# KEYS[1]: lock key. ARGV[1]: the holder's token. Deletes the lock only if we still hold it.
_RELEASE_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

#: How often a waiter retries a held lock, at most.
LOCK_RETRY_SECONDS = 0.02


def _milliseconds(ttl: float | None) -> int | None:
    """A ``ttl`` in whole milliseconds, at least 1 (Redis refuses 0); ``None`` for none."""
    return max(1, int(ttl * 1000)) if ttl else None


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode()


class RedisSharedState:
    """:class:`SharedState` in Redis, every key under ``prefix``.

    Locks are Redis keys set with ``NX`` and an expiry, holding a random token; release
    deletes the key only if it still holds that token. Both acquire and release are safe
    against cancellation: a lock is never left held by a cancelled caller for longer than it
    takes Redis to answer.

    :param client: a ``redis.asyncio.Redis`` client (the platform's key-value client).
    :param prefix: prepended to every key and lock name, e.g. ``deskpool:driver:<cluster id>:``.
    """

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self._compare_and_set = client.register_script(_COMPARE_AND_SET)
        self._release_lock = client.register_script(_RELEASE_LOCK)

    def _key(self, key: str) -> str:
        return self.prefix + key

    async def _run(self, what: str, call: Awaitable[T]) -> T:
        """Await one Redis call, mapping its failures and honouring a swallowed cancellation."""
        task = asyncio.current_task()
        cancel_requests = task.cancelling() if task is not None else 0
        try:
            result = await call
        except (RedisError, OSError) as error:
            raise SharedStateUnavailable(f"{what} failed: {error}") from error
        if task is not None and task.cancelling() > cancel_requests:
            # redis-py waits with asyncio.wait_for, which on Python 3.11 can swallow a
            # cancellation arriving with the reply: do not let the caller carry on.
            raise asyncio.CancelledError
        return result

    async def get(self, key: str) -> bytes | None:
        """The value stored under ``key``, or ``None``."""
        return _as_bytes(await self._run("reading driver state", self.client.get(self._key(key))))

    async def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """Store ``value`` under ``key``."""
        px = _milliseconds(ttl)
        await self._run("writing driver state", self.client.set(self._key(key), value, px=px))

    async def delete(self, key: str) -> None:
        """Remove ``key``."""
        await self._run("deleting driver state", self.client.delete(self._key(key)))

    async def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes | None, *, ttl: float | None = None
    ) -> bool:
        """Replace ``key``'s value if it is still ``expected`` (one Lua script, atomic)."""
        args = [
            "0" if expected is None else "1",
            expected or b"",
            "0" if value is None else "1",
            value or b"",
            str(_milliseconds(ttl) or 0),
        ]
        replaced = await self._run(
            "updating driver state", self._compare_and_set(keys=[self._key(key)], args=args)
        )
        return bool(replaced)

    def lock(
        self, name: str, *, ttl: float = 30.0, wait: float = 10.0
    ) -> AbstractAsyncContextManager[None]:
        """A Redis lock named ``name`` (expires after ``ttl`` if its holder dies)."""
        return self._hold(name, ttl, wait)

    async def _release(self, key: str, token: bytes) -> None:
        try:
            await self._release_lock(keys=[key], args=[token])
        except (RedisError, OSError) as error:
            log.warning("releasing driver lock %s failed (it expires by itself): %s", key, error)

    @asynccontextmanager
    async def _hold(self, name: str, ttl: float, wait: float) -> AsyncIterator[None]:
        key = self._key(f"lock:{name}")
        token = secrets.token_hex(16).encode()
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait
        try:
            while not await self._run(
                f"taking driver lock {name!r}",
                self.client.set(key, token, nx=True, px=_milliseconds(ttl) or 1),
            ):
                left = give_up - loop.time()
                if left <= 0:
                    raise DriverBusy(f"shared lock {name!r} is held elsewhere")
                await asyncio.sleep(min(LOCK_RETRY_SECONDS, left))
        except BaseException:
            # Cancelled or failed while taking it: the SET may have succeeded all the same.
            await asyncio.shield(self._release(key, token))
            raise
        try:
            yield
        finally:
            await asyncio.shield(self._release(key, token))
