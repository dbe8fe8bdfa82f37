"""The key-value store's pause after a failure is not lengthened by failures met while it runs.

As for the database's pause (deskpool.db.bounded, 21c921e): a command sent before the pause began
and failing during it must not push the pause's end further, or a busy API keeps refusing
("not asked again yet") after the store answers again.
"""

from __future__ import annotations

import asyncio
import types
from typing import Any

import pytest
import redis.asyncio as redis
from redis.exceptions import ConnectionError as KvConnectionError
from redis.exceptions import TimeoutError as KvTimeoutError

from deskpool import kv


async def test_a_failure_during_the_pause_does_not_lengthen_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr(kv, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    gates = [asyncio.Event(), asyncio.Event()]

    async def fails(self: Any, *args: Any, **options: Any) -> Any:
        await gates[int(args[1])].wait()
        raise KvTimeoutError("Timeout reading from the store")

    monkeypatch.setattr(redis.Redis, "execute_command", fails)
    client = kv.BoundedRedis()
    first = asyncio.create_task(client.execute_command("GET", "0"))
    second = asyncio.create_task(client.execute_command("GET", "1"))
    await asyncio.sleep(0)
    gates[0].set()
    with pytest.raises(KvTimeoutError):
        await first
    assert client._failed_until == 100.0 + kv.PAUSE_AFTER_FAILURE
    clock[0] = 101.5  # the second command, sent before the pause, fails during it
    gates[1].set()
    with pytest.raises(KvTimeoutError):
        await second
    assert client._failed_until == 100.0 + kv.PAUSE_AFTER_FAILURE
    with pytest.raises(KvConnectionError, match="not asked again yet"):
        await client.execute_command("GET", "0")
    clock[0] = 100.0 + kv.PAUSE_AFTER_FAILURE  # the pause is over: the store is asked again
    gates[0].clear()
    asked = asyncio.create_task(client.execute_command("GET", "0"))
    await asyncio.sleep(0)
    assert not asked.done()
    asked.cancel()


def _raised_from(error: BaseException, cause: BaseException) -> BaseException:
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("error", "busy"),
    [
        # the pool's wait for one of its connections ran out: the store answered
        (_raised_from(KvConnectionError("No connection available."), TimeoutError()), True),
        # connecting was refused, or timed out: the store is away
        (_raised_from(KvConnectionError("Error 111 connecting"), OSError(111, "refused")), False),
        (KvTimeoutError("Timeout connecting to server"), False),
        (KvConnectionError("No connection available."), False),
    ],
)
def test_only_a_wait_for_a_busy_pool_is_told_from_a_store_away(
    error: BaseException, busy: bool
) -> None:
    assert kv.no_connection_in_time(error) is busy
