"""The audit trail: recording events, listing them, and keeping the monthly partitions of its table.

Events are written with :func:`record_audit_event` (many at once: :func:`record_audit_events`)
on the caller's connection, inside the caller's transaction, so an event exists exactly when the
change it records was committed.

The ``audit_events`` table is partitioned by calendar month (UTC) on ``occurred_at``.
:func:`maintain_audit_partitions` (run by the worker every ``AUDIT_MAINTENANCE_INTERVAL``)
creates the coming months' partitions ahead of time and removes expired months whole: detach,
then drop, never row-by-row deletes. Which partitions to create and drop is decided by the pure
:func:`plan_partitions`. An event whose time falls in no monthly partition (recorded by a
process whose clock is months behind or ahead) lands in the default partition
(:data:`DEFAULT_PARTITION`) rather than failing its change; maintenance first moves such rows
into the partitions of their months, creating them (:func:`drain_default_partition`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from deskpool.db.rows import Db
from deskpool.errors import error_text
from deskpool.events import AuditEvent, event_type, subscription_keys

log = logging.getLogger(__name__)

#: The partitioned table.
AUDIT_TABLE = "audit_events"

#: Where an event whose month has no partition is kept until maintenance moves it.
DEFAULT_PARTITION = f"{AUDIT_TABLE}_default"

#: How many months after the current one always have a partition.
MONTHS_AHEAD = 3

#: Key of the advisory lock held while partitions are created or dropped ("audit" in ASCII).
AUDIT_MAINTENANCE_LOCK_KEY = 0x6175646974

#: How long partition DDL waits for the table's lock before giving up until the next run.
PARTITION_LOCK_TIMEOUT = "10s"

_PARTITION_NAME = re.compile(r"^audit_events_p(\d{4})(\d{2})$")


# --------------------------------------------------------------------------- recording


def outbox_insert(event_cte: str, *, type_sql: str, keys_sql: str, timestamp_sql: str) -> str:
    """SQL writing the webhook outbox rows of the events a CTE inserted (``RETURNING *``).

    One pending delivery for each enabled subscription whose filters overlap the event's keys
    (:func:`deskpool.events.subscription_keys`), its body the event as
    :func:`deskpool.events.webhook_payload` makes it. Every statement that inserts audit events
    writes their outbox rows with it, in the same statement.

    :param event_cte: the CTE that inserted the events.
    :param type_sql: SQL of the events' type (:func:`deskpool.events.event_type`).
    :param keys_sql: SQL of their keys, a ``text[]``.
    :param timestamp_sql: SQL of their time as ISO 8601 text (``datetime.isoformat``).
    """
    return f"""
        INSERT INTO webhook_deliveries (subscription_id, message_id, event_type,
                                        audit_event_id, occurred_at, payload)
        SELECT subscription.id, 'msg_' || e.id, {type_sql}, e.id, e.occurred_at,
               jsonb_build_object(
                   'type', {type_sql},
                   'timestamp', {timestamp_sql},
                   'data', jsonb_build_object(
                       'id', e.id, 'occurred_at', {timestamp_sql}, 'actor', e.actor,
                       'action', e.action, 'resource_type', e.resource_type,
                       'resource_id', e.resource_id, 'outcome', e.outcome,
                       'request_id', e.request_id, 'source_address', e.source_address,
                       'details', e.details))
          FROM {event_cte} AS e
          JOIN webhook_subscriptions AS subscription
            ON subscription.enabled AND subscription.event_types && {keys_sql}"""


def audit_event_ctes(event: AuditEvent, first: int) -> tuple[str, list[Any]]:
    """The CTEs ``event`` and ``outbox`` that insert ``event`` and its webhook outbox rows.

    For a statement that does more in the same round trip (an opening: issue 39). Their
    parameters are numbered from ``$first``; returns the SQL and the arguments.
    """
    n = [f"${first + i}" for i in range(12)]
    outbox = outbox_insert(
        "event",
        type_sql=f"{n[9]}::text",
        keys_sql=f"{n[10]}::text[]",
        timestamp_sql=f"{n[11]}::text",
    )
    sql = f"""
        event AS (
            INSERT INTO {AUDIT_TABLE} (occurred_at, actor, action, resource_type, resource_id,
                                      outcome, request_id, source_address, details)
            VALUES ({n[0]}, {n[1]}, {n[2]}, {n[3]}, {n[4]}, {n[5]}, {n[6]}, {n[7]},
                    {n[8]}::jsonb)
            RETURNING *
        ), outbox AS ({outbox})"""
    return sql, _event_args(event)


#: Where :func:`_event_args` puts the event's subscription keys (a list).
_KEYS_ARG = 10


def _event_args(event: AuditEvent) -> list[Any]:
    """The values of an event's columns, then its type, its subscription keys and ISO time."""
    return [
        event.occurred_at,
        event.actor,
        event.action,
        event.resource_type,
        event.resource_id,
        event.outcome,
        event.request_id,
        event.source_address,
        json.dumps(event.details, default=str),
        event_type(event.action, event.outcome),
        subscription_keys(event.action, event.outcome),
        event.occurred_at.isoformat(),
    ]


