"""The serving processes' collector settings (:mod:`deskpool.serving_loop`)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest
import uvloop

from deskpool.serving_loop import (
    MIDDLE_THRESHOLD,
    OLD_THRESHOLD,
    YOUNG_THRESHOLD,
    run_serving,
)


@pytest.fixture
def collector_restored() -> Iterator[None]:
    """The collector's thresholds and frozen objects put back after the test."""
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


class Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.mark.usefixtures("collector_restored")
def test_a_serving_process_runs_with_start_up_frozen_and_young_collections_rarer() -> None:
    seen: dict[str, object] = {}
    loaded_at_start = Cycle()

    async def main() -> None:
        seen["thresholds"] = gc.get_threshold()
        seen["frozen"] = gc.get_freeze_count()
        seen["walked by collections"] = any(
            thing is loaded_at_start for age in (0, 1, 2) for thing in gc.get_objects(age)
        )
        # A cycle made while serving is still collected: the collector runs, only less often.
        garbage = Cycle()
        gone = weakref.ref(garbage)
        del garbage
        gc.collect()
        seen["cycle collected"] = gone() is None

    run_serving(main())

    assert seen["thresholds"] == (YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
    assert isinstance(seen["frozen"], int)
    assert seen["frozen"] > 0
    # What existed at start is in the permanent generation, out of every collection's walk.
    assert seen["walked by collections"] is False
    assert seen["cycle collected"] is True


@pytest.mark.usefixtures("collector_restored")
def test_a_serving_process_runs_on_uvloop() -> None:
    seen: dict[str, object] = {}

    async def main() -> None:
        seen["loop"] = asyncio.get_running_loop()

    run_serving(main())

    assert isinstance(seen["loop"], uvloop.Loop)
