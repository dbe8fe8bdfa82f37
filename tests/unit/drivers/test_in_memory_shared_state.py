"""The in-memory shared state that driver unit tests use (the Redis one: integration tests)."""

from __future__ import annotations

import asyncio

import pytest

from deskpool.drivers import DriverBusy, InMemorySharedState, SharedState


async def test_get_set_delete() -> None:
    state = InMemorySharedState()
    assert isinstance(state, SharedState)
    assert await state.get("k") is None
    await state.set("k", b"v")
    assert await state.get("k") == b"v"
    await state.delete("k")
    await state.delete("k")
    assert await state.get("k") is None


async def test_values_expire() -> None:
    state = InMemorySharedState()
    await state.set("k", b"v", ttl=1e-9)
    assert await state.get("k") is None


async def test_compare_and_set() -> None:
    state = InMemorySharedState()
    assert await state.compare_and_set("k", None, b"1")
    assert not await state.compare_and_set("k", None, b"2")
    assert not await state.compare_and_set("k", b"0", b"2")
    assert await state.compare_and_set("k", b"1", b"2")
    assert await state.get("k") == b"2"
    assert await state.compare_and_set("k", b"2", None)
    assert await state.get("k") is None


async def test_lock_excludes_and_times_out() -> None:
    state = InMemorySharedState()
    inside = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with state.lock("cluster"):
            inside.set()
            await release.wait()

    task = asyncio.create_task(holder())
    await inside.wait()
    with pytest.raises(DriverBusy, match="cluster"):
        async with state.lock("cluster", wait=0.01):
            pytest.fail("the lock was taken twice")
    async with state.lock("other", wait=0.01):
        pass
    release.set()
    await task
    async with state.lock("cluster", wait=0.01):
        pass
