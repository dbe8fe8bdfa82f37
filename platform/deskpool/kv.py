"""The key-value store (Redis): what may be lost or rebuilt.

Caches (JWKS, verified tokens, effective permissions), rate limits, single-use connection-token
ids, short locks and the pub/sub channel for live events live here. Nothing that must not be
lost lives only in Redis.

Every command is bounded: the client waits ``KVSTORE_TIMEOUT`` (about a second) to connect and
as long for an answer, then fails with :class:`redis.exceptions.TimeoutError`. A store that
stopped answering (a frozen server accepts connections and never replies) would still cost every
command its full bound, and a request makes several; so once a command timed out or could not
connect, :class:`BoundedRedis` fails the commands of the next :data:`PAUSE_AFTER_FAILURE`
seconds at once (:class:`redis.exceptions.ConnectionError`), and then asks the store again. The
callers' degraded behaviour (requests served without rate limits, a live event lost, a 503 that
names the store) comes at once rather than after a hang.

Pub/sub subscriptions wait for messages without a bound (redis-py reads them without the socket
timeout); their subscribing is bounded like any command, and their listeners reconnect.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import redis.asyncio as redis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as KvConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as KvTimeoutError

from deskpool.errors import StartupError

if TYPE_CHECKING:
    from deskpool.config import Config, HostPort


log = logging.getLogger(__name__)

#: Seconds during which commands fail at once after one timed out or could not connect.
PAUSE_AFTER_FAILURE = 2.0


class BoundedRedis(redis.Redis):
    """A Redis client that fails fast for a moment after the store stopped answering.

    See the module: after a command times out or cannot connect, the commands of the next
    :data:`PAUSE_AFTER_FAILURE` seconds raise :class:`redis.exceptions.ConnectionError` without
    being sent.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._failed_until = 0.0

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        """Run one command, unless the store failed to answer a moment ago."""
        if time.monotonic() < self._failed_until:
            raise KvConnectionError(
                "the key-value store did not answer a moment ago; not asked again yet"
            )
        try:
            # Named, not super(): mypy's untyped_calls_exclude (pyproject) knows redis's
            # untyped methods by their names.
            return await redis.Redis.execute_command(self, *args, **options)
        except (KvTimeoutError, KvConnectionError, OSError) as error:
            # A failure met while the pause runs (a command sent before it began) does not
            # lengthen it, as for the database's (deskpool.db.bounded): a busy API would
            # otherwise keep refusing long after the store answers again.
            if time.monotonic() >= self._failed_until:
                log.warning(
                    "the key-value store did not answer (%s: %s); commands fail at once for %.0f s",
                    type(error).__name__,
                    error,
                    PAUSE_AFTER_FAILURE,
                )
                self._failed_until = time.monotonic() + PAUSE_AFTER_FAILURE
            raise


def kv_client(config: Config) -> BoundedRedis:
    """A Redis client from ``KVSTORE_ADDR``, ``KVSTORE_PASSWORD`` and ``KVSTORE_DB``.

    ``KVSTORE_TIMEOUT`` bounds connecting and every command's answer.
    """
    address: HostPort = config["KVSTORE_ADDR"]
    bound = config.duration("KVSTORE_TIMEOUT")
    return BoundedRedis(
        host=address.host,
        port=address.port,
        password=config["KVSTORE_PASSWORD"] or None,
        db=config["KVSTORE_DB"],
        socket_connect_timeout=bound,
        socket_timeout=bound,
        health_check_interval=30,
        # Once more on a connection found dead (the store restarted), never after a timeout:
        # redis-py's default (three more, on timeouts too) made one command cost 4 bounds.
        retry=Retry(NoBackoff(), 1, supported_errors=(KvConnectionError,)),
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
            await pubsub.aclose()
