"""Pool administration, one function per use case: what the API, the CLI and plugins call.

Each change validates, changes, records its audit event through the :class:`Actor` and
enqueues its jobs in one transaction, so a request either happens whole or not at all.
Changes take typed commands (:mod:`deskpool.pools.commands`). A new template or cluster is
looked up through the cluster's driver before the transaction
(:func:`~deskpool.pools.lookups.check_template`), so no driver call holds a row lock.

It is a package of its own, above everything a pool's administration drives (desktops,
sessions, starts, rollouts, revocation, reconciliation's orphans): the pool aggregate below
(:mod:`deskpool.pools`) imports none of them.

The reads the API renders are here too (:func:`list_pools`, :func:`show_pools`,
:func:`list_entitlements`, :func:`my_pools`, and
:func:`~deskpool.pools.lookups.get_pool` re-exported), so no handler reaches a store.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deskpool.actor import Actor
from deskpool.client_policy.model import changed_members
from deskpool.clusters.repository import get_cluster
from deskpool.desktops.jobs import CLUSTERS, enqueue_orphan_deletion
from deskpool.errors import (
    InvalidCursor,
    LocatedFieldError,
    NotFound,
    ValidationFailed,
)
from deskpool.identity import rules
from deskpool.identity.refusals import audited_refusals
from deskpool.jobs.model import Job
from deskpool.licensing.service import check_can_create_pool
from deskpool.pool_admin import store
from deskpool.pool_admin.store import HeldPool as HeldPool
from deskpool.pools import store as store_pools
from deskpool.pools import store_entitlements
from deskpool.pools.commands import ChangePool, CreatePool, DomainJoinInput
from deskpool.pools.jobs import enqueue_pool_reconcile
from deskpool.pools.lookups import (
    TemplateCheck as TemplateCheck,
)
from deskpool.pools.lookups import (
    check_template as check_template,
)
from deskpool.pools.lookups import (
    cluster_or_422,
    field_error,
)
from deskpool.pools.lookups import (
    get_pool as get_pool,
)
from deskpool.pools.model import (
    OsType,
    Pool,
    PoolState,
    PoolSummary,
    validate_pool,
    validate_pool_change,
)
from deskpool.pools.store import DomainJoin, PoolCursor, PoolRecord
from deskpool.pools.store import pool_cursor as pool_cursor
from deskpool.pools.store_entitlements import (
    Entitlement,
    EntitlementCursor,
    SubjectType,
)
from deskpool.pools.store_entitlements import (
    entitlement_cursor as entitlement_cursor,
)
from deskpool.reconciliation.store_orphans import OrphanRecord, list_orphans, lock_orphan
from deskpool.revocation.service import announce, revoke_lost_access, users_of_group
from deskpool.rollouts import store as rollout_store
from deskpool.rollouts.model import RolloutConflict
from deskpool.sessions import service as sessions
from deskpool.sessions.model import PolicyChange, SessionPolicy
from deskpool.unset import Unset

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)


def _check_domain_join(pool: Pool, join: DomainJoin | None) -> None:
    if join is not None and pool.os_type is not OsType.WINDOWS:
        raise field_error("/domain_join", "Only Windows pools join a domain.")


def _raise_invalid(errors: list[Any]) -> None:
    if errors:
        raise ValidationFailed(
            [LocatedFieldError(error.pointer, error.message) for error in errors]
        )


@dataclass(frozen=True)
class PoolWritten:
    """A pool as a create or change left it, with its session policy and template check."""

    record: PoolRecord
    policy: SessionPolicy
    check: TemplateCheck


async def create_pool(runtime: Runtime, actor: Actor, command: CreatePool) -> PoolWritten:
    """Create a pool; enqueue its first reconciliation.

    :raises ValidationFailed: invalid settings, an unknown cluster or template.
    :raises deskpool.licensing.service.LicenseLimitReached: the license allows no more pools.
    """
    pool = Pool(id=uuid.uuid4(), **command.model_members())
    _raise_invalid(validate_pool(pool))
    policy = sessions.checked_policy(command.session_policy or PolicyChange())
    join = command.domain_join.settings if command.domain_join else None
    _check_domain_join(pool, join)
    password = command.domain_join.password if command.domain_join else None
    if join is not None and password is None:
        raise field_error("/domain_join/password", "Missing data for required field.")
    cluster = await cluster_or_422(runtime.db, pool.cluster_id)
    check = await check_template(runtime, cluster, pool.template, pool.os_type)
    pool = Pool(id=pool.id, **{**command.model_members(), "template": check.template})
    async with runtime.db.acquire() as connection, connection.transaction():
        await check_can_create_pool(connection, runtime.licensing)
        await store_pools.create_pool(
            connection, pool, description=command.description, domain_join=join
        )
        if password is not None:
            await store_pools.DOMAIN_JOIN_PASSWORD.put(
                connection, runtime.secret_store, pool.id, password
            )
        await enqueue_pool_reconcile(connection, pool.id)
        await rollout_store.record_image(
            connection, pool.id, pool.template, set_by=actor.name, how="created"
        )
        if command.session_policy is not None:
            policy = await sessions.set_pool_policy(connection, pool.id, command.session_policy)
        await actor.record(
            connection,
            "pool.create",
            "pools",
            str(pool.id),
            {
                "name": pool.name,
                "cluster_id": str(pool.cluster_id),
                "template": pool.template,
                "kind": str(pool.kind),
                "min_size": pool.min_size,
                "max_size": pool.max_size,
                "spare": pool.spare,
                "state": str(pool.state),
                "domain_join": join is not None,
                "template_check": check.status,
                "client_policy": policy.client.as_json(),
            },
        )
        record = await store_pools.get_pool_record(connection, pool.id)
    assert record is not None
    return PoolWritten(record, policy, check)


async def change_pool(
    runtime: Runtime, actor: Actor, pool_id: uuid.UUID, change: ChangePool
) -> tuple[PoolRecord, TemplateCheck]:
    """Change a pool with a change request's members; the result is validated as a whole.

    Members given replace the stored ones. The cluster, kind and OS cannot change while the
    pool has desktops; a new template or cluster is looked up as on creation; a change that
    reconciliation reads bumps the generation and enqueues a reconciliation.
    ``domain_join: None`` removes the join settings and password; a ``domain_join`` without
    ``password`` keeps the stored one.

    :raises NotFound: no pool has the id.
    :raises ValidationFailed: the changed pool is not valid.
    """
    changes = change.model_changes()
    before = await store_pools.get_pool_record(runtime.db, pool_id)
    if before is None:
        raise NotFound(f"No pool has the id {pool_id}.")
    planned = store_pools.with_changes(before.pool, changes)
    check = TemplateCheck(planned.template, "not_checked")
    if planned.template != before.pool.template or planned.cluster_id != before.pool.cluster_id:
        _raise_invalid(validate_pool(planned))
        cluster = await cluster_or_422(runtime.db, planned.cluster_id)
        check = await check_template(runtime, cluster, planned.template, planned.os_type)
        if "template" in changes:
            changes["template"] = check.template
    replaces_join = not isinstance(change.domain_join, Unset)
    join_input = change.domain_join if isinstance(change.domain_join, DomainJoinInput) else None
    join = join_input.settings if join_input else None
    password = join_input.password if join_input else None
    async with runtime.db.acquire() as connection, connection.transaction():
        current = await store_pools.get_pool_record(connection, pool_id, for_update=True)
        if current is None:
            raise NotFound(f"No pool has the id {pool_id}.")
        proposed = store_pools.with_changes(current.pool, changes)
        counts = await store_pools.pool_counts(connection, [pool_id])
        _raise_invalid(
            validate_pool_change(current.pool, proposed, has_desktops=counts[pool_id].total > 0)
        )
        if proposed.template != current.pool.template:
            if await rollout_store.active_rollout(connection, pool_id) is not None:
                raise RolloutConflict(
                    "The pool has an active rollout: its template changes through the "
                    "rollout; cancel it first, or start a new one once it is done."
                )
            await rollout_store.record_image(
                connection, pool_id, proposed.template, set_by=actor.name, how="changed"
            )
        if proposed.cluster_id != current.pool.cluster_id:
            await cluster_or_422(connection, proposed.cluster_id)
        _check_domain_join(proposed, join if replaces_join else current.domain_join)
        if (
            replaces_join
            and join is not None
            and password is None
            and not current.domain_join_password.is_set
        ):
            raise field_error("/domain_join/password", "Missing data for required field.")
        updated = await store_pools.update_pool(
            connection,
            current.pool,
            proposed,
            description=None if isinstance(change.description, Unset) else change.description,
            **({"domain_join": join} if replaces_join else {}),
        )
        if updated.pool.generation != current.pool.generation:
            await enqueue_pool_reconcile(connection, pool_id)
        client_changes: dict[str, list[Any]] = {}
        if not isinstance(change.session_policy, Unset):
            before_policy = (await sessions.pool_policies(connection, [pool_id]))[pool_id]
            after_policy = await sessions.set_pool_policy(
                connection, pool_id, change.session_policy
            )
            client_changes = changed_members(before_policy.client, after_policy.client)
        if replaces_join and join is None:
            await store_pools.DOMAIN_JOIN_PASSWORD.delete(connection, pool_id)
        elif password is not None:
            await store_pools.DOMAIN_JOIN_PASSWORD.put(
                connection, runtime.secret_store, pool_id, password
            )
        await actor.record(
            connection,
            "pool.update",
            "pools",
            str(pool_id),
            {
                "fields": sorted(change.members),
                "generation": updated.pool.generation,
                "state": str(updated.pool.state),
                "domain_join_password": (
                    "removed"
                    if replaces_join and join is None
                    else "replaced"
                    if password is not None
                    else "unchanged"
                ),
                "template_check": check.status,
                **({"client_policy": client_changes} if client_changes else {}),
            },
        )
        record = await store_pools.get_pool_record(connection, pool_id)
        assert record is not None
    return record, check


async def delete_pool(runtime: Runtime, actor: Actor, pool_id: uuid.UUID) -> None:
    """Delete an empty pool, its entitlements and domain-join password.

    :raises NotFound: no pool has the id.
    :raises deskpool.pools.errors.PoolNotEmpty: the pool still has desktops.
    """
    async with runtime.db.acquire() as connection, connection.transaction():
        record = await store_pools.get_pool_record(connection, pool_id)
        if record is None or not await store_pools.delete_pool(connection, pool_id):
            raise NotFound(f"No pool has the id {pool_id}.")
        await actor.record(
            connection, "pool.delete", "pools", str(pool_id), {"name": record.pool.name}
        )


async def reconcile_pool_now(runtime: Runtime, actor: Actor, pool_id: uuid.UUID) -> Job:
    """Enqueue an immediate reconciliation of the pool (or answer the one queued)."""
    async with runtime.db.acquire() as connection, connection.transaction():
        record = await store_pools.get_pool_record(connection, pool_id, for_update=True)
        if record is None:
            raise NotFound(f"No pool has the id {pool_id}.")
        job = await enqueue_pool_reconcile(connection, pool_id)
        await actor.record(
            connection,
            "pool.reconcile",
            "pools",
            str(pool_id),
            {"job_id": job.id, "generation": record.pool.generation},
        )
    return job


def _subject_details(subject_type: SubjectType, subject_id: uuid.UUID) -> dict[str, Any]:
    """The audit details of an entitlement's subject."""
    return {"subject_type": str(subject_type), "subject_id": str(subject_id)}


