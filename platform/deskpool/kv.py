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

A process keeps at most :data:`KV_CONNECTIONS` connections to the store; a command that finds
them all in use waits for one, as long as ``KVSTORE_TIMEOUT`` at most, and then fails without
the pause: the store answered, the process is busy (at 9 a.m. a thousand openings at once
each send a few commands).

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
from redis.asyncio import BlockingConnectionPool
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.driver_info import DriverInfo
from redis.exceptions import ConnectionError as KvConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as KvTimeoutError

from deskpool.errors import StartupError

if TYPE_CHECKING:
    from deskpool.config import Config, HostPort


log = logging.getLogger(__name__)

#: Seconds during which commands fail at once after one timed out or could not connect.
PAUSE_AFTER_FAILURE = 2.0
#: Connections to the store a process keeps at most (redis-py's own default number). redis-py's
#: default pool refuses a command at once when they are all in use, which a burst of requests
#: does: the pause above then failed every command for 2 s (issue 39). Commands wait for one
#: instead (:class:`redis.asyncio.BlockingConnectionPool`).
KV_CONNECTIONS = 100
#: What the pool raises when no connection came back within its wait (redis-py's message).
_NO_CONNECTION = "No connection available."


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
            # Every connection busy with commands the store answers is not the store's fault
            # (a frozen store times those commands out, and they start the pause).
            if not no_connection_in_time(error):
                self._store_failed(error)
            raise

    def _store_failed(self, error: BaseException) -> None:
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


def no_connection_in_time(error: BaseException) -> bool:
    """Whether ``error`` is the pool's: no connection came back within its wait.

    :class:`redis.asyncio.BlockingConnectionPool` raises a plain ``ConnectionError`` from the
    ``TimeoutError`` of its wait; connecting to a store that does not answer raises redis's
    own ``TimeoutError`` instead, and one that refuses a ``ConnectionError`` from an ``OSError``.
    """
    return (
        type(error) is KvConnectionError
        and isinstance(error.__cause__, TimeoutError)
        and str(error) == _NO_CONNECTION
    )


def kv_client(config: Config) -> BoundedRedis:
    """A Redis client from ``KVSTORE_ADDR``, ``KVSTORE_PASSWORD`` and ``KVSTORE_DB``.

    ``KVSTORE_TIMEOUT`` bounds connecting and every command's answer.
    """
    address: HostPort = config["KVSTORE_ADDR"]
    bound = config.duration("KVSTORE_TIMEOUT")
    pool = BlockingConnectionPool(
        # What redis-py names itself to the store with, its version read from the package's
        # metadata once here rather than for each connection the pool opens.
        driver_info=DriverInfo(),
        max_connections=KV_CONNECTIONS,
        timeout=bound,
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
    client = BoundedRedis(connection_pool=pool)
    client.auto_close_connection_pool = True  # as redis-py's from_pool: closed with the client
    return client


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
