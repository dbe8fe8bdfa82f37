"""Reports: validate the request, read the period's facts, compute the figures.

:func:`usage_report` answers ``GET /api/v1/reports/usage`` (the CSV form is
:func:`deskpool.reports.model.csv_rows` of the same buckets); :func:`logon_phases` answers
``GET /api/v1/reports/logon-phases``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.errors import NotFound, ValidationFailed
from deskpool.pools import store as store_pools
from deskpool.reports import store
from deskpool.reports.model import BucketSize, period_of, usage
from deskpool.reports.phases import phase_figures, span_errors
from deskpool.runtime import Runtime


@contextlib.asynccontextmanager
async def _snapshot(
    runtime: Runtime, pool_id: uuid.UUID | None
) -> AsyncIterator[tuple[asyncpg.Connection, datetime]]:
    """One read-only snapshot of the facts, and the database's clock in it.

    :raises NotFound: no pool has the id ``pool_id`` (``None``: all pools).
    """
    if pool_id is not None and await store_pools.get_pool(runtime.db, pool_id) is None:
        raise NotFound(f"No pool has the id {pool_id}.")
    async with (
        runtime.db.acquire() as connection,
        connection.transaction(isolation="repeatable_read", readonly=True),
    ):
        yield connection, await store.database_now(connection)


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
    async with _snapshot(runtime, pool_id) as (connection, now):
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


async def logon_phases(
    runtime: Runtime, *, start: datetime, end: datetime, pool_id: uuid.UUID | None
) -> dict[str, Any]:
    """The median and 95th percentile of each logon phase, over the logons asked in the period.

    :raises ValidationFailed: the period is empty or longer than a year.
    :raises NotFound: no pool has the id ``pool_id``.
    """
    errors = span_errors(start, end)
    if errors:
        raise ValidationFailed(errors)
    async with _snapshot(runtime, pool_id) as (connection, now):
        logons = await store.logon_times_in(connection, start, end, pool_id)
    return {
        "start": start,
        "end": end,
        "pool_id": None if pool_id is None else str(pool_id),
        "generated_at": now,
        **phase_figures(logons),
    }