async def grant_entitlement(
    runtime: Runtime,
    actor: Actor,
    pool_id: uuid.UUID,
    subject_type: SubjectType,
    subject_id: uuid.UUID,
) -> tuple[Entitlement, bool]:
    """Entitle a user or group to a pool; answer the entitlement and whether it is new.

    :raises EscalationDenied: the actor does not hold ``pools:manage`` (checked here as well as
        on the route: an entitlement hands out desktops, see :mod:`deskpool.identity.rules`).
    """
    principal = actor.principal
    async with audited_refusals(runtime, actor):
        rules.check_escalation(
            None if principal is None else principal.effective,
            {rules.POOL_ACCESS},
            "entitle anyone to a pool",
            "pools",
        )
    async with runtime.db.acquire() as connection, connection.transaction():
        if not await store_pools.pool_exists(connection, pool_id):
            raise NotFound(f"No pool has the id {pool_id}.")
        if not await store_entitlements.subject_exists(connection, subject_type, subject_id):
            raise field_error("/subject_id", f"No {subject_type} has the id {subject_id}.")
        entitlement, created = await store_entitlements.grant_entitlement(
            connection, pool_id, subject_type, subject_id
        )
        if created:
            subject = _subject_details(subject_type, subject_id)
            await actor.record(connection, "pool.entitlement.grant", "pools", str(pool_id), subject)
    return entitlement, created


