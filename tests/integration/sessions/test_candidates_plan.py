"""An opening reads the open sessions once: to count them, never to look for one desktop's.

The candidates statement (:func:`deskpool.sessions.store_opening.candidates_sql`) counts the
desktops with a session (the license's limit) and says whether the desktop it chose has one.
asyncpg keeps the statement prepared for the connection's life; after five runs PostgreSQL
plans it once for all (a generic plan) from the statistics it has then. At 9 a.m. they are of
the night before, when every session had ended: an open session looks rare, and the desktop's
own lookup walked every open session through the index by user (750 pages per opening at 700
open sessions in issue 39's storm; at 5,000 sessions, thousands of pages per opening). Checked
in that plan, with those statistics and thousands of sessions opened since.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from tests.support.sessions import Estate

from deskpool.runtime import Runtime
from deskpool.sessions import store_opening

HISTORY = 5000
OPEN_SESSIONS = 2000


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


async def _add_sessions(connection: asyncpg.Connection, count: int, *, ended: bool) -> None:
    await connection.execute(
        "INSERT INTO desktop_sessions (user_id, desktop_id, pool_id, desktop_name, protocol, "
        "gateway_id, started_at, ended_at) SELECT gen_random_uuid(), gen_random_uuid(), "
        "gen_random_uuid(), 'desk-' || n, 'vnc', 'gw-candidates', now() - interval '1 day', "
        "CASE WHEN $2 THEN now() - interval '20 hours' END FROM generate_series(1, $1) AS n",
        count,
        ended,
    )


async def test_the_candidates_statement_reads_no_other_desktops_session_to_find_its_own(
    pools_runtime: Runtime, estate: Callable[..., Awaitable[Estate]]
) -> None:
    shop = await estate(ready=1)
    async with pools_runtime.db.acquire() as connection:
        transaction = connection.transaction()
        await transaction.start()
        try:
            await _add_sessions(connection, HISTORY, ended=True)
            await connection.execute("ANALYZE desktop_sessions")
            await _add_sessions(connection, OPEN_SESSIONS, ended=False)
            await connection.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            await connection.execute(
                "PREPARE candidates(uuid, uuid, text) AS "
                + store_opening.candidates_sql(skip_locked=True)
            )
            raw = await connection.fetchval(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE candidates("
                f"'{shop.pool.id}', '{shop.user.id}', 'console')"
            )
        finally:
            await transaction.rollback()

    plan = json.loads(raw)[0]["Plan"]
    sessions = [
        node
        for node in _nodes(plan)
        if node.get("Relation Name") == "desktop_sessions" and node.get("Actual Loops", 0) > 0
    ]
    described = [
        (n["Node Type"], n.get("Index Name"), n.get("Rows Removed by Filter", 0)) for n in sessions
    ]
    # The count reads the open sessions (once); nothing walks them for the chosen desktop's.
    assert len(sessions) == 1, described
    assert sum(int(n.get("Rows Removed by Filter", 0)) for n in sessions) == 0, described
