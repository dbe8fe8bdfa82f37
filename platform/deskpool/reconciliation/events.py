"""The audit trail of reconciliation: one event for each thing a pass did, with its reason.

Every applied action is audited as ``reconcile.<kind>`` (actor ``system:reconciler``) with the
planner's human-readable reason, the desktop it moved and the job it enqueued
(:func:`action_event`); a VM reported as owned by no pool or desktop is audited once, on its
cluster (:func:`unowned_event`). A pool whose reconciliation starts failing, or fails with
another code, is audited as ``pool.reconcile_error`` (:func:`failure_event`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from deskpool.desktops.jobs import CLUSTERS, DESKTOPS
from deskpool.events import AuditEvent
from deskpool.jobs.model import Job
from deskpool.pools.model import Desktop, Pool
from deskpool.reconciliation.failures import PoolFailure
from deskpool.reconciliation.plan import Action, ReportOrphan
from deskpool.reconciliation.store_orphans import OrphanRecord

if TYPE_CHECKING:
    from deskpool.reconciliation.planning import PlannedPool

#: Who reconciliation acts as in the audit trail.
RECONCILER_ACTOR = "system:reconciler"


def unowned_event(orphan: OrphanRecord) -> AuditEvent:
    """The audit event of a VM reported as owned by no pool or desktop."""
    details: dict[str, Any] = {
        "reason": (
            f"VM {orphan.name} is tagged as deskpool's, but its tags name no existing pool "
            "or desktop and no desktop records it"
        ),
        "vm_id": orphan.vm_id,
        "name": orphan.name,
    }
    if orphan.desktop_id is not None:
        details["desktop_id"] = str(orphan.desktop_id)
    return AuditEvent(
        action=f"reconcile.{ReportOrphan.kind}",
        actor=RECONCILER_ACTOR,
        resource_type=CLUSTERS,
        resource_id=str(orphan.cluster_id),
        outcome="success",
        occurred_at=datetime.now(UTC),
        details=details,
    )


def failure_event(pool: Pool, failure: PoolFailure) -> AuditEvent:
    """The audit event of a pool whose reconciliation started failing (or fails otherwise)."""
    return AuditEvent(
        action="pool.reconcile_error",
        actor=RECONCILER_ACTOR,
        resource_type="pools",
        resource_id=str(pool.id),
        outcome="failure",
        occurred_at=datetime.now(UTC),
        details={"pool": pool.name, "code": str(failure.code), "reason": failure.reason},
    )


def action_event(
    planned: PlannedPool,
    action: Action,
    desktop: Desktop | None,
    job: Job | None,
    now: datetime,
) -> AuditEvent:
    """The audit event of an applied action: its reason, the desktop, the job enqueued."""
    pool = planned.pool
    details: dict[str, Any] = {
        "reason": action.reason,
        "pool_id": str(pool.id),
        "pool": pool.name,
    }
    if desktop is not None:
        details["desktop"] = desktop.name
        details["state"] = str(desktop.state)
    vm_id = getattr(action, "vm_id", None)
    if vm_id is not None:
        details["vm_id"] = vm_id
    if job is not None:
        details["job_id"] = job.id
        details["job_kind"] = job.kind
    if desktop is not None:
        resource_type, resource_id = DESKTOPS, str(desktop.id)
    else:
        resource_type, resource_id = CLUSTERS, str(pool.cluster_id)
    return AuditEvent(
        action=f"reconcile.{action.kind}",
        actor=RECONCILER_ACTOR,
        resource_type=resource_type,
        resource_id=resource_id,
        outcome="success",
        occurred_at=now,
        details=details,
    )
