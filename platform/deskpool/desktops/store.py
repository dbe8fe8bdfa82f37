"""SQL of desktops: their records, lists, and every change of their state.

Rows map to :class:`~deskpool.pools.model.Desktop`; what the model does not hold (the cluster,
the node its VM runs on, the time of the last write) comes with a :class:`DesktopRecord`.

*State changes* go through :func:`apply_event`: the row is locked, the pure
:func:`deskpool.desktops.states.transition` decides, and the result is written
(:func:`write_desktop`), so an illegal event is a 409 ``illegal_transition`` and two writers
never interleave. Handing a desktop to a user is :mod:`deskpool.desktops.store_allocation`.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from deskpool.db.rows import Db, as_uuid, fetch_record, group_rows, lock_clause, record_from_row
from deskpool.desktops.states import DesktopEvent, transition
from deskpool.errors import NotFound
from deskpool.pools.errors import DesktopNameTaken
from deskpool.pools.model import Desktop, DesktopState, Pool
from deskpool.pools.store import get_pool


@dataclass(frozen=True, slots=True)
class DesktopRecord:
    """A stored desktop: the model, and what only the record holds."""

    desktop: Desktop
    cluster_id: uuid.UUID
    node: str | None
    updated_at: datetime


def desktop_from_row(row: Mapping[str, Any]) -> Desktop:
    """Build a :class:`Desktop` from a ``desktops`` row.

    Written out field by field rather than through :func:`~deskpool.db.rows.record_from_row`:
    every reconciliation pass maps every desktop of its pools, and this is a third faster.
    """
    assigned = row["assigned_user"]
    failed_step = row["failed_step"]
    return Desktop(
        id=row["id"],
        pool_id=row["pool_id"],
        name=row["name"],
        state=DesktopState(row["state"]),
        created_at=row["created_at"],
        state_changed_at=row["state_changed_at"],
        vm_id=row["vm_id"],
        template=row["template"],
        assigned_user=None if assigned is None else str(assigned),
        in_session=row["in_session"],
        used_since_refresh=row["used_since_refresh"],
        failed_step=None if failed_step is None else DesktopState(failed_step),
        last_error=row["last_error"],
        failure_count=row["failure_count"],
        last_failed_at=row["last_failed_at"],
    )


def desktop_record_from_row(row: Mapping[str, Any]) -> DesktopRecord:
    """Build a :class:`DesktopRecord` from a ``desktops`` row."""
    return record_from_row(DesktopRecord, row, desktop=desktop_from_row(row))


async def insert_desktops(
    connection: asyncpg.Connection, pool: Pool, names: Sequence[str]
) -> list[Desktop]:
    """Create one desktop record per name, in state ``provisioning``, on the pool's cluster.

    :raises DesktopNameTaken: a name is in use on the cluster (nothing is inserted).
    :raises NotFound: the pool is gone.
    """
    if not names:
        return []
    try:
        async with connection.transaction():
            rows = await connection.fetch(
                """
                INSERT INTO desktops (pool_id, cluster_id, name, state)
                SELECT $1, $2, name, 'provisioning' FROM unnest($3::text[]) AS name
                RETURNING *
                """,
                pool.id,
                pool.cluster_id,
                list(names),
            )
    except asyncpg.UniqueViolationError:
        raise DesktopNameTaken(
            f"One of the names {', '.join(names)} is in use on the cluster."
        ) from None
    except asyncpg.ForeignKeyViolationError:
        raise NotFound(f"No pool has the id {pool.id}.") from None
    order = {name: index for index, name in enumerate(names)}
    return sorted((desktop_from_row(row) for row in rows), key=lambda d: order[d.name])


async def get_desktop(db: Db, desktop_id: uuid.UUID, *, for_update: bool = False) -> Desktop | None:
    """The desktop ``desktop_id``, or ``None``; ``for_update`` locks its row."""
    record = await get_desktop_record(db, desktop_id, for_update=for_update)
    return None if record is None else record.desktop


async def get_desktop_record(
    db: Db, desktop_id: uuid.UUID, *, for_update: bool = False
) -> DesktopRecord | None:
    """The stored desktop ``desktop_id`` with its record-only fields, or ``None``."""
    query = f"SELECT * FROM desktops WHERE id = $1{lock_clause(for_update)}"
    return await fetch_record(db, desktop_record_from_row, query, desktop_id)


#: The sort key of the desktop list, as a cursor stores it: ``[lower(name), id]``.
DesktopCursor = tuple[str, str]


def desktop_cursor(desktop: Desktop) -> list[str]:
    """The cursor key of a listed desktop (see :func:`list_desktops`)."""
    return [desktop.name.lower(), str(desktop.id)]


async def list_desktops(
    db: Db,
    *,
    limit: int,
    after: DesktopCursor | None = None,
    pool_id: uuid.UUID | None = None,
    state: DesktopState | None = None,
    assigned_user: str | uuid.UUID | None = None,
) -> list[DesktopRecord]:
    """Up to ``limit`` desktops in name order (without case), after the ``after`` key."""
    after_name, after_id = after if after is not None else (None, None)
    rows = await db.fetch(
        """
        SELECT * FROM desktops
         WHERE ($1::text IS NULL OR (lower(name), id) > ($1, $2::uuid))
           AND ($3::uuid IS NULL OR pool_id = $3)
           AND ($4::text IS NULL OR state = $4)
           AND ($5::uuid IS NULL OR assigned_user = $5)
         ORDER BY lower(name), id
         LIMIT $6
        """,
        after_name,
        None if after_id is None else uuid.UUID(after_id),
        pool_id,
        None if state is None else str(state),
        as_uuid(assigned_user),
        limit,
    )
    return [desktop_record_from_row(row) for row in rows]


async def desktops_of_pools(
    db: Db, pool_ids: Collection[uuid.UUID]
) -> dict[uuid.UUID, list[Desktop]]:
    """The desktops of each pool (every pool of ``pool_ids`` is a key), oldest first."""
    rows = await db.fetch(
        "SELECT * FROM desktops WHERE pool_id = ANY($1::uuid[]) ORDER BY created_at, name, id",
        list(pool_ids),
    )
    return group_rows(rows, "pool_id", pool_ids, desktop_from_row)


def held_order_sql(desktop: str) -> str:
    """SQL: the order of a user's desktops (``desktop`` an alias of ``desktops``), in use first."""
    return (
        f"CASE {desktop}.state WHEN 'in_use' THEN 0 WHEN 'ready' THEN 1 ELSE 2 END, "
        f"{desktop}.created_at, {desktop}.name, {desktop}.id"
    )