async def record_audit_event(connection: asyncpg.Connection, event: AuditEvent) -> int:
    """Insert ``event`` on ``connection`` (inside the caller's transaction, if one is open).

    In the same statement, the event is written to the webhook outbox (:func:`outbox_insert`),
    so a subscriber gets an event exactly when its change was committed.

    :returns: the event's id.
    """
    ctes, args = audit_event_ctes(event, 1)
    event_id: int = await connection.fetchval(f"WITH {ctes} SELECT id FROM event", *args)
    return event_id


# Many events and their outbox rows in one statement: ids drawn first (the audit table's own
# sequence, in the events' order), so each inserted row is joined back to its event's type,
# subscription keys and ISO time, which Python computes and the table does not hold.
_RECORD_MANY = f"""
    WITH given AS (
        SELECT nextval(pg_get_serial_sequence('{AUDIT_TABLE}', 'id')) AS id, g.*
          FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[],
                      $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
                      $11::text[], $12::text[]) WITH ORDINALITY
               AS g(occurred_at, actor, action, resource_type, resource_id, outcome,
                    request_id, source_address, details, event_type, event_keys, stamp, n)
    ), inserted AS (
        INSERT INTO {AUDIT_TABLE} (id, occurred_at, actor, action, resource_type, resource_id,
                                   outcome, request_id, source_address, details)
        SELECT id, occurred_at, actor, action, resource_type, resource_id, outcome, request_id,
               source_address, details::jsonb
          FROM given
        RETURNING *
    ), event AS (
        SELECT inserted.*, given.event_type, given.stamp,
               ARRAY(SELECT jsonb_array_elements_text(given.event_keys::jsonb)) AS event_keys
          FROM inserted JOIN given USING (id)
    ), outbox AS ({
    outbox_insert(
        "event", type_sql="e.event_type", keys_sql="e.event_keys", timestamp_sql="e.stamp"
    )
})
    SELECT id FROM given ORDER BY n"""


async def record_audit_events(
    connection: asyncpg.Connection, events: Sequence[AuditEvent]
) -> list[int]:
    """:func:`record_audit_event` of each of ``events``, in one statement; their ids, in order.

    For a change that records an event for each of many things at once (a reconciliation
    creating a pool's desktops, under the license's growth lock): one round trip, not one each.
    """
    if not events:
        return []
    columns: list[list[Any]] = [[] for _ in range(12)]
    for event in events:
        args = _event_args(event)
        # A list of keys per event: as JSON text, since an array of lists would be ragged.
        args[_KEYS_ARG] = json.dumps(args[_KEYS_ARG])
        for column, value in zip(columns, args, strict=True):
            column.append(value)
    rows = await connection.fetch(_RECORD_MANY, *columns)
    return [row["id"] for row in rows]


#: The filters of :func:`list_audit_events`: name -> (column, comparison).
AUDIT_FILTERS: dict[str, tuple[str, str]] = {
    "since": ("a.occurred_at", ">="),
    "until": ("a.occurred_at", "<"),
    "actor": ("a.actor", "="),
    "action": ("a.action", "="),
    "resource_type": ("a.resource_type", "="),
    "resource_id": ("a.resource_id", "="),
    "outcome": ("a.outcome", "="),
}

#: How a user is named: display name, else email, else subject.
_USER_NAME = "coalesce(nullif({0}.display_name, ''), {0}.email, {0}.subject)"

