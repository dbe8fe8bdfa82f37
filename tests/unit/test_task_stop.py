"""Stopping a task that swallowed a cancel (deskpool.task_stop)."""

from __future__ import annotations

import asyncio
import contextlib

from deskpool.task_stop import cancel_all_until_done, cancel_until_done


async def _swallows_one_cancel(turns: list[int]) -> None:
    """A loop whose first cancel is swallowed below it, as a library's cleanup can."""
    swallowed = False
    while True:
        turns.append(1)
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed = True


async def test_a_plain_cancel_and_await_would_hang_on_such_a_task() -> None:
    turns: list[int] = []
    task = asyncio.create_task(_swallows_one_cancel(turns))
    await asyncio.sleep(0.02)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=0.3)
    assert not done  # the case this module exists for
    assert task.cancelling() == 1
    await cancel_until_done(task)
    assert task.cancelled()


async def test_a_task_that_swallows_a_cancel_is_stopped() -> None:
    turns: list[int] = []
    task = asyncio.create_task(_swallows_one_cancel(turns))
    await asyncio.sleep(0.02)
    await asyncio.wait_for(cancel_until_done(task), timeout=2)
    assert task.cancelled()


async def test_a_failed_task_is_consumed_and_a_finished_one_left_alone() -> None:
    async def fails() -> None:
        raise RuntimeError("boom")

    failed = asyncio.create_task(fails())
    finished = asyncio.create_task(asyncio.sleep(0))
    await asyncio.sleep(0.01)
    await cancel_all_until_done([failed, finished])
    assert isinstance(failed.exception(), RuntimeError)
    assert finished.result() is None
    await cancel_until_done(None)


async def test_a_task_that_ignores_every_cancel_is_given_up_on_after_its_patience() -> None:
    released = asyncio.Event()

    async def stubborn() -> None:
        while not released.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.01)

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0.01)
    started = asyncio.get_running_loop().time()
    await cancel_until_done(task, patience=0.5)
    assert 0.4 < asyncio.get_running_loop().time() - started < 1.5
    assert not task.done()
    released.set()
    await asyncio.wait_for(task, timeout=1)
