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

from deskpool.identity.authenticator import generation_key
from deskpool.outage_brokering.replay import journal_pending, replay_journal
from deskpool.outage_brokering.snapshot import is_fresh, keys_of, refresh_snapshot, stale
from deskpool.outages import outage_of
from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: Seconds between two looks at the journal and the snapshot's freshness.
TURN = 0.5
#: Seconds between two reads of every remembered principal (between them, a refresh reads
#: again only those a change took access from).
EVERY_PRINCIPAL = 60.0


async def keep_once(runtime: Runtime, *, refresh: bool, every_principal: bool = True) -> bool:
    """One turn: replay what waits, then refresh when asked or stale; whether it refreshed."""
    if await journal_pending(runtime):
        await replay_journal(runtime)
        if await journal_pending(runtime):
            return False
    kv, keys = runtime.kv, keys_of(runtime)
    if not refresh and not await stale(kv, keys):
        return False
    # A change that may concern anyone: every principal is read again.
    everyone = every_principal or not await is_fresh(kv, keys)
    return await refresh_snapshot(runtime, every_principal=everyone)


async def keep_snapshot(runtime: Runtime, interval: float) -> None:
    """Keep the snapshot for as long as the task runs (see the module's description).

    Every principal is read again once every :data:`EVERY_PRINCIPAL` seconds, and at once
    after an identity change (a membership, a grant, a role, a binding: the identity
    generation grew).
    """
    last = every = 0.0
    seen: bytes | str | None = None
    failing: str | None = None
    key = generation_key(runtime.config)
    while True:
        try:
            now = time.monotonic()
            generation = await runtime.kv.get(key)
            full = now - every >= EVERY_PRINCIPAL or generation != seen
            due = now - last >= interval or generation != seen
            if await keep_once(runtime, refresh=due, every_principal=full):
                last = now
                if full:
                    every, seen = now, generation
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