async def desktops_held_by(db: Db, user_id: str | uuid.UUID) -> list[Desktop]:
    """The desktops assigned to the user, in use first, then ready."""
    rows = await db.fetch(
        f"SELECT * FROM desktops AS d WHERE assigned_user = $1 ORDER BY {held_order_sql('d')}",
        as_uuid(user_id),
    )
    return [desktop_from_row(row) for row in rows]


#: What :func:`write_desktop` sets: parameters ``$2`` to ``$12`` of :func:`write_arguments`.
_WRITTEN = (
    "state", "vm_id", "template", "assigned_user", "in_session", "used_since_refresh",
    "failed_step", "last_error", "failure_count", "last_failed_at", "state_changed_at",
)  # fmt: skip


def write_set_sql(first: int) -> str:
    """:data:`WRITE_SET` with its parameters from ``$first + 1`` (``$first`` is the id).

    For a statement that writes a desktop beside other things, its own parameters first.
    """
    columns = (f"{column} = ${first + n}" for n, column in enumerate(_WRITTEN, 1))
    return ", ".join(columns) + ", updated_at = now()"


#: The ``SET`` of a desktop's write: ``$1`` is its id, ``$2`` to ``$12`` its columns
#: (:func:`write_arguments`).
WRITE_SET = write_set_sql(1)


def write_arguments(desktop: Desktop) -> list[Any]:
    """``$1`` (the id) to ``$12`` of :data:`WRITE_SET`, for ``desktop``."""
    return [
        desktop.id,
        str(desktop.state),
        desktop.vm_id,
        desktop.template,
        as_uuid(desktop.assigned_user),
        desktop.in_session,
        desktop.used_since_refresh,
        None if desktop.failed_step is None else str(desktop.failed_step),
        desktop.last_error,
        desktop.failure_count,
        desktop.last_failed_at,
        desktop.state_changed_at,
    ]


