"""A live event stream is told to reload (``reset``) after events were lost.

An api application runs on a Redis of the test's own. A caller follows ``GET /api/v1/events``;
Redis stops, and an event published meanwhile is lost (the publisher logs it and goes on);
Redis comes back (empty, as a restart without persistence leaves it). The stream must say
``reset`` (read everything again) before the events that follow: the client cannot know what it
missed otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from tests.integration.live.test_event_stream import read_events

from deskpool.live import bus
from deskpool.live.model import LiveEvent
from deskpool.runtime import Runtime
from deskpool.testing.processes import until
from deskpool.testing.pytest_plugin import served
from deskpool.testing.redis_server import PrivateRedis, private_redis

ADMIN = "lost-events-admin"


@pytest.fixture
async def own_redis() -> AsyncIterator[PrivateRedis]:
    async with private_redis() as server:
        yield server


@pytest.fixture
async def api(
    secure_environ: dict[str, str], aiohttp_client: Any, own_redis: PrivateRedis
) -> AsyncIterator[tuple[Any, Runtime]]:
    environ = {
        **secure_environ,
        "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": ADMIN,
        "KVSTORE_ADDR": own_redis.address,
    }
    async with served(environ, aiohttp_client) as (runtime, client):
        yield client, runtime


async def test_a_stream_is_told_to_reset_after_redis_lost_its_events(
    api: tuple[Any, Runtime], own_redis: PrivateRedis, bearer: Callable[..., dict[str, str]]
) -> None:
    client, runtime = api
    admin = bearer(ADMIN, email="lost-events-admin@example.com")
    await client.get("/api/v1/me", headers=admin)  # signed in (cached) before Redis goes
    stream = await client.get("/api/v1/events", headers=admin)
    assert stream.status == 200
    prefix = runtime.config["KVSTORE_KEY_PREFIX"]
    await bus.publish(runtime.kv, prefix, LiveEvent("pool.changed", "p-before"))
    [before] = await read_events(stream, 1)
    assert before["data"]["id"] == "p-before"

    await own_redis.stop()
    assert await bus.publish(runtime.kv, prefix, LiveEvent("pool.changed", "p-lost")) is None
    await asyncio.sleep(2)  # the stream's reader meets the loss
    await own_redis.start()

    async def published_after() -> str | None:
        return await bus.publish(runtime.kv, prefix, LiveEvent("pool.changed", "p-after"))

    await until(published_after, "an event is published again", seconds=10, every=0.2)
    received = await read_events(stream, 2)
    assert [event["event"] for event in received] == ["reset", "pool.changed"]
    assert received[0]["data"] == {"type": "reset"}
    assert received[1]["data"]["id"] == "p-after"
    stream.close()
