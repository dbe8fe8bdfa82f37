"""Orphan VMs of a cluster (``clusters:read`` / ``clusters:manage``): see them, have one deleted.

Reconciliation reports a VM tagged as deskpool's that no desktop owns as an *orphan*: one
tagged for a pool's desktop but recorded by none (``pool_id`` set), or one whose tags name no
existing pool or desktop at all, left behind by a deleted pool (``pool_id`` null). It never
deletes one on its own: ``GET /api/v1/clusters/{cluster_id}/orphans`` lists them (oldest
report first) and ``DELETE /api/v1/clusters/{cluster_id}/orphans/{vm_id}`` is the
administrator's request to delete one. The request enqueues a ``vm.delete_orphan`` job
(:func:`deskpool.desktops.jobs.enqueue_orphan_deletion`, as reconciliation does when the
policy deletes orphans, so one VM never has two deletions queued) and answers 202 with it. The
job re-reads the VM and deletes it only if it still carries deskpool's ownership tag and no
desktop records or may own it; then the orphan record goes. The request is recorded in the
audit trail in the transaction that enqueues the job.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from marshmallow import Schema, fields

from deskpool.api.context import Call
from deskpool.api.pagination import Page, PageQuery, decode_cursor, page_schema, paginate
from deskpool.api.resources.jobs import JobSchema
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.errors import InvalidCursor, NotFound
from deskpool.ids import parse_id
from deskpool.pool_admin import service
from deskpool.reconciliation.store_orphans import OrphanRecord

#: The longest VM id a path may name; longer ones are no VM's.
MAX_VM_ID_LENGTH = 256

#: How a report time is written in a cursor (sorts as text in time order).
_CURSOR_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"


class OrphanSchema(Schema):
    """A VM tagged as deskpool's that no desktop owns, as reconciliation reported it."""

    vm_id = fields.String(required=True, metadata={"description": "The hypervisor's VM id."})
    name = fields.String(required=True, metadata={"description": "The VM's name."})
    pool_id = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "The pool it was tagged for; null when no pool owns it."},
    )
    desktop_id = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "The desktop its tags name, if any."},
    )
    reported_at = fields.AwareDateTime(required=True)


def orphan_view(orphan: OrphanRecord) -> dict[str, Any]:
    """The API representation of an orphan."""
    return {
        "vm_id": orphan.vm_id,
        "name": orphan.name,
        "pool_id": None if orphan.pool_id is None else str(orphan.pool_id),
        "desktop_id": None if orphan.desktop_id is None else str(orphan.desktop_id),
        "reported_at": orphan.reported_at,
    }


def orphan_cursor(orphan: OrphanRecord) -> list[str]:
    """The sort key of an orphan in the list: report time, then VM id."""
    return [orphan.reported_at.astimezone(UTC).strftime(_CURSOR_TIME), orphan.vm_id]


def _after(cursor: str | None) -> list[str] | None:
    """The ``[time, vm id]`` cursor, or ``None`` for the first page; anything else is 400."""
    after = decode_cursor(cursor)
    if after is None:
        return None
    if isinstance(after, list) and len(after) == 2 and all(isinstance(p, str) for p in after):
        return [str(part) for part in after]
    raise InvalidCursor()


def _vm_id(call: Call) -> str:
    """The VM id of the path; one no VM can have (too long, not storable text) is 404."""
    vm_id = call.path_param("vm_id")
    try:
        vm_id.encode()
    except UnicodeEncodeError:
        vm_id = ""
    if not vm_id or len(vm_id) > MAX_VM_ID_LENGTH or "\x00" in vm_id:
        raise NotFound("No orphan VM has this id on the cluster.")
    return vm_id


#: The orphan operations.
ROUTES = RouteTable()


@ROUTES.route(
    "GET",
    "/api/v1/clusters/{cluster_id}/orphans",
    summary="List the orphan VMs reported on a cluster",
    description=(
        "VMs tagged as deskpool's that no desktop owns, oldest report first: `pool_id` "
        "names the pool a VM was tagged for, or is null when its tags name no existing "
        "pool or desktop. Orphans are never deleted unless asked (`DELETE "
        ".../orphans/{vm_id}`)."
    ),
    tags=("clusters",),
    permission="clusters:read",
    query=PageQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of orphans.", page_schema(OrphanSchema))},
)
async def list_cluster_orphans(call: Call) -> Page:
    cluster_id = parse_id(call.path_param("cluster_id"), "cluster")
    limit = int(call.query["limit"])
    after = _after(call.query.get("cursor"))
    orphans = await service.cluster_orphans(call.runtime, cluster_id)
    ordered = sorted(orphans, key=orphan_cursor)
    if after is not None:
        ordered = [orphan for orphan in ordered if orphan_cursor(orphan) > after]
    page = paginate(ordered[: limit + 1], limit, orphan_cursor)
    return Page([orphan_view(orphan) for orphan in page.items], page.next)


@ROUTES.route(
    "DELETE",
    "/api/v1/clusters/{cluster_id}/orphans/{vm_id}",
    summary="Delete an orphan VM",
    description=(
        "Enqueues a `vm.delete_orphan` job and answers it (the job already queued or "
        "running for the VM, if any). The job deletes the VM only if it still carries "
        "deskpool's ownership tag and no desktop records or may own it, then forgets the "
        "orphan. 404 for an unknown cluster or a VM not reported as an orphan."
    ),
    tags=("clusters",),
    permission="clusters:manage",
    responses={202: ResponseSpec("The deletion's job.", JobSchema)},
)
async def delete_cluster_orphan(call: Call) -> Reply:
    cluster_id = parse_id(call.path_param("cluster_id"), "cluster")
    vm_id = _vm_id(call)
    job = await service.request_orphan_deletion(call.runtime, call.actor, cluster_id, vm_id)
    return Reply(job, 202)
