"""An opening reads each desktop with a session once, for the license's count (issue 39).

The opening's candidates read (:func:`deskpool.sessions.store_opening.read_candidates`) counts
the desktops with a session for the license and tells whether the chosen desktop has one.
Asked as ``EXISTS`` over the union of :data:`deskpool.licensing.store.SESSION_DESKTOPS`,
PostgreSQL built that union a second time (a hashed subplan): at 9 a.m. every opening read
every open session and pending token twice, and the thousandth opening a thousand rows more
than it needed (2.4 of its 4.3 ms in the storm, ``auto_explain``). The union is now built once
(materialized, :data:`deskpool.licensing.store.SESSION_DESKTOPS_CTE`), counted and asked from
there; what the session check says of a desktop (``session_usage``) must be exactly its
membership in the union: checked here for each kind of row.

The look for one desktop's rows had a second fault: asyncpg keeps the statement prepared, and
after five runs PostgreSQL plans it once for all from the statistics it has then. At 9 a.m.
they are of the night before, when every session had ended: an open session looks rare, and
the look walked every open session through the index by user (750 pages per opening at 700
open sessions in the storm). Checked in that plan, with those statistics and thousands of
sessions opened since.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import asyncpg
import pytest
from tests.support.sessions import Estate

from deskpool.licensing import store as licensing
from deskpool.licensing.model import Resource
from deskpool.runtime import Runtime
from deskpool.sessions import store_opening

#: Pending tokens of other desktops: far more than one desktop's rows, and several pages.
PENDING = 400


async def _token(connection: Any, estate: Estate, desktop_id: uuid.UUID, **columns: str) -> None:
    """A connection token for ``desktop_id``, by default pending (neither used nor expired)."""
    values = {"expires_at": "now() + interval '1 minute'", "redeemed_at": "NULL", **columns}
    await connection.execute(
        "INSERT INTO connection_tokens (token_key, user_id, desktop_id, pool_id, protocol, "
        "sealed_target, expires_at, redeemed_at, shadow_of) VALUES ($1, $2::uuid, $3, $4, "
        f"'vnc', '\\x00', {values['expires_at']}, {values['redeemed_at']}, "
        f"{columns.get('shadow_of', 'NULL')})",
        uuid.uuid4().bytes,
        estate.user.id,
        desktop_id,
        estate.pool.id,
    )


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


async def test_a_desktop_has_a_session_exactly_when_the_union_holds_it(
    estate: Callable[..., Awaitable[Estate]], pools_runtime: Runtime
) -> None:
    owned = await estate(ready=7)
    desktops = owned.desktops
    pending, redeemed, expired, shadow, logon, old_logon = desktops[1:7]
    async with pools_runtime.db.acquire() as connection:
        await connection.execute(
            "INSERT INTO connection_tokens (token_key, user_id, desktop_id, pool_id, protocol, "
            "sealed_target, expires_at) SELECT gen_random_uuid()::text::bytea, $1::uuid, "
            "gen_random_uuid(), $2, 'vnc', '\\x00', now() + interval '1 minute' "
            "FROM generate_series(1, $3)",
            owned.user.id,
            owned.pool.id,
            PENDING,
        )
        await _token(connection, owned, pending)
        await _token(connection, owned, redeemed, redeemed_at="now()")
        await _token(connection, owned, expired, expires_at="now() - interval '1 second'")
        await _token(connection, owned, shadow, shadow_of=f"'{uuid.uuid4()}'")
        for desktop_id, allocated in ((logon, "now()"), (old_logon, "now() - interval '1 hour'")):
            await connection.execute(
                "INSERT INTO logons (id, user_id, pool_id, desktop_id, asked_at, allocated_at) "
                f"VALUES ($1, $2::uuid, $3, $4, {allocated}, {allocated})",
                uuid.uuid4(),
                owned.user.id,
                owned.pool.id,
                desktop_id,
            )
        members = {row["desktop_id"] for row in await connection.fetch(licensing.SESSION_DESKTOPS)}
        looked_up = {
            desktop_id
            for desktop_id in desktops
            if (await licensing.session_usage(connection, desktop_id))[1]
        }
        assert {pending, logon} <= members
        assert not {redeemed, expired, shadow, old_logon} & members
        assert looked_up == members & set(desktops)

        # The candidates read of the pool's owner (he holds none: the oldest free one), as
        # an opening makes it: each pending token is read once, for the count.
        explained = await connection.fetchval(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + store_opening.candidates_sql(skip_locked=True),
            owned.pool.id,
            uuid.UUID(owned.user.id),
            "auto",
        )
    plan = json.loads(explained)[0]["Plan"]
    tokens_read = sum(
        (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
        for node in _nodes(plan)
        if node.get("Relation Name") == "connection_tokens"
    )
    # The count reads every token once (the pool's 4 and the others'); the chosen desktop's
    # own rows are a handful more.
    assert tokens_read <= PENDING + 4 + 4, json.dumps(plan, indent=1)


#: Desktops of the estate that no opening can take (stopped): the estate's size, not the pool's.
ESTATE = 300


async def test_an_opening_reads_no_desktop_it_could_not_take(
    estate: Callable[..., Awaitable[Estate]], pools_runtime: Runtime
) -> None:
    # The license's session check needs the sessions; counting every desktop too (for a
    # gauge) made each opening read the whole estate, a thousand rows at 9 a.m.
    owned = await estate(ready=2)
    async with pools_runtime.db.acquire() as connection:
        await connection.execute(
            "INSERT INTO desktops (pool_id, cluster_id, name, state, vm_id, template, node) "
            "SELECT $1, cluster_id, 'stopped-' || n, 'stopped', 'stopped-' || n, template, node "
            "FROM desktops, generate_series(1, $2) AS n WHERE id = $3",
            owned.pool.id,
            ESTATE,
            owned.desktops[0],
        )
        await connection.execute("ANALYZE desktops")
        explained = await connection.fetchval(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + store_opening.candidates_sql(skip_locked=True),
            owned.pool.id,
            uuid.UUID(owned.user.id),
            "auto",
        )
        candidates = await store_opening.read_candidates(
            connection, owned.pool.id, owned.user.id, "auto"
        )
        sessions = len(await connection.fetch(licensing.SESSION_DESKTOPS))
    plan = json.loads(explained)[0]["Plan"]
    desktops_read = sum(
        (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
        for node in _nodes(plan)
        if node.get("Relation Name") == "desktops"
    )
    assert desktops_read < ESTATE, json.dumps(plan, indent=1)
    assert candidates.free is not None
    assert candidates.usage.of(Resource.SESSIONS) == sessions
    # What was not counted cannot be read as if it were none.
    with pytest.raises(ValueError, match="desktops were not counted"):
        candidates.usage.of(Resource.DESKTOPS)


#: Sessions of the night before (ended, analyzed), and sessions opened since.
HISTORY = 5000
OPEN_SESSIONS = 2000


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