#: The name of an event's resource, for the kinds of resources that have one (joined, so a
#: page of events is one query); ``NULL`` for the others and for resources since deleted.
_RESOURCE_NAME = f"""CASE a.resource_type
    WHEN 'users' THEN (SELECT {_USER_NAME.format("r")} FROM users r
                        WHERE r.id::text = a.resource_id)
    WHEN 'groups' THEN (SELECT r.name FROM groups r WHERE r.id::text = a.resource_id)
    WHEN 'pools' THEN (SELECT r.name FROM pools r WHERE r.id::text = a.resource_id)
    WHEN 'desktops' THEN (SELECT r.name FROM desktops r WHERE r.id::text = a.resource_id)
    WHEN 'clusters' THEN (SELECT r.name FROM clusters r WHERE r.id::text = a.resource_id)
    WHEN 'schedules' THEN (SELECT r.name FROM schedules r WHERE r.id::text = a.resource_id)
    WHEN 'sessions' THEN (SELECT r.desktop_name FROM desktop_sessions r
                           WHERE r.id::text = a.resource_id)
    END"""


def _filter(name: str, column: str, comparison: str, placeholder: str) -> str:
    """One filter's condition; the actor is matched by id, or by a user's email or name."""
    if name != "actor":
        return f"{column} {comparison} {placeholder}"
    return f"""({column} = {placeholder} OR {column} IN (
        SELECT f.id::text FROM users f
         WHERE lower(f.email) = lower({placeholder})
            OR {placeholder} <> ''
               AND position(lower({placeholder}) IN lower(coalesce(f.display_name, ''))) > 0))"""


