"""Live event rules without I/O: which ``Last-Event-ID`` Redis accepts, streams per user."""

from __future__ import annotations

import pytest

from deskpool.live.model import (
    AVAILABILITY_EVENT,
    MAX_STREAM_ID_PART,
    LiveEvent,
    StreamSlots,
    valid_stream_id,
    view_for,
)


@pytest.mark.parametrize(
    "stream_id",
    ["0", "0-0", "1795630170721-0", "1795630170721-7", f"{MAX_STREAM_ID_PART}-0", "00-01"],
)
def test_ids_redis_accepts_are_valid(stream_id: str) -> None:
    assert valid_stream_id(stream_id)


@pytest.mark.parametrize(
    "stream_id",
    [
        "",
        "-",
        "nope",
        f"{MAX_STREAM_ID_PART + 1}-0",
        f"0-{MAX_STREAM_ID_PART + 1}",
        f"{MAX_STREAM_ID_PART}-{MAX_STREAM_ID_PART}",
        "\uff11-0",
        "\u0661-0",
        "1_0-0",
        "+1-0",
        " 1-0",
        "1-0\n",
        "1--0",
        "1-2-3",
        "1" * 21 + "-0",
    ],
)
def test_ids_redis_refuses_are_not(stream_id: str) -> None:
    assert not valid_stream_id(stream_id)


def test_each_user_holds_at_most_the_limit_and_gets_slots_back() -> None:
    slots = StreamSlots(2)
    assert slots.take("a")
    assert slots.take("a")
    assert not slots.take("a")
    assert slots.take("b")
    assert slots.held("a") == 2
    slots.give_back("a")
    assert slots.held("a") == 1
    assert slots.take("a")
    slots.give_back("b")
    assert slots.held("b") == 0


def test_a_user_entitled_to_a_pool_hears_its_desktops_change_without_their_details() -> None:
    pool = "00000000-0000-0000-0000-0000000000aa"
    other = "00000000-0000-0000-0000-0000000000bb"
    theirs = LiveEvent(
        "desktop.state",
        "d-1",
        {"pool_id": pool, "name": "lab-001", "state": "ready", "in_session": False},
        owner="someone-else",
    )
    hint = view_for(theirs, frozenset(), "me", entitled_pools={pool})
    assert hint is not None
    assert hint.type == AVAILABILITY_EVENT
    assert hint.body() == {"type": AVAILABILITY_EVENT, "id": pool, "pool_id": pool}
    # Not entitled to the pool: nothing at all.
    assert view_for(theirs, frozenset(), "me", entitled_pools={other}) is None
    # His own desktop, and a reader of pools: the event itself.
    mine = LiveEvent("desktop.state", "d-2", {"pool_id": pool, "state": "starting"}, owner="me")
    assert view_for(mine, frozenset(), "me", entitled_pools={pool}) is mine
    assert view_for(theirs, frozenset({"pools:read"}), "me") is theirs
    # The pool's own changes (a reconciliation pass powered desktops off) are hinted the same way.
    reconciled = LiveEvent("pool.reconciled", pool, {"health": "healthy", "applied": 1})
    passed = view_for(reconciled, frozenset(), "me", entitled_pools={pool})
    assert passed is not None
    assert passed.body() == {"type": AVAILABILITY_EVENT, "id": pool, "pool_id": pool}
    assert view_for(reconciled, frozenset(), "me", entitled_pools={other}) is None
    # Other kinds never turn into hints.
    job = LiveEvent("job.dead", "7", {"pool_id": pool})
    assert view_for(job, frozenset(), "me", entitled_pools={pool}) is None
