"""Keeping the snapshot: replay the journal when the database answers, then refresh.

The worker runs :func:`keep_snapshot` for as long as it runs. Each turn (every
:data:`TURN` seconds) it writes the journal of an outage into the database as soon as it
answers again (:func:`deskpool.outage_brokering.replay.replay_journal`), and refreshes the
snapshot (:func:`deskpool.outage_brokering.snapshot.refresh_snapshot`) every ``interval``
seconds, or at once when a change took access away: never while acts wait to be written, so
a refresh never hides a claim from the database.
"""

from __future__ import annotations

import asyncio
import logging
import time

from redis.exceptions import RedisError

from deskpool.outage_brokering.replay import journal_pending, replay_journal
from deskpool.outage_brokering.snapshot import keys_of, refresh_snapshot, stale
from deskpool.outages import outage_of
from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: Seconds between two looks at the journal and the snapshot's freshness.
TURN = 0.5


async def keep_once(runtime: Runtime, *, refresh: bool) -> bool:
    """One turn: replay what waits, then refresh when asked or stale; whether it refreshed."""
    if await journal_pending(runtime):
        await replay_journal(runtime)
        if await journal_pending(runtime):
            return False
    if not refresh and not await stale(runtime.kv, keys_of(runtime)):
        return False
    return await refresh_snapshot(runtime)


async def keep_snapshot(runtime: Runtime, interval: float) -> None:
    """Keep the snapshot for as long as the task runs (see the module's description)."""
    last = 0.0
    failing: str | None = None
    while True:
        try:
            if await keep_once(runtime, refresh=time.monotonic() - last >= interval):
                last = time.monotonic()
            failing = None
        except asyncio.CancelledError:
            raise
        except (RedisError, OSError, Exception) as error:
            store = outage_of(error)
            if store is None:
                log.exception("keeping the outage snapshot failed")
            elif failing != store:
                log.warning("outage snapshot: the %s is unavailable; trying again", store)
            failing = store or "unknown"
        await asyncio.sleep(TURN)
