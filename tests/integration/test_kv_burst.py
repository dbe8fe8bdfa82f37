"""A burst of commands larger than the key-value store's pool waits for a connection.

redis-py's pool refuses a command at once (``MaxConnectionsError``) when all its connections
(100) are in use. The client took that for a store that does not answer and failed every
command of the next 2 s at once: at 9 a.m. every opening lost its notes to the outage
snapshot (the desktop it handed out stayed "ready" there), live events were dropped and rate
limiting was suspended, with two warnings logged per opening (issue 39, seen with
``bench/openings_alone.py``: 2,002 warnings for 1,000 openings). Against the real Redis.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import secrets
from collections.abc import Callable
from typing import Any

import pytest
import redis.utils
from redis.exceptions import ConnectionError as KvConnectionError

from deskpool import kv

#: More commands at once than the pool has connections.
BURST = 3 * kv.KV_CONNECTIONS


async def test_a_burst_larger_than_the_pool_is_served_without_a_pause(
    make_config: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    client = kv.kv_client(make_config().config)
    key = f"deskpool-test-burst-{secrets.token_hex(4)}"
    try:
        with caplog.at_level(logging.WARNING, logger="deskpool.kv"):
            counted = await asyncio.gather(*(client.incr(key) for _ in range(BURST)))
        assert sorted(counted) == list(range(1, BURST + 1))
        assert client._failed_until == 0.0
        assert not [r for r in caplog.records if r.name == "deskpool.kv"]
        # The pool kept its bound: no more connections than it may open.
        assert client.connection_pool.max_connections == kv.KV_CONNECTIONS
        opened = client.connection_pool._available_connections
        assert 0 < len(opened) <= kv.KV_CONNECTIONS
    finally:
        await client.delete(key)
        await client.aclose()


async def test_a_command_that_finds_no_connection_in_time_fails_without_a_pause(
    make_config: Callable[..., Any],
) -> None:
    """Waiting for a connection is bounded by ``KVSTORE_TIMEOUT``; the store did answer."""
    client = kv.kv_client(make_config(KVSTORE_TIMEOUT="200ms").config)
    pool = client.connection_pool
    held = [await pool.get_connection() for _ in range(kv.KV_CONNECTIONS)]
    try:
        with pytest.raises(KvConnectionError, match="No connection available"):
            await client.get("deskpool-test-burst")
        assert client._failed_until == 0.0
    finally:
        for connection in held:
            await pool.release(connection)
    assert await client.get("deskpool-test-burst-absent") is None
    await client.aclose()


async def test_new_connections_do_not_each_read_the_librarys_metadata(
    make_config: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py names itself to the store on every new connection (``CLIENT SETINFO``).

    Its version comes from the package's metadata on disk, read once per client when the
    client makes its pool, but once per connection for a pool made apart: in a burst the
    pool opens its connections at once, each paying for the read (py-spy, issue 39).
    """
    reads = []

    def counted() -> str:
        reads.append(1)
        return importlib.metadata.version("redis")

    monkeypatch.setattr(redis.utils, "get_lib_version", counted)
    client = kv.kv_client(make_config().config)
    try:
        await asyncio.gather(*(client.ping() for _ in range(20)))
        assert len(client.connection_pool._available_connections) > 1
        assert len(reads) <= 1
    finally:
        await client.aclose()
