"""The Redis-backed shared state drivers get from the platform, on the real Redis."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from deskpool.clusters.shared_state import RedisSharedState
from deskpool.drivers import DriverBusy, SharedState, SharedStateUnavailable


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


async def test_compare_and_set_is_atomic(redis_shared_state: RedisSharedState) -> None:
    state = redis_shared_state
    assert await state.compare_and_set("k", None, b"1")
    assert not await state.compare_and_set("k", None, b"x")
    assert not await state.compare_and_set("k", b"0", b"x")
    assert await state.compare_and_set("k", b"1", b"2", ttl=60)
    assert await state.get("k") == b"2"
    assert await state.compare_and_set("k", b"2", None)
    assert await state.get("k") is None

    async def increment() -> None:
        while True:
            current = await state.get("counter")
            new = str(int(current or b"0") + 1).encode()
            if await state.compare_and_set("counter", current, new):
                return

    await asyncio.gather(*(increment() for _ in range(20)))
    assert await state.get("counter") == b"20"


async def test_lock_is_exclusive_across_clients(
    redis_shared_state: RedisSharedState, redis_client: redis.Redis, key_prefix: str
) -> None:
    other = RedisSharedState(redis_client, key_prefix)
    async with redis_shared_state.lock("cluster", ttl=10, wait=1):
        with pytest.raises(DriverBusy, match="cluster"):
            async with other.lock("cluster", ttl=10, wait=0.05):
                pytest.fail("the lock was taken twice")
        async with other.lock("another", wait=0.05):
            pass
    async with other.lock("cluster", wait=0.05):
        pass


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


@pytest.mark.parametrize("operation", ["get", "set", "lock"])
async def test_cancellation_is_never_lost_and_never_leaves_a_lock_held(
    redis_shared_state: RedisSharedState, operation: str
) -> None:
    state = redis_shared_state

    async def work() -> None:
        for _ in range(5):
            if operation == "get":
                await state.get("k")
            elif operation == "set":
                await state.set("k", b"v")
            else:
                async with state.lock("cluster", wait=1):
                    await state.get("k")

    # Cancel at every point of the exchange with Redis, one step further each time.
    for steps in range(60):
        task = asyncio.create_task(work())
        for _ in range(steps):
            await asyncio.sleep(0)
        if task.done():
            await task
            continue
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with state.lock("cluster", wait=1):
            pass
