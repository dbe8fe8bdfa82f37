"""The journal of an outage is written into the database once, however often it is replayed.

Against the real PostgreSQL and Redis: an act is journaled, replayed, then applied again as a
replay cut short before it removed the entry would apply it; the database holds it once.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from deskpool.events import AuditEvent
from deskpool.outage_brokering import claims, replay
from deskpool.outage_brokering.model import Act
from deskpool.outage_brokering.snapshot import keys_of


async def test_an_act_replayed_twice_is_written_once_and_leaves_the_journal(runtime: Any) -> None:
    keys = keys_of(runtime)
    marker = str(uuid.uuid4())
    event = AuditEvent(
        action="auth.denied",
        actor="someone",
        resource_type="pools",
        resource_id=None,
        outcome="denied",
        occurred_at=datetime.now(UTC),
        details={"marker": marker},
    )
    await claims.journal_audit(runtime.kv, keys, event)
    entry_id, fields = (await runtime.kv.xrange(keys.journal))[0]
    act = Act.of_entry(entry_id, fields)

    assert await replay.replay_journal(runtime) == 1
    assert await runtime.kv.xlen(keys.journal) == 0
    async with runtime.db.acquire() as connection:
        # A replay that stopped before removing the entry applies it again: nothing changes.
        assert await replay._apply_once(runtime, connection, act) is False
        rows = await connection.fetch(
            "SELECT occurred_at, details FROM audit_events WHERE details->>'marker' = $1", marker
        )
        applied = await connection.fetchval(
            "SELECT kind FROM outage_journal WHERE entry_id = $1", act.entry_id
        )
    assert len(rows) == 1
    assert applied == "audit"
    assert rows[0]["occurred_at"] == event.occurred_at
    assert await replay.replay_journal(runtime) == 0
