"""How a serving process (``deskpool run``, ``deskpool dev``) runs its event loop.

The cyclic garbage collector is settled once the process has started (:func:`settle_collector`):
everything loaded at start (modules, plugins, configuration) is moved out of the collector's
sight (``gc.freeze``), and a collection of the youngest objects waits for
:data:`YOUNG_THRESHOLD` allocations instead of Python's 700. With Python's settings, a cold
sign-in's few thousand short-lived objects set off several young collections each, and every
full collection walked all that was loaded at start: at 9 a.m. 100 to 330 ms of every 4 s of
a busy api went to the collector (read with ``gc.callbacks``), in pauses of up to 150 ms
(``bench/performance-notes.md`` part C, fifth session). Reference counting still frees almost
everything at once; the collector is only for cycles, and it still runs.

The loop is uvloop's (libuv's, in C) rather than asyncio's own: in the 9 a.m. storm (issue 39)
the api spent 15 % less CPU, the gateway 12 % and the worker 12 % (``bench/performance-notes.md``
part C, tenth session), on two cores where every process shares them. Measured earlier and not
kept then, it gave the cold ``GET /me`` a p99 of 0.4 s against 0.08 s: uvloop runs a new
request sooner, and asyncpg's pool (an :class:`asyncio.Queue`) let it take a connection from a
caller already woken for it, who queued again at the back. Turns at a connection are first
come, first served now (:class:`deskpool.db.bounded.Turns`): 0.07 s on uvloop.
"""

from __future__ import annotations

import gc
from collections.abc import Coroutine
from typing import Any

import uvloop

#: Allocations (net of deallocations) before the youngest generation is collected. Python's
#: default, 700, is a few requests' worth; objects freed by reference counting before it is
#: reached are never looked at.
YOUNG_THRESHOLD = 20_000
#: Young collections per middle-generation collection, and middle per full one (Python's
#: defaults are 10 and 10): full collections still happen, on Python's own rule that the
#: objects waiting for one are at least a quarter of those already old.
MIDDLE_THRESHOLD = 20
OLD_THRESHOLD = 10


def settle_collector() -> None:
    """Collect once, freeze what start-up left, and raise the young generation's threshold."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)


def run_serving(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` to its end on uvloop's event loop, the collector settled first."""
    settle_collector()
    uvloop.run(main)
