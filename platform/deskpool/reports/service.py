"""Usage reports: validate the request, read the period's facts, compute the figures.

:func:`usage_report` answers ``GET /api/v1/reports/usage``; the CSV form is
:func:`deskpool.reports.model.csv_rows` of the same buckets.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from deskpool.errors import NotFound, ValidationFailed
from deskpool.pools import store_pools
from deskpool.reports import store
from deskpool.reports.model import BucketSize, period_of, usage
from deskpool.runtime import Runtime


async def usage_report(
    runtime: Runtime,
    *,
    start: datetime,
    end: datetime,
    bucket: BucketSize,
    pool_id: uuid.UUID | None,
) -> dict[str, Any]:
    """The usage of ``start`` to ``end`` (widened to whole buckets), for a pool or for all.

    :raises ValidationFailed: the period is empty, or has too many buckets.
    :raises NotFound: no pool has the id ``pool_id`` (sessions of a deleted pool are still
        counted in the report of all pools).
    """
    period, errors = period_of(start, end, bucket)
    if period is None:
        raise ValidationFailed(errors)
    if pool_id is not None and await store_pools.get_pool(runtime.db, pool_id) is None:
        raise NotFound(f"No pool has the id {pool_id}.")
    async with (
        runtime.db.acquire() as connection,
        connection.transaction(isolation="repeatable_read", readonly=True),
    ):
        now = await store.database_now(connection)
        sessions = await store.sessions_in(connection, period.start, period.end, pool_id)
        logons = await store.logons_in(connection, period.start, period.end, pool_id)
    total, buckets = usage(period, sessions, logons, now)
    return {
        "start": period.start,
        "end": period.end,
        "bucket": str(bucket),
        "pool_id": None if pool_id is None else str(pool_id),
        "generated_at": now,
        "totals": total.as_json(),
        "buckets": [figures.as_json() for figures in buckets],
    }