async def revoke_entitlement(
    runtime: Runtime,
    actor: Actor,
    pool_id: uuid.UUID,
    subject_type: SubjectType,
    subject_id: uuid.UUID,
) -> None:
    """Revoke an entitlement; what it allowed ends at once.

    The sessions of users who may no longer open the pool's desktops (the subject, or the
    group's members and bound claims' holders, unless another entitlement or ``pools:manage``
    still allows them) are asked to close, and the desktops they hold follow the pool's rule
    after log-off (:mod:`deskpool.revocation`).
    """
    async with runtime.db.acquire() as connection, connection.transaction():
        if not await store_entitlements.revoke_entitlement(
            connection, pool_id, subject_type, subject_id
        ):
            raise NotFound(f"The {subject_type} {subject_id} is not entitled to the pool.")
        subject = _subject_details(subject_type, subject_id)
        await actor.record(connection, "pool.entitlement.revoke", "pools", str(pool_id), subject)
        concerned = (
            [subject_id]
            if subject_type is SubjectType.USER
            else await users_of_group(connection, subject_id)
        )
        revoked = await revoke_lost_access(connection, actor.audit_event, concerned)
    await announce(runtime, revoked)


async def cluster_orphans(runtime: Runtime, cluster_id: uuid.UUID) -> list[OrphanRecord]:
    """The orphans reported on a cluster, oldest report first; 404 for an unknown cluster."""
    async with runtime.db.acquire() as connection:
        if await get_cluster(connection, cluster_id) is None:
            raise NotFound(f"No cluster has the id {cluster_id}.")
        return await list_orphans(connection, cluster_id=cluster_id)