async def write_desktop(connection: asyncpg.Connection, desktop: Desktop) -> Desktop:
    """Write ``desktop`` over its row, as :func:`deskpool.desktops.states.transition` made it.

    :raises NotFound: the desktop is gone.
    """
    row = await connection.fetchrow(
        f"UPDATE desktops SET {WRITE_SET} WHERE id = $1 RETURNING *", *write_arguments(desktop)
    )
    if row is None:
        raise NotFound(f"No desktop has the id {desktop.id}.")
    return desktop_from_row(row)


async def apply_event(
    connection: asyncpg.Connection,
    desktop_id: uuid.UUID,
    event: DesktopEvent,
    now: datetime | None = None,
    *,
    pool: Pool | None = None,
) -> Desktop:
    """Apply ``event`` to the desktop under a row lock and return the desktop after it.

    Runs in a transaction of its own (a savepoint inside the caller's).

    :param now: the time of the event (default: now, UTC).
    :param pool: the desktop's pool, if the caller has it (it is read otherwise).
    :raises NotFound: the desktop does not exist.
    :raises IllegalTransition: the event is not legal for the desktop now (409).
    """
    async with connection.transaction():
        desktop = await get_desktop(connection, desktop_id, for_update=True)
        if desktop is None:
            raise NotFound(f"No desktop has the id {desktop_id}.")
        return await apply_event_to_locked(connection, desktop, event, now, pool=pool)


async def apply_event_to_locked(
    connection: asyncpg.Connection,
    desktop: Desktop,
    event: DesktopEvent,
    now: datetime | None = None,
    *,
    pool: Pool | None = None,
) -> Desktop:
    """:func:`apply_event` to ``desktop``, read ``FOR UPDATE`` in the caller's open transaction.

    :raises NotFound: the desktop's pool does not exist.
    :raises IllegalTransition: the event is not legal for the desktop now (409).
    """
    if pool is None or pool.id != desktop.pool_id:
        pool = await get_pool(connection, desktop.pool_id)
        if pool is None:
            raise NotFound(f"No pool has the id {desktop.pool_id}.")
    after = transition(desktop, event, pool=pool, now=now or datetime.now(UTC))
    if after == desktop:
        return desktop
    return await write_desktop(connection, after)


async def apply_event_if_unchanged(
    connection: asyncpg.Connection,
    expected: Desktop,
    event: DesktopEvent,
    now: datetime,
    *,
    pool: Pool,
) -> Desktop | None:
    """Apply ``event`` to the desktop only if its record still equals ``expected``.

    Runs in a transaction of its own (a savepoint inside the caller's).

    :returns: the desktop after the event, or ``None`` when it is gone or changed since
        ``expected`` was read (the caller decides again on its next pass).
    :raises IllegalTransition: the event is not legal in the desktop's (unchanged) state.
    """
    async with connection.transaction():
        current = await get_desktop(connection, expected.id, for_update=True)
        if current is None or current != expected:
            return None
        return await apply_event_to_locked(connection, current, event, now, pool=pool)


async def apply_event_in_state(
    connection: asyncpg.Connection,
    desktop_id: uuid.UUID,
    event: DesktopEvent,
    now: datetime,
    *,
    states: Collection[DesktopState],
    pool: Pool,
) -> Desktop | None:
    """Apply ``event`` to the desktop only if it is in one of ``states``.

    A job working on a step applies the step's outcome this way: if an administrator or the
    reconciler moved the desktop meanwhile (deleted it, failed it), the outcome is dropped.

    :returns: the desktop after the event, or ``None`` when it is gone or in another state.
    """
    async with connection.transaction():
        current = await get_desktop(connection, desktop_id, for_update=True)
        if current is None or current.state not in states:
            return None
        return await apply_event_to_locked(connection, current, event, now, pool=pool)


async def set_desktop_node(
    connection: asyncpg.Connection, desktop_id: uuid.UUID, node: str | None
) -> bool:
    """Record the node the desktop's VM runs on; ``False`` when the desktop is gone."""
    done = await connection.fetchval(
        "UPDATE desktops SET node = $2, updated_at = now() WHERE id = $1 RETURNING true",
        desktop_id,
        node,
    )
    return bool(done)


async def remove_desktop(connection: asyncpg.Connection, desktop_id: uuid.UUID) -> bool:
    """Delete the record of a desktop in state ``deleting`` (its VM is gone).

    :returns: ``False`` when there is no such desktop, or it is not being deleted.
    """
    done = await connection.fetchval(
        "DELETE FROM desktops WHERE id = $1 AND state = 'deleting' RETURNING true", desktop_id
    )
    return bool(done)
