"""Turns at a pool's connections (:class:`deskpool.db.bounded.Turns`): first come, first served.

A turn is a connection: one lost to a cancelled or timed-out waiter would leave the pool a
connection short for good, and a burst would then wait out its bound on connections nobody
holds. So every way a wait ends gives its turn on or takes none.
"""

from __future__ import annotations

import asyncio

import pytest

from deskpool.db.bounded import Turns


async def test_turns_are_given_in_the_order_asked() -> None:
    turns = Turns(1)
    served: list[str] = []
    await turns.take()

    async def caller(name: str) -> None:
        await turns.take()
        served.append(name)
        turns.give_back()

    first = asyncio.create_task(caller("first"))
    await asyncio.sleep(0)
    later = asyncio.create_task(caller("later"))  # runs before the waiter wakes up
    turns.give_back()
    await asyncio.gather(first, later)

    assert served == ["first", "later"]
    assert turns.free == 1


async def test_a_waiter_cancelled_while_waiting_takes_no_turn() -> None:
    turns = Turns(1)
    await turns.take()
    waiting = asyncio.create_task(turns.take())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    turns.give_back()

    assert turns.free == 1
    assert turns.take_at_once()


async def test_a_turn_given_to_a_waiter_cancelled_before_it_resumed_goes_to_the_next() -> None:
    turns = Turns(1)
    await turns.take()
    given = asyncio.create_task(turns.take())
    next_one = asyncio.create_task(turns.take())
    await asyncio.sleep(0)
    turns.give_back()  # to ``given``, which has not run yet
    given.cancel()
    with pytest.raises(asyncio.CancelledError):
        await given
    await asyncio.wait_for(next_one, 1)

    assert turns.free == 0  # ``next_one`` holds the only turn
    turns.give_back()
    assert turns.free == 1


async def test_a_wait_bounded_by_a_timeout_leaves_the_turns_whole() -> None:
    turns = Turns(2)
    await turns.take()
    await turns.take()
    for _ in range(3):
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await turns.take()
    turns.give_back()
    turns.give_back()

    assert turns.free == 2
