"""Fixtures for driver integration tests: the real Redis, one key prefix per test."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as redis

from deskpool.clusters.shared_state import RedisSharedState


@pytest.fixture
async def redis_client(test_servers: Any) -> AsyncIterator[redis.Redis]:
    """A client of the test Redis (``test_servers`` fails, never skips, when it is down)."""
    host, _, port = test_servers.kv_addr.rpartition(":")
    client = redis.Redis(host=host, port=int(port), socket_connect_timeout=3)
    yield client
    await client.aclose()


@pytest.fixture
def key_prefix() -> str:
    """A key prefix no other test uses."""
    return f"deskpool-test-driver-{secrets.token_hex(6)}:"


@pytest.fixture
async def redis_shared_state(
    redis_client: redis.Redis, key_prefix: str
) -> AsyncIterator[RedisSharedState]:
    """Shared state in the real Redis under :func:`key_prefix`; its keys are removed after."""
    yield RedisSharedState(redis_client, key_prefix)
    keys = [key async for key in redis_client.scan_iter(match=f"{key_prefix}*")]
    if keys:
        await redis_client.delete(*keys)