async def list_audit_events(
    connection: asyncpg.Connection,
    *,
    before: tuple[datetime, int] | None,
    filters: Mapping[str, Any],
    limit: int,
) -> list[dict[str, Any]]:
    """Up to ``limit`` events, newest first, older than ``before`` (``(occurred_at, id)``).

    Each event carries its actor's and its resource's names where they are known
    (``actor_name``, ``actor_email``, ``resource_name``), and ``names``: the names of the
    users, groups, pools, desktops, clusters and schedules its details mention by id.

    :param filters: values by the names of :data:`AUDIT_FILTERS`; ``None`` values are ignored.
    """
    conditions = ["true"]
    args: list[Any] = []

    def arg(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    if before is not None:
        conditions.append(f"(a.occurred_at, a.id) < ({arg(before[0])}, {arg(before[1])})")
    for name, (column, comparison) in AUDIT_FILTERS.items():
        if filters.get(name) is not None:
            conditions.append(_filter(name, column, comparison, arg(filters[name])))
    rows = await connection.fetch(
        f"""SELECT a.*, {_USER_NAME.format("u")} AS actor_name, u.email AS actor_email,
                   {_RESOURCE_NAME} AS resource_name
              FROM {AUDIT_TABLE} a LEFT JOIN users u ON u.id::text = a.actor
             WHERE {" AND ".join(conditions)}
             ORDER BY a.occurred_at DESC, a.id DESC LIMIT {arg(limit)}""",
        *args,
    )
    events = [{**dict(row), "details": json.loads(row["details"])} for row in rows]
    mentioned = {event["id"]: set(_ids_in(event["details"])) for event in events}
    names = await _names_of(connection, set().union(*mentioned.values()))
    for event in events:
        event["names"] = {i: names[i] for i in sorted(mentioned[event["id"]]) if i in names}
    return events


_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def _ids_in(value: Any) -> Iterable[str]:
    """The UUIDs among the values of an event's details (nested ones included), lower case."""
    if isinstance(value, str):
        if _UUID.match(value):
            yield value.lower()
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _ids_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from _ids_in(item)


async def _names_of(connection: asyncpg.Connection, ids: set[str]) -> dict[str, str]:
    """The names of the users, groups, pools, desktops, clusters and schedules among ``ids``."""
    if not ids:
        return {}
    rows = await connection.fetch(
        f"""SELECT id::text AS id, name FROM (
                SELECT id, {_USER_NAME.format("users")} AS name FROM users
                 WHERE id = ANY($1::uuid[])
                UNION ALL SELECT id, name FROM groups WHERE id = ANY($1::uuid[])
                UNION ALL SELECT id, name FROM pools WHERE id = ANY($1::uuid[])
                UNION ALL SELECT id, name FROM desktops WHERE id = ANY($1::uuid[])
                UNION ALL SELECT id, name FROM clusters WHERE id = ANY($1::uuid[])
                UNION ALL SELECT id, name FROM schedules WHERE id = ANY($1::uuid[])) AS named""",
        sorted(ids),
    )
    return {row["id"]: row["name"] for row in rows}


async def events_since(
    db: Db, since: datetime, *, after: tuple[datetime, int] | None, limit: int
) -> list[tuple[int, AuditEvent]]:
    """Up to ``limit`` events from ``since`` on, oldest first, after ``after`` (``(at, id)``)."""
    rows = await db.fetch(
        f"""SELECT * FROM {AUDIT_TABLE}
             WHERE occurred_at >= $1 AND ($2::timestamptz IS NULL OR (occurred_at, id) > ($2, $3))
             ORDER BY occurred_at, id LIMIT $4""",
        since,
        None if after is None else after[0],
        None if after is None else after[1],
        limit,
    )
    return [(row["id"], event_of_row(row)) for row in rows]


def event_of_row(row: Mapping[str, Any]) -> AuditEvent:
    """The :class:`AuditEvent` an ``audit_events`` row holds."""
    details = row["details"]
    return AuditEvent(
        action=row["action"],
        actor=row["actor"],
        resource_type=row["resource_type"],
        resource_id=row["resource_id"],
        outcome=row["outcome"],
        occurred_at=row["occurred_at"],
        request_id=row["request_id"],
        source_address=row["source_address"],
        details=json.loads(details) if isinstance(details, str) else dict(details),
    )


# --------------------------------------------------------------------------- months


def month_of(moment: datetime) -> datetime:
    """The first instant (UTC) of the calendar month containing ``moment``."""
    utc = moment.astimezone(UTC)
    return datetime(utc.year, utc.month, 1, tzinfo=UTC)


def add_months(month: datetime, count: int) -> datetime:
    """The first instant of the month ``count`` months after ``month`` (a month start)."""
    index = month.year * 12 + (month.month - 1) + count
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


def partition_name(month: datetime) -> str:
    """The name of the partition holding ``month`` (``audit_events_p202611``)."""
    return f"{AUDIT_TABLE}_p{month.year:04d}{month.month:02d}"


def month_of_partition(name: str) -> datetime | None:
    """The month a partition named by :func:`partition_name` holds; ``None`` for other names."""
    match = _PARTITION_NAME.match(name)
    if match is None or not 1 <= int(match.group(2)) <= 12:
        return None
    return datetime(int(match.group(1)), int(match.group(2)), 1, tzinfo=UTC)


@dataclass(frozen=True)
class PartitionPlan:
    """The months whose partitions to create, and those to detach and drop."""

    create: tuple[datetime, ...]
    drop: tuple[datetime, ...]


def plan_partitions(
    existing: Iterable[datetime],
    now: datetime,
    retention_months: int,
    months_ahead: int = MONTHS_AHEAD,
) -> PartitionPlan:
    """Decide which monthly partitions to create and which to drop.

    Every month from the current one to ``months_ahead`` months later gets a partition. With
    ``retention_months`` N > 0, a partition is dropped once every event it can hold is more
    than N months old (its month ended at least N months ago), so the trailing N months are
    always kept whole; 0 keeps everything.

    :param existing: the months that have a partition.
    :param now: the current time.
    """
    if retention_months < 0:
        raise ValueError("retention_months must not be negative")
    have = set(existing)
    current = month_of(now)
    wanted = [add_months(current, ahead) for ahead in range(months_ahead + 1)]
    create = tuple(month for month in wanted if month not in have)
    drop: tuple[datetime, ...] = ()
    if retention_months:
        drop = tuple(
            sorted(month for month in have if add_months(month, 1 + retention_months) <= now)
        )
    return PartitionPlan(create=create, drop=drop)


# --------------------------------------------------------------------------- maintenance


async def existing_partitions(connection: asyncpg.Connection) -> dict[datetime, str]:
    """The monthly partitions attached to the audit table, by month."""
    rows = await connection.fetch(
        """
        SELECT child.relname
        FROM pg_inherits
        JOIN pg_class child ON child.oid = pg_inherits.inhrelid
        WHERE pg_inherits.inhparent = $1::regclass
        """,
        AUDIT_TABLE,
    )
    found: dict[datetime, str] = {}
    for row in rows:
        if row["relname"] == DEFAULT_PARTITION:
            continue
        month = month_of_partition(row["relname"])
        if month is None:
            log.warning("audit table has a partition not named by deskpool: %s", row["relname"])
            continue
        found[month] = row["relname"]
    return found


async def create_partition(connection: asyncpg.Connection, month: datetime) -> int:
    """Create the partition of ``month`` (a no-op when it exists).

    The month's events kept in the default partition move into it, in the same transaction (a
    partition cannot be attached while the default one holds rows of its range).

    :returns: how many events moved from the default partition.
    """
    name = partition_name(month)
    upper = add_months(month, 1)
    async with connection.transaction():
        await connection.execute(f"SET LOCAL lock_timeout = '{PARTITION_LOCK_TIMEOUT}'")
        attached = await connection.fetchval(
            """SELECT EXISTS (SELECT 1 FROM pg_inherits
                              WHERE inhparent = $1::regclass AND inhrelid = to_regclass($2))""",
            AUDIT_TABLE,
            name,
        )
        if attached:
            return 0
        await connection.execute(
            f'CREATE TABLE IF NOT EXISTS "{name}" '
            f"(LIKE {AUDIT_TABLE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        )
        status = await connection.execute(
            f"""
            WITH moved AS (
                DELETE FROM {DEFAULT_PARTITION} WHERE occurred_at >= $1 AND occurred_at < $2
                RETURNING *
            )
            INSERT INTO "{name}" SELECT * FROM moved
            """,
            month,
            upper,
        )
        await connection.execute(
            f'ALTER TABLE {AUDIT_TABLE} ATTACH PARTITION "{name}" '
            f"FOR VALUES FROM ('{month.isoformat()}') TO ('{upper.isoformat()}')"
        )
    return int(status.split()[-1])


async def drain_default_partition(connection: asyncpg.Connection) -> dict[datetime, int]:
    """Move the events of the default partition into their months' partitions, creating them.

    :returns: the months created, with how many events each received.
    """
    months = await connection.fetch(
        f"""SELECT DISTINCT date_trunc('month', occurred_at AT TIME ZONE 'UTC') AS month
              FROM {DEFAULT_PARTITION} ORDER BY 1"""
    )
    moved: dict[datetime, int] = {}
    for row in months:
        month = row["month"].replace(tzinfo=UTC)
        moved[month] = await create_partition(connection, month)
        log.warning(
            "audit partition %s created for %d event(s) kept in the default partition (recorded "
            "by a process whose clock was outside the provisioned months)",
            partition_name(month),
            moved[month],
        )
    return moved


async def drop_partition(connection: asyncpg.Connection, month: datetime) -> None:
    """Detach the partition of ``month`` from the audit table, then drop it."""
    name = partition_name(month)
    async with connection.transaction():
        await connection.execute(f"SET LOCAL lock_timeout = '{PARTITION_LOCK_TIMEOUT}'")
        await connection.execute(f'ALTER TABLE {AUDIT_TABLE} DETACH PARTITION "{name}"')
        await connection.execute(f'DROP TABLE "{name}"')


async def maintain_audit_partitions(
    connection: asyncpg.Connection,
    retention_months: int,
    *,
    now: datetime | None = None,
    months_ahead: int = MONTHS_AHEAD,
) -> PartitionPlan:
    """Create the coming months' partitions and drop expired ones.

    Runs under an advisory lock, so two maintenance runs never interleave. The events kept in
    the default partition move to their months' partitions first
    (:func:`drain_default_partition`); then each partition is created or dropped in its own
    short transaction. Retention applies to the drained months as to any.

    :param retention_months: ``AUDIT_RETENTION_MONTHS`` (0 keeps everything).
    :param now: the time to plan for; the database's clock when omitted.
    :returns: what was done.
    """
    await connection.execute("SELECT pg_advisory_lock($1)", AUDIT_MAINTENANCE_LOCK_KEY)
    try:
        moment: datetime = now or await connection.fetchval("SELECT now()")
        await drain_default_partition(connection)
        existing = await existing_partitions(connection)
        plan = plan_partitions(existing, moment, retention_months, months_ahead)
        # Each month alone: one partition that cannot be made or dropped stops no other.
        for month in plan.create:
            try:
                await create_partition(connection, month)
            except asyncpg.PostgresError as error:
                log.warning(
                    "creating audit partition %s failed (%s); the others go on",
                    partition_name(month),
                    error_text(error),
                )
                continue
            log.info("audit partition %s created", partition_name(month))
        for month in plan.drop:
            try:
                await drop_partition(connection, month)
            except asyncpg.PostgresError as error:
                log.warning(
                    "dropping audit partition %s failed (%s); the others go on",
                    partition_name(month),
                    error_text(error),
                )
                continue
            log.info(
                "audit partition %s dropped (AUDIT_RETENTION_MONTHS=%d)",
                partition_name(month),
                retention_months,
            )
        return plan
    finally:
        await connection.execute("SELECT pg_advisory_unlock($1)", AUDIT_MAINTENANCE_LOCK_KEY)
