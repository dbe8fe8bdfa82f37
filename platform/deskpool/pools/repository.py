"""SQL of the pool aggregate: pools, their desktops and entitlements (orphans: store_orphans).

Rows map to the pure model of :mod:`deskpool.pools.model` (:class:`Pool`, :class:`Desktop`);
what the model does not hold (a pool's description, domain-join settings, health, times) comes
with a :class:`PoolRecord`. Writes take a connection, so a caller changes a record, enqueues
its jobs and records its audit event in one transaction.

Rules kept here:

- *Generations.* :func:`update_pool` bumps a pool's ``generation`` when a setting that
  reconciliation reads changes (:data:`RECONCILE_FIELDS`); a rename or a new description does
  not. :func:`mark_reconciled` records the generation a finished pass saw.
- *Deletion.* :func:`delete_pool` refuses (409 ``pool_not_empty``) while the pool has desktop
  records: an administrator drains the pool first (state ``draining``; reconciliation deletes
  each desktop as it becomes free), then deletes the empty pool. Nothing a user holds is ever
  destroyed by a single request.
- *State changes of desktops* go through :func:`apply_event`: the row is locked, the pure
  :func:`deskpool.pools.states.transition` decides, and the result is written, so an illegal
  event is a 409 ``illegal_transition`` and two writers never interleave.
- *Allocation* (:func:`allocate_desktop`) follows :mod:`deskpool.pools.allocation`: the
  user's own desktop first, then free ready desktops oldest first, locked with
  ``FOR UPDATE SKIP LOCKED`` so concurrent requests never get the same desktop, and serialized
  per pool and user (a transaction advisory lock) so one user never gets two.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeAlias

import asyncpg

from deskpool.errors import Conflict, FieldError, NotFound, ValidationFailed
from deskpool.pools.allocation import allocation_candidates, choose_desktop, held_desktops
from deskpool.pools.model import (
    CloneMode,
    Desktop,
    DesktopState,
    OsType,
    Pool,
    PoolKind,
    PoolState,
)
from deskpool.pools.naming import name_key
from deskpool.pools.planner import HealthStatus, PoolHealth, PoolSummary
from deskpool.pools.states import Allocated, DesktopEvent, transition
from deskpool.secrets import (
    SecretContext,
    SecretMetadata,
    SecretStore,
    SecretValue,
    delete_secrets_of,
    get_secret,
    put_secret,
    secret_metadata,
)

Db: TypeAlias = asyncpg.Connection | asyncpg.Pool

#: The secret-store kind of a pool's domain-join password (the owner is the pool's id).
DOMAIN_JOIN_KIND = "pool.domain_join"
#: The field the domain-join password is sealed under.
DOMAIN_JOIN_PASSWORD_FIELD = "password"

#: Pool settings reconciliation reads: changing one bumps the pool's generation.
RECONCILE_FIELDS = frozenset(
    field.name
    for field in fields(Pool)
    if field.name not in {"id", "name", "generation", "reconciled_generation"}
)


# ------------------------------------------------------------------------------ errors


class PoolNameTaken(Conflict):
    """Another pool already has this name (names are compared without case)."""

    code = "pool_name_taken"
    title = "A pool with this name exists"


class PoolNotEmpty(Conflict):
    """The pool still has desktops; drain it first."""

    code = "pool_not_empty"
    title = "The pool has desktops"


class DesktopNameTaken(Conflict):
    """A desktop of the same cluster already has one of the names."""

    code = "desktop_name_taken"
    title = "A desktop with this name exists on the cluster"


class SubjectType(StrEnum):
    """Who an entitlement is granted to."""

    USER = "user"
    GROUP = "group"


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


@dataclass(frozen=True, slots=True)
class DesktopRecord:
    """A stored desktop: the model, and what only the record holds."""

    desktop: Desktop
    cluster_id: uuid.UUID
    node: str | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Entitlement:
    """A user or group that may open a pool's desktops."""

    pool_id: uuid.UUID
    subject_type: SubjectType
    subject_id: uuid.UUID
    created_at: datetime


# ------------------------------------------------------------------------------ mapping


