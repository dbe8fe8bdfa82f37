"""Ending a session finds its read-only viewers by an index, not by reading every open session.

:func:`deskpool.sessions.store.open_shadows_of` runs at every session's end (to close the
viewers of the desktop being left). No index served ``shadow_of = $1``: PostgreSQL read every
open session each time (0.1 ms at 1,000; at 5 p.m., as many times as sessions end). Checked in
the plan PostgreSQL chooses with thousands of open sessions, none of them shadowed.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from deskpool.runtime import Runtime
from deskpool.sessions import store

OPEN_SESSIONS = 3000


class _Explaining:
    """A connection that also keeps the plan of every statement it is given (``fetch``)."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.plans: list[dict[str, Any]] = []

    async def fetch(self, query: str, *args: Any) -> Any:
        raw = await self.connection.fetchval(f"EXPLAIN (FORMAT JSON) {query}", *args)
        self.plans.append(json.loads(raw)[0]["Plan"])
        return await self.connection.fetch(query, *args)


def _scans(plan: dict[str, Any]) -> list[tuple[str, str | None]]:
    found = [(plan["Node Type"], plan.get("Index Name"))]
    for child in plan.get("Plans", []):
        found += _scans(child)
    return found


async def test_a_sessions_viewers_are_found_by_an_index(pools_runtime: Runtime) -> None:
    watched = uuid.uuid4()
    async with pools_runtime.db.acquire() as connection, connection.transaction():
        await connection.execute(
            "INSERT INTO desktop_sessions (id, user_id, desktop_id, pool_id, desktop_name, "
            "protocol, gateway_id) SELECT CASE WHEN n = 1 THEN $1 ELSE gen_random_uuid() END, "
            "gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'desk-' || n, 'vnc', "
            "'gw-shadow' FROM generate_series(1, $2) AS n",
            watched,
            OPEN_SESSIONS,
        )
        viewer = await connection.fetchval(
            "INSERT INTO desktop_sessions (user_id, desktop_id, pool_id, desktop_name, protocol, "
            "gateway_id, read_only, shadow_of) SELECT user_id, desktop_id, pool_id, "
            "desktop_name, protocol, gateway_id, true, id FROM desktop_sessions WHERE id = $1 "
            "RETURNING id",
            watched,
        )
        await connection.execute("ANALYZE desktop_sessions")
        explaining = _Explaining(connection)
        found = await store.open_shadows_of(explaining, watched)
        await connection.execute("DELETE FROM desktop_sessions WHERE gateway_id = 'gw-shadow'")

    assert found == [viewer]
    (plan,) = explaining.plans
    scans = _scans(plan)
    assert ("Seq Scan", None) not in scans, scans
    assert any(name == "desktop_sessions_shadows" for _, name in scans), scans
