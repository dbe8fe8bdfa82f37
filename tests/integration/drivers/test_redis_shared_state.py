"""What only the Redis-backed shared state has: its key prefix, its expiries, a lost server.

The behaviour drivers rely on is the contract in ``test_shared_state_contract.py``, run against
this and the in-memory fake alike.
"""

from __future__ import annotations

import pytest
import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from deskpool.clusters.shared_state import RedisSharedState
from deskpool.drivers import SharedState, SharedStateUnavailable


async def test_get_set_delete_under_the_prefix(
    redis_shared_state: RedisSharedState, redis_client: redis.Redis, key_prefix: str
) -> None:
    state: SharedState = redis_shared_state
    assert await state.get("cluster") is None
    await state.set("cluster", b"\x00{json}")
    assert await state.get("cluster") == b"\x00{json}"
    assert await redis_client.get(f"{key_prefix}cluster") == b"\x00{json}"
    await state.delete("cluster")
    assert await state.get("cluster") is None


async def test_values_expire(
    redis_shared_state: RedisSharedState, redis_client: redis.Redis, key_prefix: str
) -> None:
    await redis_shared_state.set("token", b"t", ttl=30)
    assert 0 < await redis_client.pttl(f"{key_prefix}token") <= 30_000


async def test_an_unreachable_redis_is_a_transient_driver_error(key_prefix: str) -> None:
    client = redis.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )
    state = RedisSharedState(client, key_prefix)
    try:
        with pytest.raises(SharedStateUnavailable) as raised:
            await state.get("cluster")
        assert raised.value.retryable
        with pytest.raises(SharedStateUnavailable):
            async with state.lock("cluster", wait=0.1):
                pass
    finally:
        await client.aclose()
