"""The SQL of pool administration's reads that span its areas: the pools a user may open.

One statement where a listing made three (the page of entitled pools, then what opening
each gives, then the desktops the user holds in them): at 9 a.m. a thousand first sign-ins
list their pools at once (issue 39). Each part's SQL is its area's
(:data:`deskpool.pools.store.ENTITLED_POOLS`,
:func:`deskpool.starts.store.opening_gives_sql`,
:func:`deskpool.desktops.store.held_order_sql`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from deskpool.db.rows import Db
from deskpool.desktops.store import desktop_from_row, held_order_sql
from deskpool.pools import store as store_pools
from deskpool.pools.model import Desktop
from deskpool.pools.store import PoolCursor, PoolRecord
from deskpool.starts.store import opening_gives_sql


@dataclass(frozen=True)
class HeldPool:
    """A pool as a user sees it: what opening it gives now and the desktops the user holds."""

    record: PoolRecord
    #: A free ready desktop: opening the pool allocates one at once.
    ready: bool
    held: list[Desktop]
    #: None ready, but opening the pool starts or builds one for the user (start on connect).
    startable: bool = False


#: The page of entitled pools, and for each what opening it gives and the user's desktops
#: (``$3``) in it, in order (:func:`deskpool.desktops.store.desktops_held_by`'s).
_MY_POOLS = f"""
    WITH page AS ({store_pools.ENTITLED_POOLS})
    SELECT page.*, g.ready, g.startable, h.held
      FROM page
     CROSS JOIN LATERAL {opening_gives_sql("page")} AS g
     CROSS JOIN LATERAL (
           SELECT array_agg(d ORDER BY {held_order_sql("d")}) AS held
             FROM desktops AS d
            WHERE d.assigned_user = $3 AND d.pool_id = page.id) AS h
     ORDER BY lower(page.name), page.id
"""


async def my_pools(
    db: Db,
    user_id: str | uuid.UUID,
    group_ids: Iterable[str | uuid.UUID],
    *,
    limit: int,
    after: PoolCursor | None,
) -> list[HeldPool]:
    """Up to ``limit`` of the pools a user is entitled to, as he sees them, in one statement.

    Entitled directly or through one of ``group_ids``; in name order (without case), after
    the ``after`` key, as :func:`deskpool.pools.store.list_pools`.
    """
    rows = await db.fetch(
        _MY_POOLS,
        *store_pools.entitled_pools_arguments(user_id, group_ids, limit=limit, after=after),
    )
    return [
        HeldPool(
            store_pools.pool_record_from_row(row),
            row["ready"],
            [desktop_from_row(desktop) for desktop in row["held"] or ()],
            row["startable"],
        )
        for row in rows
    ]