def pool_from_row(row: Mapping[str, Any]) -> Pool:
    """Build a :class:`Pool` from a ``pools`` row."""
    return Pool(
        id=row["id"],
        name=row["name"],
        cluster_id=row["cluster_id"],
        template=row["template"],
        kind=PoolKind(row["kind"]),
        min_size=row["min_size"],
        max_size=row["max_size"],
        spare=row["spare"],
        naming_pattern=row["naming_pattern"],
        os_type=OsType(row["os_type"]),
        clone_mode=CloneMode(row["clone_mode"]),
        target_nodes=tuple(row["target_nodes"] or ()),
        storage=row["storage"],
        state=PoolState(row["state"]),
        generation=row["generation"],
        reconciled_generation=row["reconciled_generation"],
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
    return PoolRecord(
        pool=pool_from_row(row),
        description=row["description"],
        domain_join=DomainJoin.from_json(domain_join) if domain_join else None,
        domain_join_password=SecretMetadata(is_set=changed_at is not None, changed_at=changed_at),
        health=health_from_json(row["health"]),
        reconciled_at=row["reconciled_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def desktop_from_row(row: Mapping[str, Any]) -> Desktop:
    """Build a :class:`Desktop` from a ``desktops`` row."""
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
    return DesktopRecord(
        desktop=desktop_from_row(row),
        cluster_id=row["cluster_id"],
        node=row["node"],
        updated_at=row["updated_at"],
    )


def _user_uuid(user_id: str | uuid.UUID | None) -> uuid.UUID | None:
    if user_id is None or isinstance(user_id, uuid.UUID):
        return user_id
    return uuid.UUID(user_id)


# ------------------------------------------------------------------------------ pools

_SELECT_POOL = f"""
SELECT p.*, s.updated_at AS domain_join_password_changed_at
  FROM pools AS p
  LEFT JOIN sealed_secrets AS s
    ON s.kind = '{DOMAIN_JOIN_KIND}' AND s.field = '{DOMAIN_JOIN_PASSWORD_FIELD}'
   AND s.owner_id = p.id::text
"""


def domain_join_context(pool_id: uuid.UUID | str) -> SecretContext:
    """The secret context a pool's domain-join password is sealed for."""
    return SecretContext.of(DOMAIN_JOIN_KIND, pool_id, DOMAIN_JOIN_PASSWORD_FIELD)


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
    try:
        await connection.execute(
            """
            INSERT INTO pools (id, name, description, cluster_id, template, kind, os_type,
                               clone_mode, min_size, max_size, spare, naming_pattern,
                               target_nodes, storage, state, generation, reconciled_generation,
                               domain_join)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
                    $18::jsonb)
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
        )
    except asyncpg.UniqueViolationError:
        raise PoolNameTaken(f"A pool named {pool.name!r} exists.") from None
    except asyncpg.ForeignKeyViolationError:
        raise ValidationFailed(
            [FieldError("/cluster_id", f"No cluster has the id {pool.cluster_id}.")]
        ) from None
    record = await get_pool_record(connection, pool.id)
    assert record is not None
    return record


async def get_pool(db: Db, pool_id: uuid.UUID, *, for_update: bool = False) -> Pool | None:
    """The pool ``pool_id``, or ``None``; ``for_update`` locks its row."""
    lock = " FOR UPDATE" if for_update else ""
    row = await db.fetchrow(f"SELECT * FROM pools WHERE id = $1{lock}", pool_id)
    return None if row is None else pool_from_row(row)


async def get_pool_record(
    db: Db, pool_id: uuid.UUID, *, for_update: bool = False
) -> PoolRecord | None:
    """The stored pool ``pool_id`` with its record-only fields, or ``None``."""
    lock = " FOR UPDATE OF p" if for_update else ""
    row = await db.fetchrow(f"{_SELECT_POOL} WHERE p.id = $1{lock}", pool_id)
    return None if row is None else pool_record_from_row(row)


async def get_pools(db: Db, pool_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, PoolRecord]:
    """The stored pools among ``pool_ids``, by id (missing ids are left out)."""
    rows = await db.fetch(f"{_SELECT_POOL} WHERE p.id = ANY($1::uuid[])", list(pool_ids))
    return {row["id"]: pool_record_from_row(row) for row in rows}


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
    pool_ids: Collection[uuid.UUID] | None = None,
) -> list[PoolRecord]:
    """Up to ``limit`` pools in name order (without case), after the ``after`` key.

    :param pool_ids: only these pools (``None``: every pool).
    """
    after_name, after_id = after if after is not None else (None, None)
    rows = await db.fetch(
        f"""{_SELECT_POOL}
        WHERE ($1::text IS NULL OR (lower(p.name), p.id) > ($1, $2::uuid))
          AND ($3::uuid IS NULL OR p.cluster_id = $3)
          AND ($4::text IS NULL OR p.state = $4)
          AND ($5::uuid[] IS NULL OR p.id = ANY($5))
        ORDER BY lower(p.name), p.id
        LIMIT $6""",
        after_name,
        None if after_id is None else uuid.UUID(after_id),
        cluster_id,
        None if state is None else str(state),
        None if pool_ids is None else list(pool_ids),
        limit,
    )
    return [pool_record_from_row(row) for row in rows]


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
    try:
        updated = await connection.fetchval(
            """
            UPDATE pools
               SET name = $2, cluster_id = $3, template = $4, kind = $5, os_type = $6,
                   clone_mode = $7, min_size = $8, max_size = $9, spare = $10,
                   naming_pattern = $11, target_nodes = $12, storage = $13, state = $14,
                   description = coalesce($15, description),
                   domain_join = CASE WHEN $16 THEN domain_join ELSE $17::jsonb END,
                   generation = generation + $18,
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
        )
    except asyncpg.UniqueViolationError:
        raise PoolNameTaken(f"A pool named {proposed.name!r} exists.") from None
    except asyncpg.ForeignKeyViolationError:
        raise ValidationFailed(
            [FieldError("/cluster_id", f"No cluster has the id {proposed.cluster_id}.")]
        ) from None
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
        await delete_secrets_of(connection, DOMAIN_JOIN_KIND, str(pool_id))
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
    grouped: dict[uuid.UUID, list[Mapping[str, Any]]] = {pool_id: [] for pool_id in pool_ids}
    for row in rows:
        grouped.setdefault(row["pool_id"], []).append(row)
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
        )
    return summaries


# ------------------------------------------------------------------------------ reconciliation


async def pools_to_reconcile(db: Db, limit: int) -> list[Pool]:
    """Up to ``limit`` pools, the longest unreconciled first (never reconciled before all)."""
    rows = await db.fetch(
        "SELECT * FROM pools ORDER BY reconciled_at NULLS FIRST, id LIMIT $1", limit
    )
    return [pool_from_row(row) for row in rows]


async def mark_reconciled(db: Db, pool_id: uuid.UUID, generation: int, health: PoolHealth) -> bool:
    """Record a finished pass over the pool: the generation it saw, its health, the time.

    ``reconciled_generation`` never goes backwards nor beyond the pool's generation.

    :returns: ``False`` when the pool is gone.
    """
    done = await db.fetchval(
        """
        UPDATE pools
           SET reconciled_generation = greatest(reconciled_generation, least($2, generation)),
               reconciled_at = now(),
               health = $3::jsonb
         WHERE id = $1
        RETURNING true
        """,
        pool_id,
        generation,
        json.dumps(health_to_json(health)),
    )
    return bool(done)


async def desktops_of_pools(
    db: Db, pool_ids: Collection[uuid.UUID]
) -> dict[uuid.UUID, list[Desktop]]:
    """The desktops of each pool (every pool of ``pool_ids`` is a key), oldest first."""
    rows = await db.fetch(
        "SELECT * FROM desktops WHERE pool_id = ANY($1::uuid[]) ORDER BY created_at, name, id",
        list(pool_ids),
    )
    result: dict[uuid.UUID, list[Desktop]] = {pool_id: [] for pool_id in pool_ids}
    for row in rows:
        result.setdefault(row["pool_id"], []).append(desktop_from_row(row))
    return result


async def desktop_names_on_clusters(
    db: Db, cluster_ids: Collection[uuid.UUID]
) -> dict[uuid.UUID, set[str]]:
    """The :func:`~deskpool.pools.naming.name_key` of every desktop name on each cluster."""
    rows = await db.fetch(
        "SELECT cluster_id, name FROM desktops WHERE cluster_id = ANY($1::uuid[])",
        list(cluster_ids),
    )
    result: dict[uuid.UUID, set[str]] = {cluster_id: set() for cluster_id in cluster_ids}
    for row in rows:
        result.setdefault(row["cluster_id"], set()).add(name_key(row["name"]))
    return result


# ------------------------------------------------------------------------------ desktops


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
    lock = " FOR UPDATE" if for_update else ""
    row = await db.fetchrow(f"SELECT * FROM desktops WHERE id = $1{lock}", desktop_id)
    return None if row is None else desktop_from_row(row)


async def get_desktop_record(
    db: Db, desktop_id: uuid.UUID, *, for_update: bool = False
) -> DesktopRecord | None:
    """The stored desktop ``desktop_id`` with its record-only fields, or ``None``."""
    lock = " FOR UPDATE" if for_update else ""
    row = await db.fetchrow(f"SELECT * FROM desktops WHERE id = $1{lock}", desktop_id)
    return None if row is None else desktop_record_from_row(row)


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
        _user_uuid(assigned_user),
        limit,
    )
    return [desktop_record_from_row(row) for row in rows]


async def desktops_held_by(
    db: Db, user_id: str | uuid.UUID, pool_ids: Collection[uuid.UUID] | None = None
) -> list[Desktop]:
    """The desktops assigned to the user (in ``pool_ids`` if given), in use first, then ready."""
    rows = await db.fetch(
        """
        SELECT * FROM desktops
         WHERE assigned_user = $1 AND ($2::uuid[] IS NULL OR pool_id = ANY($2))
         ORDER BY CASE state WHEN 'in_use' THEN 0 WHEN 'ready' THEN 1 ELSE 2 END,
                  created_at, name, id
        """,
        _user_uuid(user_id),
        None if pool_ids is None else list(pool_ids),
    )
    return [desktop_from_row(row) for row in rows]


async def _write_desktop(connection: asyncpg.Connection, desktop: Desktop) -> Desktop:
    row = await connection.fetchrow(
        """
        UPDATE desktops
           SET state = $2, vm_id = $3, template = $4, assigned_user = $5, in_session = $6,
               used_since_refresh = $7, failed_step = $8, last_error = $9, failure_count = $10,
               last_failed_at = $11, state_changed_at = $12, updated_at = now()
         WHERE id = $1
        RETURNING *
        """,
        desktop.id,
        str(desktop.state),
        desktop.vm_id,
        desktop.template,
        _user_uuid(desktop.assigned_user),
        desktop.in_session,
        desktop.used_since_refresh,
        None if desktop.failed_step is None else str(desktop.failed_step),
        desktop.last_error,
        desktop.failure_count,
        desktop.last_failed_at,
        desktop.state_changed_at,
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
        if pool is None or pool.id != desktop.pool_id:
            pool = await get_pool(connection, desktop.pool_id)
            if pool is None:
                raise NotFound(f"No pool has the id {desktop.pool_id}.")
        after = transition(desktop, event, pool=pool, now=now or datetime.now(UTC))
        if after == desktop:
            return desktop
        return await _write_desktop(connection, after)


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


# ------------------------------------------------------------------------------ allocation


async def allocate_desktop(
    connection: asyncpg.Connection,
    pool: Pool,
    user_id: str | uuid.UUID,
    now: datetime | None = None,
) -> Desktop:
    """Hand a desktop of ``pool`` to ``user_id`` and return it (state ``in_use``).

    The order is :mod:`deskpool.pools.allocation`'s: the desktop the user holds first (in use,
    then ready), else a free, ready, clean desktop, oldest first. Free desktops are locked with
    ``FOR UPDATE SKIP LOCKED`` and re-checked, so two concurrent requests never get the same
    desktop; requests of one user for one pool are serialized by a transaction advisory lock,
    so a user never gets two. Runs in a transaction of its own (a savepoint inside the
    caller's); the lock lasts until the outermost transaction ends.

    :param pool: the pool as the caller read it; its state is read again here.
    :raises PoolUnavailable: the pool is disabled, or draining and the user holds nothing.
    :raises DesktopNotReady: the user's desktop in a persistent pool is not ready yet.
    :raises NoDesktopAvailable: no free desktop is ready.
    :raises NotFound: the pool is gone.
    """
    user = str(user_id)
    when = now or datetime.now(UTC)
    async with connection.transaction():
        await connection.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            f"deskpool.allocate:{pool.id}:{user}",
        )
        current = await get_pool(connection, pool.id)
        if current is None:
            raise NotFound(f"No pool has the id {pool.id}.")
        held_rows = await connection.fetch(
            """
            SELECT * FROM desktops
             WHERE pool_id = $1 AND assigned_user = $2 AND state <> 'deleting'
             FOR UPDATE
            """,
            current.id,
            _user_uuid(user),
        )
        held = held_desktops(current, [desktop_from_row(row) for row in held_rows], user)
        candidates, new_assignment = allocation_candidates(current, held, user)
        if candidates and not new_assignment:
            return await _allocate(connection, current, candidates[0], user, when)
        if new_assignment:
            while True:
                row = await connection.fetchrow(
                    """
                    SELECT * FROM desktops
                     WHERE pool_id = $1 AND state = 'ready' AND assigned_user IS NULL
                       AND NOT in_session AND NOT used_since_refresh
                     ORDER BY created_at, name, id
                     LIMIT 1
                     FOR UPDATE SKIP LOCKED
                    """,
                    current.id,
                )
                if row is None:
                    break
                desktop = desktop_from_row(row)
                if desktop.is_available:
                    return await _allocate(connection, current, desktop, user, when)
        # Nothing to hand out: the pure rules say why (disabled, draining, not ready, none free).
        choose_desktop(current, held, user)
        raise AssertionError("choose_desktop chose a desktop allocation_candidates did not offer")


async def _allocate(
    connection: asyncpg.Connection, pool: Pool, desktop: Desktop, user: str, now: datetime
) -> Desktop:
    after = transition(desktop, Allocated(user), pool=pool, now=now)
    return await _write_desktop(connection, after)


# ------------------------------------------------------------------------------ entitlements


def _entitlement(row: Mapping[str, Any]) -> Entitlement:
    return Entitlement(
        pool_id=row["pool_id"],
        subject_type=SubjectType(row["subject_type"]),
        subject_id=row["subject_id"],
        created_at=row["created_at"],
    )


async def subject_exists(db: Db, subject_type: SubjectType, subject_id: uuid.UUID) -> bool:
    """Whether the user or group exists."""
    table = "users" if subject_type is SubjectType.USER else "groups"
    return bool(await db.fetchval(f"SELECT true FROM {table} WHERE id = $1", subject_id))


async def grant_entitlement(
    connection: asyncpg.Connection,
    pool_id: uuid.UUID,
    subject_type: SubjectType,
    subject_id: uuid.UUID,
) -> tuple[Entitlement, bool]:
    """Entitle the user or group to the pool; return it and whether it is new.

    :raises NotFound: the pool is gone.
    """
    try:
        row = await connection.fetchrow(
            """
            INSERT INTO pool_entitlements (pool_id, subject_type, subject_id)
            VALUES ($1, $2, $3)
            ON CONFLICT (pool_id, subject_type, subject_id) DO NOTHING
            RETURNING *
            """,
            pool_id,
            str(subject_type),
            subject_id,
        )
    except asyncpg.ForeignKeyViolationError:
        raise NotFound(f"No pool has the id {pool_id}.") from None
    if row is not None:
        return _entitlement(row), True
    row = await connection.fetchrow(
        """
        SELECT * FROM pool_entitlements
         WHERE pool_id = $1 AND subject_type = $2 AND subject_id = $3
        """,
        pool_id,
        str(subject_type),
        subject_id,
    )
    assert row is not None
    return _entitlement(row), False


async def revoke_entitlement(
    connection: asyncpg.Connection,
    pool_id: uuid.UUID,
    subject_type: SubjectType,
    subject_id: uuid.UUID,
) -> bool:
    """Remove an entitlement; ``False`` when there was none."""
    done = await connection.fetchval(
        """
        DELETE FROM pool_entitlements
         WHERE pool_id = $1 AND subject_type = $2 AND subject_id = $3
        RETURNING true
        """,
        pool_id,
        str(subject_type),
        subject_id,
    )
    return bool(done)


async def revoke_subject_entitlements(
    connection: asyncpg.Connection, subject_type: SubjectType, subject_id: uuid.UUID
) -> int:
    """Remove every entitlement of a user or group (it is being deleted); how many there were."""
    done = await connection.execute(
        "DELETE FROM pool_entitlements WHERE subject_type = $1 AND subject_id = $2",
        str(subject_type),
        subject_id,
    )
    return int(done.split()[-1])


#: The sort key of the entitlement list, as a cursor stores it: ``[subject_type, subject_id]``.
EntitlementCursor = tuple[str, str]


def entitlement_cursor(entitlement: Entitlement) -> list[str]:
    """The cursor key of a listed entitlement (see :func:`list_entitlements`)."""
    return [str(entitlement.subject_type), str(entitlement.subject_id)]


async def list_entitlements(
    db: Db, pool_id: uuid.UUID, *, limit: int, after: EntitlementCursor | None = None
) -> list[Entitlement]:
    """Up to ``limit`` entitlements of the pool, groups before users, after ``after``."""
    after_type, after_id = after if after is not None else (None, None)
    rows = await db.fetch(
        """
        SELECT * FROM pool_entitlements
         WHERE pool_id = $1
           AND ($2::text IS NULL OR (subject_type, subject_id) > ($2, $3::uuid))
         ORDER BY subject_type, subject_id
         LIMIT $4
        """,
        pool_id,
        after_type,
        None if after_id is None else uuid.UUID(after_id),
        limit,
    )
    return [_entitlement(row) for row in rows]


def _uuids(values: Iterable[str | uuid.UUID]) -> list[uuid.UUID]:
    result = []
    for value in values:
        try:
            result.append(value if isinstance(value, uuid.UUID) else uuid.UUID(value))
        except ValueError:
            continue
    return result


async def entitled_pools(
    db: Db, user_id: str | uuid.UUID, group_ids: Iterable[str | uuid.UUID]
) -> set[uuid.UUID]:
    """The pools the user is entitled to, directly or through one of ``group_ids``."""
    rows = await db.fetch(
        """
        SELECT DISTINCT pool_id FROM pool_entitlements
         WHERE (subject_type = 'user' AND subject_id = $1)
            OR (subject_type = 'group' AND subject_id = ANY($2::uuid[]))
        """,
        _user_uuid(user_id),
        _uuids(group_ids),
    )
    return {row["pool_id"] for row in rows}


async def is_entitled(
    db: Db, pool_id: uuid.UUID, user_id: str | uuid.UUID, group_ids: Iterable[str | uuid.UUID]
) -> bool:
    """Whether the user is entitled to the pool, directly or through one of ``group_ids``."""
    found = await db.fetchval(
        """
        SELECT true FROM pool_entitlements
         WHERE pool_id = $1
           AND ((subject_type = 'user' AND subject_id = $2)
                OR (subject_type = 'group' AND subject_id = ANY($3::uuid[])))
         LIMIT 1
        """,
        pool_id,
        _user_uuid(user_id),
        _uuids(group_ids),
    )
    return bool(found)


# ------------------------------------------------------------------------------ domain join


async def store_domain_join_password(
    connection: asyncpg.Connection,
    store: SecretStore,
    pool_id: uuid.UUID,
    password: SecretValue,
) -> SecretMetadata:
    """Seal the pool's domain-join password, replacing any.

    :raises SecretsUnavailable: no master key is configured (a 503 problem).
    """
    return await put_secret(connection, store, domain_join_context(pool_id), password)


async def delete_domain_join_password(connection: asyncpg.Connection, pool_id: uuid.UUID) -> None:
    """Remove the pool's domain-join password."""
    await delete_secrets_of(connection, DOMAIN_JOIN_KIND, str(pool_id))


async def domain_join_password_metadata(db: Db, pool_id: uuid.UUID) -> SecretMetadata:
    """Whether the pool's domain-join password is set, and when it changed."""
    return await secret_metadata(db, domain_join_context(pool_id))


async def load_domain_join_password(
    db: Db, store: SecretStore, pool_id: uuid.UUID
) -> SecretValue | None:
    """Open the pool's domain-join password (for the provisioning job); ``None`` if unset."""
    return await get_secret(db, store, domain_join_context(pool_id))


def with_changes(pool: Pool, changes: Mapping[str, Any]) -> Pool:
    """``pool`` with the model fields of ``changes`` replaced (other keys are ignored)."""
    names = {field.name for field in fields(Pool)} - {"id", "generation", "reconciled_generation"}
    return replace(pool, **{key: value for key, value in changes.items() if key in names})
