"""What the stores share: the type of a database handle and the mapping of a row to a record.

A store function that only reads takes a :data:`Db` (a connection, or the pool to take one
from); one that writes takes an ``asyncpg.Connection``, so the caller makes it part of its
transaction. :func:`record_from_row` builds a frozen dataclass from the row's columns of the
same names, with the fields whose column needs converting given by the caller;
:func:`fetch_record` reads one row into a record, or ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import fields
from typing import Any, Protocol, TypeAlias, TypeVar
from uuid import UUID

import asyncpg

#: A handle a read runs on: a connection (inside a transaction, or not), or the pool.
Db: TypeAlias = asyncpg.Connection | asyncpg.Pool

T = TypeVar("T")
K = TypeVar("K")


class RowSource(Protocol):
    """Anything a row is read from: an asyncpg connection or pool, or a stand-in for one."""

    async def fetchrow(self, query: str, *args: Any) -> Any:
        """The first row of ``query``, or ``None``."""


#: The field names of each record class :func:`record_from_row` has built.
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(field.name for field in fields(cls))
    return names


def record_from_row(cls: type[T], row: Mapping[str, Any], **converted: Any) -> T:
    """Build the dataclass ``cls`` from ``row``: each field from the column of its name.

    :param converted: values of the fields whose column is not the field as it is (an enum
        stored as text, a nested record); their columns are not read.
    """
    values = {name: row[name] for name in _field_names(cls) if name not in converted}
    return cls(**values, **converted)


def as_uuid(value: str | UUID | None) -> UUID | None:
    """The value of a ``uuid`` column from a UUID or its text (``None`` stays ``None``).

    :raises ValueError: the text is not a UUID.
    """
    if value is None or isinstance(value, UUID):
        return value
    return UUID(value)


def lock_clause(for_update: bool, of: str | None = None) -> str:
    """`` FOR UPDATE`` (``OF`` a table alias, if given) when ``for_update``, else nothing."""
    if not for_update:
        return ""
    return " FOR UPDATE" if of is None else f" FOR UPDATE OF {of}"


async def fetch_record(
    db: RowSource, build: Callable[[Mapping[str, Any]], T], query: str, *args: Any
) -> T | None:
    """The record ``build`` makes of the first row of ``query``; ``None`` when there is none."""
    row = await db.fetchrow(query, *args)
    return None if row is None else build(row)


def group_rows(
    rows: Iterable[Mapping[str, Any]],
    column: str,
    keys: Collection[K],
    build: Callable[[Mapping[str, Any]], T],
) -> dict[K, list[T]]:
    """``build(row)`` of each row, grouped by the row's ``column``, in the rows' order.

    Every key of ``keys`` is in the result, with an empty list when no row has it.
    """
    grouped: dict[K, list[T]] = {key: [] for key in keys}
    for row in rows:
        grouped.setdefault(row[column], []).append(build(row))
    return grouped


def one_of_ids(column: str, ids: Collection[UUID], parameter: int = 1) -> tuple[str, Any]:
    """SQL matching ``column`` with one of ``ids`` as ``$parameter``, and that parameter.

    The ids are read in a subquery (an init plan), so that no plan is made for their values:
    with ``= ANY($n::uuid[])``, or even ``= $n`` where the value told the planner more about
    the rows of other tables (a pool's desktops), PostgreSQL priced the custom plans for the
    values below its generic plan and planned the statement again on every execution (at
    9 a.m. the planning of a user's statements cost several times their execution). Asked
    through a subquery, custom and generic plans are priced the same and the generic one is
    kept after PostgreSQL's five tries.
    """
    if len(ids) == 1:
        return f"{column} = (SELECT ${parameter}::uuid)", next(iter(ids))
    return f"{column} = ANY((SELECT ${parameter}::uuid[])::uuid[])", list(ids)
