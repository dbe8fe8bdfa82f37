"""One contract for drivers' shared state, run against the in-memory fake and the real Redis.

Drivers are unit-tested with :class:`InMemorySharedState` and run on the platform's
:class:`RedisSharedState`: every test here runs against both, so the fake cannot drift from
what Redis does (Redis-only matters, its key prefix and an unreachable server, are in
``test_redis_shared_state.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from deskpool.clusters.shared_state import RedisSharedState
from deskpool.drivers import DriverBusy, InMemorySharedState, SharedState
from deskpool.testing.processes import until

#: ``views()``: another handle on the same shared state (another process's, for Redis).
Views = Callable[[], SharedState]


@pytest.fixture(params=["memory", "redis"])
def views(request: pytest.FixtureRequest, redis_shared_state: RedisSharedState) -> Views:
    """Handles on one shared state: in memory, or in the real Redis under a fresh prefix."""
    if request.param == "memory":
        state = InMemorySharedState()
        return lambda: state
    return lambda: RedisSharedState(redis_shared_state.client, redis_shared_state.prefix)


@pytest.fixture
def state(views: Views) -> SharedState:
    """A handle on the shared state under test."""
    return views()


async def test_get_set_delete(state: SharedState) -> None:
    assert isinstance(state, SharedState)
    assert await state.get("k") is None
    await state.set("k", b"\x00{json}")
    assert await state.get("k") == b"\x00{json}"
    await state.set("k", b"")
    assert await state.get("k") == b""
    await state.delete("k")
    await state.delete("k")
    assert await state.get("k") is None


async def test_values_expire_after_their_ttl(state: SharedState) -> None:
    await state.set("short", b"v", ttl=0.05)
    await state.set("tiny", b"v", ttl=1e-9)
    await state.set("long", b"v", ttl=60)
    assert await state.compare_and_set("swapped", None, b"v", ttl=0.05)

    async def expired() -> bool:
        keys = ("short", "tiny", "swapped")
        return all([await state.get(key) is None for key in keys])

    await until(expired, "the values set with a ttl of 50 ms or less expire")
    assert await state.get("long") == b"v"


async def test_compare_and_set(state: SharedState) -> None:
    assert await state.compare_and_set("k", None, b"1")
    assert not await state.compare_and_set("k", None, b"x")
    assert not await state.compare_and_set("k", b"0", b"x")
    assert await state.compare_and_set("k", b"1", b"2", ttl=60)
    assert await state.get("k") == b"2"
    assert await state.compare_and_set("k", b"2", None)
    assert await state.get("k") is None
    assert not await state.compare_and_set("k", b"2", None)


async def test_compare_and_set_is_atomic(views: Views) -> None:
    async def increment(state: SharedState) -> None:
        while True:
            current = await state.get("counter")
            new = str(int(current or b"0") + 1).encode()
            if await state.compare_and_set("counter", current, new):
                return

    await asyncio.gather(*(increment(views()) for _ in range(20)))
    assert await views().get("counter") == b"20"


async def test_a_lock_is_exclusive_and_a_waiter_gives_up(views: Views) -> None:
    one, other = views(), views()
    async with one.lock("cluster", ttl=10, wait=1):
        with pytest.raises(DriverBusy, match="cluster"):
            async with other.lock("cluster", ttl=10, wait=0.05):
                pytest.fail("the lock was taken twice")
        async with other.lock("another", wait=0.05):
            pass
    async with other.lock("cluster", wait=0.05):
        pass


async def test_a_waiter_gets_the_lock_once_it_is_released(views: Views) -> None:
    one, other = views(), views()
    inside = asyncio.Event()
    release = asyncio.Event()
    order: list[str] = []

    async def holder() -> None:
        async with one.lock("cluster", wait=1):
            inside.set()
            await release.wait()
            order.append("first released")

    task = asyncio.create_task(holder())
    await inside.wait()
    waiting = asyncio.create_task(_take(other, "cluster", order))
    release.set()
    await asyncio.gather(task, waiting)
    assert order == ["first released", "second taken"]


async def _take(state: SharedState, name: str, order: list[str]) -> None:
    async with state.lock(name, wait=10):
        order.append("second taken")


async def test_a_lock_expires_after_its_ttl_and_its_late_holder_releases_nothing(
    views: Views,
) -> None:
    late, other, third = views(), views(), views()
    taken = asyncio.Event()
    leave = asyncio.Event()

    async def second() -> None:
        async with other.lock("cluster", ttl=30, wait=10):
            taken.set()
            await leave.wait()

    async with late.lock("cluster", ttl=0.05, wait=1):
        # The holder hangs past the ttl (as a dead process would): another one takes the lock.
        task = asyncio.create_task(second())
        async with asyncio.timeout(10):
            await taken.wait()
    # The late holder left without releasing what it no longer held.
    with pytest.raises(DriverBusy):
        async with third.lock("cluster", wait=0.05):
            pytest.fail("the lock was taken twice")
    leave.set()
    await task


@pytest.mark.parametrize("operation", ["get", "set", "compare_and_set", "lock"])
async def test_cancellation_is_never_lost_and_never_leaves_a_lock_held(
    state: SharedState, operation: str
) -> None:
    async def work() -> None:
        for _ in range(5):
            if operation == "get":
                await state.get("k")
            elif operation == "set":
                await state.set("k", b"v")
            elif operation == "compare_and_set":
                await state.compare_and_set("k", await state.get("k"), b"v")
            else:
                async with state.lock("cluster", wait=1):
                    await state.get("k")

    # Cancel at every point of the exchange, one step further each time (a round trip is a
    # point where the caller waits, so a cancellation can arrive in the middle of the work).
    cancelled_midway = 0
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
        cancelled_midway += steps > 0
        async with state.lock("cluster", wait=1):
            pass
    assert cancelled_midway, "no operation ever waited: a cancellation could not reach one"
