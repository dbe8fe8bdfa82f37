"""The per-user limit of live event streams, held across every api process through Redis.

``API_EVENT_STREAMS_PER_USER`` streams per user, whichever processes serve them. Each open
stream holds a slot: a member of the user's sorted set in Redis (``<prefix>streams:<user>``)
whose score is when it lapses, on Redis's clock. A stream renews its slot every third of
:data:`SLOT_SECONDS` while it lasts and removes it when it ends; the slots of a process that
died without ending its streams lapse within :data:`SLOT_SECONDS`, and taking a slot first drops
the lapsed ones, so nothing leaks.

While Redis does not answer, each process still holds the limit for its own streams (the count
it keeps in memory, :class:`deskpool.live.model.StreamSlots`, checked first): a user may then
hold the limit in each process, never more, and a stream is never refused for the outage alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import redis.asyncio as redis
from redis.exceptions import RedisError

from deskpool.live.model import StreamSlots

log = logging.getLogger(__name__)

#: How long a slot lasts without being renewed, in seconds.
SLOT_SECONDS = 60.0

_TAKE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"""

_RENEW = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"""


@dataclass(frozen=True)
class StreamSlot:
    """One open stream's slot."""

    user_id: str
    slot_id: str


class SharedStreamSlots:
    """Slots of live event streams per user, shared by every api process (see the module).

    :param kv: the Redis client.
    :param key_prefix: ``KVSTORE_KEY_PREFIX``.
    :param per_user: ``API_EVENT_STREAMS_PER_USER``.
    :param slot_seconds: how long a slot lasts unrenewed.
    """

    def __init__(
        self, kv: redis.Redis, key_prefix: str, per_user: int, slot_seconds: float = SLOT_SECONDS
    ) -> None:
        self.per_user = per_user
        self.slot_seconds = slot_seconds
        self.local = StreamSlots(per_user)
        self._prefix = f"{key_prefix}streams:"
        self._take = kv.register_script(_TAKE)
        self._renew = kv.register_script(_RENEW)
        self._kv = kv

    def _key(self, user_id: str) -> str:
        return self._prefix + user_id

    async def take(self, user_id: str) -> StreamSlot | None:
        """A slot for one more stream of ``user_id``; ``None`` when the user holds them all."""
        if not self.local.take(user_id):
            return None
        slot = StreamSlot(user_id, uuid.uuid4().hex)
        try:
            taken = await self._take(
                keys=[self._key(user_id)],
                args=[int(self.slot_seconds * 1000), self.per_user, slot.slot_id],
            )
        except (RedisError, OSError) as error:
            log.warning(
                "live event stream slots are counted per process: the key-value store did not "
                "answer (%s)",
                type(error).__name__,
            )
            return slot
        if not int(taken):
            self.local.give_back(user_id)
            return None
        return slot

    async def renew(self, slot: StreamSlot) -> None:
        """Make ``slot`` last :attr:`slot_seconds` more (taken again if it lapsed)."""
        with contextlib.suppress(RedisError, OSError):
            await self._renew(
                keys=[self._key(slot.user_id)],
                args=[int(self.slot_seconds * 1000), slot.slot_id],
            )

    async def give_back(self, slot: StreamSlot) -> None:
        """The stream of ``slot`` ended."""
        self.local.give_back(slot.user_id)
        with contextlib.suppress(RedisError, OSError):
            await self._kv.zrem(self._key(slot.user_id), slot.slot_id)

    @contextlib.asynccontextmanager
    async def held(self, slot: StreamSlot) -> AsyncIterator[None]:
        """Renew ``slot`` while the block runs, and give it back at the end."""

        async def renewing() -> None:
            while True:
                await asyncio.sleep(self.slot_seconds / 3)
                await self.renew(slot)

        renewer = asyncio.create_task(renewing(), name="live-stream-slot")
        try:
            yield
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            await self.give_back(slot)
