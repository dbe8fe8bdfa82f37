"""The key-value store (Redis): what may be lost or rebuilt.

Caches (JWKS, verified tokens, effective permissions), rate limits, single-use connection-token
ids, short locks and the pub/sub channel for live events live here. Nothing that must not be
lost lives only in Redis.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import redis.asyncio as redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from deskpool.errors import StartupError

if TYPE_CHECKING:
    from deskpool.config import Config, HostPort


def kv_client(config: Config) -> redis.Redis:
    """A Redis client from ``KVSTORE_ADDR``, ``KVSTORE_PASSWORD`` and ``KVSTORE_DB``."""
    address: HostPort = config["KVSTORE_ADDR"]
    return redis.Redis(
        host=address.host,
        port=address.port,
        password=config["KVSTORE_PASSWORD"] or None,
        db=config["KVSTORE_DB"],
        socket_connect_timeout=5,
        socket_timeout=10,
        health_check_interval=30,
    )


async def connect_kv(config: Config) -> redis.Redis:
    """Connect to Redis and check it answers.

    :raises StartupError: naming the address (never the password) when it cannot be reached.
    """
    client = kv_client(config)
    try:
        await client.ping()
    except (RedisError, OSError) as error:
        await client.aclose()
        raise StartupError(
            f"cannot reach the key-value store at {config['KVSTORE_ADDR']} (KVSTORE_ADDR): "
            f"{type(error).__name__}: {error}"
        ) from None
    return client


@contextlib.asynccontextmanager
async def subscription(client: redis.Redis, channel: str) -> AsyncIterator[PubSub]:
    """A pub/sub connection subscribed to ``channel``, closed on the way out, however it ends.

    Errors of subscribing and reading propagate (the listeners retry); an error while closing
    a connection that was lost is ignored: there is nothing left to close.
    """
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(channel)
        yield pubsub
    finally:
        with contextlib.suppress(RedisError, OSError):
            await pubsub.aclose()  # type: ignore[no-untyped-call]
