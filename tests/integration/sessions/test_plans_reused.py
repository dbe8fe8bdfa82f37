"""The 9 a.m. statements of one user are planned once per connection, not on every execution.

PostgreSQL plans a prepared statement for its parameters five times, then keeps a generic plan
when that is priced no higher. A statement matching ``= ANY($1::uuid[])`` never gets there:
the generic plan does not know the array's length and is priced above the custom ones made for
one element, so every execution was planned again. In the storm (``pg_stat_statements`` with
``track_planning``) what opening each listed pool gives was planned 1,010 times for 1,000
calls (425 ms of planning for 60 ms of execution) and the redemption's access read 801 times
for 1,007. The ids are now read in a subquery (:func:`deskpool.db.rows.one_of_ids`), for one
id or many; the counts of custom and generic plans are PostgreSQL's own
(``pg_prepared_statements``).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import asyncpg
from tests.support.sessions import Estate

from deskpool.pool_admin.store import my_pools
from deskpool.revocation.store import read_access
from deskpool.runtime import Runtime
from deskpool.starts.store import what_opening_gives

#: Executions of each statement: PostgreSQL decides after five custom plans.
EXECUTIONS = 12


async def _plans(connection: asyncpg.Connection, marker: str) -> tuple[int, int]:
    """The custom and generic plans of the connection's prepared statement containing ``marker``."""
    row = await connection.fetchrow(
        "SELECT custom_plans, generic_plans FROM pg_prepared_statements "
        "WHERE strpos(statement, $1) > 0 AND strpos(statement, 'pg_prepared_statements') = 0",
        marker,
    )
    assert row is not None, marker
    return row["custom_plans"], row["generic_plans"]


async def test_one_users_access_and_pool_are_planned_once(
    estate: Callable[..., Awaitable[Estate]], pools_runtime: Runtime
) -> None:
    owned, other = await estate(ready=1), await estate(ready=0)
    users = [uuid.UUID(owned.user.id), uuid.UUID(other.user.id)]
    async with pools_runtime.db.acquire() as connection:
        for _ in range(EXECUTIONS):
            read = await read_access(connection, users[:1])
            gives = await what_opening_gives(connection, [owned.pool.id])
            both = await read_access(connection, users)  # the access watch's many users
            listed = await my_pools(connection, users[0], [], limit=51, after=None)
        assert read[users[0]].entitled_pools == {owned.pool.id}
        assert gives[owned.pool.id].ready
        assert both[users[1]].entitled_pools == {other.pool.id}
        assert [(shown.record.pool.id, shown.ready) for shown in listed] == [(owned.pool.id, True)]
        markers = (
            "FROM users WHERE id = (SELECT",
            "FROM users WHERE id = ANY",
            "p.id AS pool_id, g.ready",
            "WITH page AS",
        )
        for marker in markers:
            custom, generic = await _plans(connection, marker)
            assert custom <= 5, (marker, custom, generic)
            assert generic == EXECUTIONS - custom, (marker, custom, generic)