async def request_orphan_deletion(
    runtime: Runtime, actor: Actor, cluster_id: uuid.UUID, vm_id: str
) -> Job:
    """Enqueue the deletion of a reported orphan VM (or answer the one already queued).

    404 for an unknown cluster or a VM not reported as an orphan on it. The request is
    audited (``cluster.orphan_delete``) in the transaction that enqueues the job.
    """
    async with runtime.db.acquire() as connection, connection.transaction():
        if await get_cluster(connection, cluster_id) is None:
            raise NotFound(f"No cluster has the id {cluster_id}.")
        orphan = await lock_orphan(connection, cluster_id, vm_id)
        if orphan is None:
            raise NotFound(f"No orphan VM {vm_id!r} is reported on the cluster.")
        job = await enqueue_orphan_deletion(connection, cluster_id, vm_id)
        details: dict[str, Any] = {"vm_id": vm_id, "name": orphan.name, "job_id": job.id}
        if orphan.pool_id is not None:
            details["pool_id"] = str(orphan.pool_id)
        await actor.record(connection, "cluster.orphan_delete", CLUSTERS, str(cluster_id), details)
    return job


# ---------------------------------------------------------------------------------- reads


@dataclass(frozen=True)
class PoolShown:
    """A pool with what its view adds to the record: its desktop counts and session policy."""

    record: PoolRecord
    summary: PoolSummary | None
    policy: SessionPolicy


async def list_pools(
    runtime: Runtime,
    *,
    limit: int,
    after: PoolCursor | None = None,
    cluster_id: uuid.UUID | None = None,
    state: PoolState | None = None,
) -> list[PoolRecord]:
    """Pools in name order (without case), after the cursor ``after``, optionally filtered."""
    return await store_pools.list_pools(
        runtime.db, limit=limit, after=after, cluster_id=cluster_id, state=state
    )


async def show_pools(runtime: Runtime, records: Sequence[PoolRecord]) -> list[PoolShown]:
    """Each of ``records`` with its desktop counts and session policy."""
    ids = [record.pool.id for record in records]
    counts = await store_pools.pool_counts(runtime.db, ids)
    policies = await sessions.pool_policies(runtime.db, ids)
    return [
        PoolShown(record, counts.get(record.pool.id), policies[record.pool.id])
        for record in records
    ]


async def list_entitlements(
    runtime: Runtime, pool_id: uuid.UUID, *, limit: int, after: EntitlementCursor | None
) -> list[Entitlement]:
    """Who may open the pool ``pool_id`` (404 when there is none): groups, then users, by id."""
    record = await get_pool(runtime, pool_id)
    if after is not None and after[0] not in {subject.value for subject in SubjectType}:
        raise InvalidCursor()
    return await store_entitlements.list_entitlements(
        runtime.db, record.pool.id, limit=limit, after=after
    )


async def entitled_pool_ids(
    runtime: Runtime, user_id: str | uuid.UUID, group_ids: Iterable[str | uuid.UUID]
) -> set[uuid.UUID]:
    """The pools the user is entitled to, directly or through one of ``group_ids``."""
    return await store_entitlements.entitled_pools(runtime.db, user_id, group_ids)


async def my_pools(
    runtime: Runtime,
    user_id: str | uuid.UUID,
    group_ids: Iterable[str | uuid.UUID],
    *,
    limit: int,
    after: PoolCursor | None,
) -> tuple[list[PoolRecord], list[HeldPool]]:
    """A user's entitled pools, ``limit + 1`` for a page, and what the page's hold for him.

    One statement (:func:`deskpool.pool_admin.store.my_pools`): at 9 a.m. a thousand first
    sign-ins list their pools at once (issue 39). The pool after the page is read whole too,
    to tell whether a next page exists.
    """
    shown = await store.my_pools(runtime.db, user_id, group_ids, limit=limit + 1, after=after)
    return [one.record for one in shown], shown[:limit]
