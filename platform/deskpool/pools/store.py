"""SQL of the pools themselves: their records, settings, counts and domain-join secret.

Rows map to the pure model of :mod:`deskpool.pools.model` (:class:`Pool`); what the model does
not hold (a pool's description, domain-join settings, health, times) comes with a
:class:`PoolRecord`. Writes take a connection, so a caller changes a record, enqueues its jobs
and records its audit event in one transaction. Desktops are :mod:`~deskpool.desktops.store`,
entitlements :mod:`~deskpool.pools.store_entitlements`.

Rules kept here:

- *Generations.* :func:`update_pool` bumps a pool's ``generation`` when a setting that
  reconciliation reads changes (:data:`RECONCILE_FIELDS`); a rename or a new description does
  not. :func:`deskpool.reconciliation.store.mark_reconciled` records the generation a finished
  pass saw.
- *Deletion.* :func:`delete_pool` refuses (409 ``pool_not_empty``) while the pool has desktop
  records: an administrator drains the pool first (state ``draining``; reconciliation deletes
  each desktop as it becomes free), then deletes the empty pool. Nothing a user holds is ever
  destroyed by a single request.
- *The domain-join password* is sealed by the secret store (:mod:`deskpool.secrets`) as
  :data:`DOMAIN_JOIN_PASSWORD`; a record only says whether it is set and when it changed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.db.rows import (
    Db,
    as_uuid,
    fetch_record,
    group_rows,
    lock_clause,
    record_from_row,
)
from deskpool.errors import FieldError, NotFound, ValidationFailed
from deskpool.pools.errors import PoolNameTaken, PoolNotEmpty
from deskpool.pools.model import (
    CloneMode,
    DesktopState,
    HealthStatus,
    OsType,
    Pool,
    PoolHealth,
    PoolKind,
    PoolState,
    PoolSummary,
    ReconcileError,
)
from deskpool.secrets import OwnedSecret, SecretMetadata

#: A pool's domain-join password, sealed under the pool's id (:meth:`OwnedSecret.put`; a
#: record says only whether it is set and when it changed).
DOMAIN_JOIN_PASSWORD = OwnedSecret("pool.domain_join", "password")

#: Pool settings reconciliation reads: changing one bumps the pool's generation.
RECONCILE_FIELDS = frozenset(
    field.name
    for field in fields(Pool)
    if field.name not in {"id", "name", "generation", "reconciled_generation"}
)


# ------------------------------------------------------------------------------ records


@dataclass(frozen=True, slots=True)
class DomainJoin:
    """Where Windows desktops of a pool join an Active Directory domain (the password aside).

    :ivar domain: the domain's DNS name.
    :ivar username: the account that joins computers.
    :ivar organizational_unit: the OU computer accounts are created in; ``None`` for the default.
    """

    domain: str
    username: str
    organizational_unit: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The JSON document stored in ``pools.domain_join``."""
        return {
            "domain": self.domain,
            "username": self.username,
            "organizational_unit": self.organizational_unit,
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> DomainJoin:
        """Read the document :meth:`as_json` writes."""
        return cls(
            domain=str(document["domain"]),
            username=str(document["username"]),
            organizational_unit=document.get("organizational_unit"),
        )


@dataclass(frozen=True, slots=True)
class PoolRecord:
    """A stored pool: the model, and what only the record holds.

    :ivar health: the last reconciliation's verdict; ``None`` before the first pass.
    :ivar reconciled_at: when reconciliation last finished a pass over the pool.
    :ivar reconcile_error: why its reconciliation fails, while it does.
    :ivar domain_join_password: whether a domain-join password is sealed, and when it changed.
    """

    pool: Pool
    description: str
    domain_join: DomainJoin | None
    domain_join_password: SecretMetadata
    health: PoolHealth | None
    reconciled_at: datetime | None
    created_at: datetime
    updated_at: datetime
    reconcile_error: ReconcileError | None = None


# ------------------------------------------------------------------------------ mapping


def pool_from_row(row: Mapping[str, Any]) -> Pool:
    """Build a :class:`Pool` from a ``pools`` row."""
    return record_from_row(
        Pool,
        row,
        kind=PoolKind(row["kind"]),
        os_type=OsType(row["os_type"]),
        clone_mode=CloneMode(row["clone_mode"]),
        target_nodes=tuple(row["target_nodes"] or ()),
        state=PoolState(row["state"]),
    )


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def health_from_json(document: Any) -> PoolHealth | None:
    """Read ``pools.health``; ``None`` when no pass has recorded any."""
    document = _json(document)
    if not isinstance(document, Mapping) or "status" not in document:
        return None
    try:
        status = HealthStatus(document["status"])
    except ValueError:
        return None
    reasons = document.get("reasons") or ()
    return PoolHealth(status, tuple(str(reason) for reason in reasons))


def health_to_json(health: PoolHealth) -> dict[str, Any]:
    """The document stored in ``pools.health``."""
    return {"status": str(health.status), "reasons": list(health.reasons)}


def pool_record_from_row(row: Mapping[str, Any]) -> PoolRecord:
    """Build a :class:`PoolRecord` from a row of :data:`_SELECT_POOL`."""
    domain_join = _json(row["domain_join"])
    changed_at = row["domain_join_password_changed_at"]
    return record_from_row(
        PoolRecord,
        row,
        pool=pool_from_row(row),
        domain_join=DomainJoin.from_json(domain_join) if domain_join else None,
        domain_join_password=SecretMetadata(is_set=changed_at is not None, changed_at=changed_at),
        health=health_from_json(row["health"]),
        reconcile_error=None
        if row["reconcile_error_code"] is None
        else ReconcileError(
            row["reconcile_error_code"],
            row["reconcile_error_reason"],
            row["reconcile_error_since"],
        ),
    )


# ------------------------------------------------------------------------------ pools

_SELECT_POOL = f"""
SELECT p.*, s.updated_at AS domain_join_password_changed_at
  FROM pools AS p
  {DOMAIN_JOIN_PASSWORD.metadata_join("p.id::text", "s")}
"""


@contextmanager
def _pool_constraints(pool: Pool) -> Iterator[None]:
    """Turn the database's refusals of ``pool``'s row into the pools' errors.

    :raises PoolNameTaken: the name is in use (without case).
    :raises ValidationFailed: the cluster or the schedule does not exist (``/cluster_id``,
        ``/schedule_id``).
    """
    try:
        yield
    except asyncpg.UniqueViolationError:
        raise PoolNameTaken(f"A pool named {pool.name!r} exists.") from None
    except asyncpg.ForeignKeyViolationError as exc:
        if "schedule" in (exc.constraint_name or ""):
            raise ValidationFailed(
                [FieldError("/schedule_id", f"No schedule has the id {pool.schedule_id}.")]
            ) from None
        raise ValidationFailed(
            [FieldError("/cluster_id", f"No cluster has the id {pool.cluster_id}.")]
        ) from None


async def create_pool(
    connection: asyncpg.Connection,
    pool: Pool,
    *,
    description: str = "",
    domain_join: DomainJoin | None = None,
) -> PoolRecord:
    """Insert ``pool`` (its id, generation 1 unless given) and return the stored record.

    :raises PoolNameTaken: the name is in use (without case).
    :raises ValidationFailed: the cluster does not exist (``/cluster_id``).
    """
    with _pool_constraints(pool):
        await connection.execute(
            """
            INSERT INTO pools (id, name, description, cluster_id, template, kind, os_type,
                               clone_mode, min_size, max_size, spare, naming_pattern,
                               target_nodes, storage, state, generation, reconciled_generation,
                               domain_join, schedule_id)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
                    $18::jsonb, $19)
            """,
            pool.id,
            pool.name,
            description,
            pool.cluster_id,
            pool.template,
            str(pool.kind),
            str(pool.os_type),
            str(pool.clone_mode),
            pool.min_size,
            pool.max_size,
            pool.spare,
            pool.naming_pattern,
            list(pool.target_nodes),
            pool.storage,
            str(pool.state),
            pool.generation,
            pool.reconciled_generation,
            None if domain_join is None else json.dumps(domain_join.as_json()),
            pool.schedule_id,
        )
    record = await get_pool_record(connection, pool.id)
    assert record is not None
    return record


def growth_lock_key(pool_id: uuid.UUID) -> str:
    """The advisory lock under which a pool gets new desktops (its reconciliation's lock).

    Reconciliation holds it while it applies a plan; an open that grows the pool takes it too,
    so the pool's records are counted against ``max_size`` by one of them at a time.
    """
    return f"deskpool.reconcile:{pool_id}"


async def get_pool(db: Db, pool_id: uuid.UUID, *, for_update: bool = False) -> Pool | None:
    """The pool ``pool_id``, or ``None``; ``for_update`` locks its row."""
    query = f"SELECT * FROM pools WHERE id = $1{lock_clause(for_update)}"
    return await fetch_record(db, pool_from_row, query, pool_id)


async def get_pool_record(
    db: Db, pool_id: uuid.UUID, *, for_update: bool = False
) -> PoolRecord | None:
    """The stored pool ``pool_id`` with its record-only fields, or ``None``."""
    query = f"{_SELECT_POOL} WHERE p.id = $1{lock_clause(for_update, 'p')}"
    return await fetch_record(db, pool_record_from_row, query, pool_id)


async def get_pools(db: Db, pool_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, PoolRecord]:
    """The stored pools among ``pool_ids``, by id (missing ids are left out)."""
    rows = await db.fetch(f"{_SELECT_POOL} WHERE p.id = ANY($1::uuid[])", list(pool_ids))
    return {row["id"]: pool_record_from_row(row) for row in rows}


async def pool_names(db: Db, pool_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The names of the stored pools among ``pool_ids``, by id, in one query."""
    rows = await db.fetch(
        "SELECT id, name FROM pools WHERE id = ANY($1::uuid[])", list(set(pool_ids))
    )
    return {row["id"]: row["name"] for row in rows}


#: The sort key of the pool list, as a cursor stores it: ``[lower(name), id]``.
PoolCursor = tuple[str, str]


def pool_cursor(record: PoolRecord) -> list[str]:
    """The cursor key of a listed pool (see :func:`list_pools`)."""
    return [record.pool.name.lower(), str(record.pool.id)]


async def list_pools(
    db: Db,
    *,
    limit: int,
    after: PoolCursor | None = None,
    cluster_id: uuid.UUID | None = None,
    state: PoolState | None = None,
) -> list[PoolRecord]:
    """Up to ``limit`` pools in name order (without case), after the ``after`` key."""
    after_name, after_id = after if after is not None else (None, None)
    rows = await db.fetch(
        f"""{_SELECT_POOL}
        WHERE ($1::text IS NULL OR (lower(p.name), p.id) > ($1, $2::uuid))
          AND ($3::uuid IS NULL OR p.cluster_id = $3)
          AND ($4::text IS NULL OR p.state = $4)
        ORDER BY lower(p.name), p.id
        LIMIT $5""",
        after_name,
        None if after_id is None else uuid.UUID(after_id),
        cluster_id,
        None if state is None else str(state),
        limit,
    )
    return [pool_record_from_row(row) for row in rows]


#: Up to ``$5`` of the pools a user (``$3``) is entitled to, directly or through one of his
#: groups (``$4``); in name order (without case), after the key ``($1, $2)``, as
#: :func:`list_pools`. Its arguments: :func:`entitled_pools_arguments`. A statement that
#: reads more of each listed pool reads it ``WITH`` (``deskpool.pool_admin.store``).
ENTITLED_POOLS = f"""{_SELECT_POOL}
        WHERE ($1::text IS NULL OR (lower(p.name), p.id) > ($1, $2::uuid))
          AND p.id IN (SELECT e.pool_id FROM pool_entitlements e
                        WHERE (e.subject_type = 'user' AND e.subject_id = $3)
                           OR (e.subject_type = 'group' AND e.subject_id = ANY($4::uuid[])))
        ORDER BY lower(p.name), p.id
        LIMIT $5"""


def entitled_pools_arguments(
    user_id: str | uuid.UUID,
    group_ids: Iterable[str | uuid.UUID],
    *,
    limit: int,
    after: PoolCursor | None,
) -> tuple[Any, ...]:
    """The arguments ``$1`` to ``$5`` of :data:`ENTITLED_POOLS`."""
    after_name, after_id = after if after is not None else (None, None)
    return (
        after_name,
        None if after_id is None else uuid.UUID(after_id),
        as_uuid(user_id),
        [as_uuid(group_id) for group_id in group_ids],
        limit,
    )


def reconcile_relevant_change(current: Pool, proposed: Pool) -> bool:
    """Whether going from ``current`` to ``proposed`` changes what reconciliation does."""
    return any(getattr(current, name) != getattr(proposed, name) for name in RECONCILE_FIELDS)


_UNCHANGED: Any = object()


async def update_pool(
    connection: asyncpg.Connection,
    current: Pool,
    proposed: Pool,
    *,
    description: str | None = None,
    domain_join: DomainJoin | None = _UNCHANGED,
) -> PoolRecord:
    """Write ``proposed`` over ``current`` (same id); return the stored record.

    The generation is bumped when a field of :data:`RECONCILE_FIELDS` changes (``proposed``'s
    own ``generation`` and ``reconciled_generation`` are ignored). Call it with the pool's row
    locked (:func:`get_pool` ``for_update``).

    :param description: the new description; ``None`` keeps it.
    :param domain_join: the new domain-join settings, ``None`` to remove them; left out keeps
        them.
    :raises PoolNameTaken: the new name is in use by another pool.
    :raises NotFound: the pool does not exist.
    """
    if proposed.id != current.id:
        raise ValueError("update_pool cannot change a pool's id")
    bump = 1 if reconcile_relevant_change(current, proposed) else 0
    keep_domain_join = domain_join is _UNCHANGED
    with _pool_constraints(proposed):
        updated = await connection.fetchval(
            """
            UPDATE pools
               SET name = $2, cluster_id = $3, template = $4, kind = $5, os_type = $6,
                   clone_mode = $7, min_size = $8, max_size = $9, spare = $10,
                   naming_pattern = $11, target_nodes = $12, storage = $13, state = $14,
                   description = coalesce($15, description),
                   domain_join = CASE WHEN $16 THEN domain_join ELSE $17::jsonb END,
                   generation = generation + $18, schedule_id = $19,
                   updated_at = now()
             WHERE id = $1
            RETURNING true
            """,
            current.id,
            proposed.name,
            proposed.cluster_id,
            proposed.template,
            str(proposed.kind),
            str(proposed.os_type),
            str(proposed.clone_mode),
            proposed.min_size,
            proposed.max_size,
            proposed.spare,
            proposed.naming_pattern,
            list(proposed.target_nodes),
            proposed.storage,
            str(proposed.state),
            description,
            keep_domain_join,
            None if keep_domain_join or domain_join is None else json.dumps(domain_join.as_json()),
            bump,
            proposed.schedule_id,
        )
    if not updated:
        raise NotFound(f"No pool has the id {current.id}.")
    record = await get_pool_record(connection, current.id)
    assert record is not None
    return record


async def set_pool_state(
    connection: asyncpg.Connection, pool_id: uuid.UUID, state: PoolState
) -> Pool | None:
    """Set a pool's state (bumping its generation when it changes); ``None`` if it is gone."""
    row = await connection.fetchrow(
        """
        UPDATE pools
           SET state = $2,
               generation = generation + (state <> $2)::int,
               updated_at = CASE WHEN state <> $2 THEN now() ELSE updated_at END
         WHERE id = $1
        RETURNING *
        """,
        pool_id,
        str(state),
    )
    return None if row is None else pool_from_row(row)


async def delete_pool(connection: asyncpg.Connection, pool_id: uuid.UUID) -> bool:
    """Delete an empty pool, its entitlements and its domain-join password.

    A pool with desktop records is refused: drain it first (state ``draining``), and delete it
    once reconciliation has removed its desktops. The pool's row is locked first, so a desktop
    inserted concurrently either is counted or fails its foreign key.

    :returns: ``False`` when the pool did not exist.
    :raises PoolNotEmpty: the pool still has desktops (``extra`` has their count).
    """
    async with connection.transaction():
        exists = await connection.fetchval(
            "SELECT true FROM pools WHERE id = $1 FOR UPDATE", pool_id
        )
        if not exists:
            return False
        count: int = await connection.fetchval(
            "SELECT count(*) FROM desktops WHERE pool_id = $1", pool_id
        )
        if count:
            raise PoolNotEmpty(
                f"The pool has {count} desktop(s). Set its state to draining; once "
                "reconciliation has deleted its desktops, delete the pool.",
                extra={"desktops": count},
            )
        await connection.execute("DELETE FROM pools WHERE id = $1", pool_id)
        await DOMAIN_JOIN_PASSWORD.delete(connection, pool_id)
    return True


async def pool_exists(db: Db, pool_id: uuid.UUID) -> bool:
    """Whether the pool exists."""
    return bool(await db.fetchval("SELECT true FROM pools WHERE id = $1", pool_id))


async def pool_counts(db: Db, pool_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, PoolSummary]:
    """Desktop counts of each pool (by state, assigned, in a session, available).

    Every pool of ``pool_ids`` is in the result, with zeros when it has no desktops.
    """
    rows = await db.fetch(
        """
        SELECT pool_id, state, count(*) AS total,
               count(*) FILTER (WHERE assigned_user IS NOT NULL) AS assigned,
               count(*) FILTER (WHERE in_session) AS in_session,
               count(*) FILTER (WHERE state = 'ready' AND assigned_user IS NULL
                                  AND NOT in_session AND NOT used_since_refresh) AS available
          FROM desktops
         WHERE pool_id = ANY($1::uuid[])
         GROUP BY pool_id, state
        """,
        list(pool_ids),
    )
    grouped = group_rows(rows, "pool_id", pool_ids, lambda row: row)
    template_rows = await db.fetch(
        """
        SELECT pool_id, template, count(*) AS total
          FROM desktops
         WHERE pool_id = ANY($1::uuid[]) AND template IS NOT NULL
         GROUP BY pool_id, template
        """,
        list(pool_ids),
    )
    templates: dict[uuid.UUID, dict[str, int]] = {pool_id: {} for pool_id in pool_ids}
    for row in template_rows:
        templates.setdefault(row["pool_id"], {})[row["template"]] = int(row["total"])
    summaries = {}
    for pool_id, pool_rows in grouped.items():
        by_state = dict.fromkeys(DesktopState, 0)
        for row in pool_rows:
            by_state[DesktopState(row["state"])] = int(row["total"])
        summaries[pool_id] = PoolSummary(
            total=sum(by_state.values()),
            by_state=by_state,
            assigned=sum(int(row["assigned"]) for row in pool_rows),
            in_session=sum(int(row["in_session"]) for row in pool_rows),
            available=sum(int(row["available"]) for row in pool_rows),
            by_template=templates.get(pool_id, {}),
        )
    return summaries


def with_changes(pool: Pool, changes: Mapping[str, Any]) -> Pool:
    """``pool`` with the model fields of ``changes`` replaced (other keys are ignored)."""
    names = {field.name for field in fields(Pool)} - {"id", "generation", "reconciled_generation"}
    return replace(pool, **{key: value for key, value in changes.items() if key in names})
