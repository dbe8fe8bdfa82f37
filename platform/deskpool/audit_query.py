"""Reading the audit trail: the use case behind ``GET /api/v1/audit-events``.

The trail is written by :func:`deskpool.audit.record_audit_event` inside each change's own
transaction; this is the one way to read it back, newest first, a page at a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from deskpool import audit

if TYPE_CHECKING:
    from deskpool.runtime import Runtime


async def list_audit_events(
    runtime: Runtime,
    *,
    before: tuple[datetime, int] | None,
    filters: Mapping[str, Any],
    limit: int,
) -> list[dict[str, Any]]:
    """Up to ``limit`` events, newest first, older than ``before`` (``(occurred_at, id)``).

    :param filters: values by the names of :data:`deskpool.audit.AUDIT_FILTERS`; ``None``
        values are ignored.
    """
    async with runtime.db.acquire() as connection:
        return await audit.list_audit_events(
            connection, before=before, filters=filters, limit=limit
        )
