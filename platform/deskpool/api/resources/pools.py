"""Desktop pools (``pools:read`` / ``pools:manage``), their entitlements, and opening a desktop.

A pool is a set of desktops cloned from one template of one cluster, kept between its
``min_size`` and ``max_size`` with ``spare`` free desktops ready (the rules are in
:mod:`deskpool.reconciliation.planner`). The API stores what an administrator wants; the worker's
reconciliation makes it so. A pool's response shows the ``generation`` of its settings, the
``reconciled_generation`` the last reconciliation pass saw, the pass's ``health`` and the
desktop counts by state.

- *Validation.* Settings are checked by :func:`deskpool.pools.model.validate_pool` (422 with a
  JSON pointer per invalid field); the cluster must exist (422 ``/cluster_id``). The template is
  checked against the cluster when its driver answers: a template id, or a unique template name
  (stored as its id). Only a driver that *lists* the templates and has none by that name makes
  the request fail (422 ``/template``), or one whose operating system differs from ``os_type``
  (422 ``/os_type``). When the driver cannot be asked (not installed, unreachable, credentials
  refused, too slow) the pool is stored anyway and the response's ``template_check`` says
  ``not_verified`` with the reason: provisioning then reports the problem on the desktops.
- *Generations.* A change to a setting reconciliation reads (sizes, template, state...) bumps
  the generation and enqueues a reconciliation (``pool.reconcile``, as creating a pool does),
  so the pool acts on it without waiting for the periodic pass; a rename or a new description
  does not.
- *Deletion.* A pool is deleted only when it has no desktops (409 ``pool_not_empty``
  otherwise): set its state to ``draining`` first; reconciliation deletes each desktop once it
  is free, and the empty pool can then be deleted. No request ever destroys a desktop a user
  holds as a side effect.
- *Domain join.* Windows pools may carry Active Directory join settings; the password is
  write-only, sealed by the secret store (``pool.domain_join``), and a response only says
  whether it is set.
- *Opening a desktop.* ``POST /api/v1/me/pools/{pool_id}/desktop`` hands the caller a desktop
  (:func:`deskpool.desktops.store_allocation.allocate_desktop`) and a connection token to it
  (:func:`deskpool.sessions.opening.open_pool_desktop`): entitled users (directly or through a
  group) and holders of ``pools:manage`` may; a pool the caller may not open is 404, exactly as
  one that does not exist; 409 when the pool is disabled or draining; 202 with a pending
  connection when a desktop is started for the caller (start on connect, :mod:`deskpool.starts`);
  503 with ``Retry-After`` when no desktop is ready and none can be started.

Every change is recorded in the audit trail in the same transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from deskpool.api.context import Call
from deskpool.api.pagination import Page, PageQuery, cursor_pair, page_schema, paginate
from deskpool.api.resources.jobs import JobSchema
from deskpool.api.resources.pool_commands import change_pool_command, create_pool_command
from deskpool.api.resources.pool_schemas import (
    ALLOCATION_PROBLEMS,
    SUBJECT_TYPES,
    EntitlementCreateSchema,
    EntitlementSchema,
    MyPoolSchema,
    PoolChangeSchema,
    PoolCreateSchema,
    PoolQuery,
    PoolSchema,
    PoolWriteSchema,
)
from deskpool.api.resources.session_schemas import PENDING_CONNECTION, DesktopConnectionSchema
from deskpool.api.resources.sessions import opened_view
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.desktops.allocation import DesktopNotReady, NoDesktopAvailable
from deskpool.desktops.states import IN_FLIGHT_STATES
from deskpool.errors import NotFound
from deskpool.ids import parse_id
from deskpool.outage_brokering import service as brokering
from deskpool.pool_admin import service
from deskpool.pools.model import (
    Desktop,
    DesktopState,
    Pool,
    PoolState,
    PoolSummary,
)
from deskpool.pools.store import PoolRecord
from deskpool.pools.store_entitlements import Entitlement, SubjectType
from deskpool.sessions.model import DEFAULT_POLICY, SessionPolicy

# ---------------------------------------------------------------------------------- views


def counts_view(summary: PoolSummary) -> dict[str, Any]:
    """The ``counts`` member of a pool."""
    return {
        "total": summary.total,
        "by_state": {str(state): count for state, count in summary.by_state.items()},
        "assigned": summary.assigned,
        "in_session": summary.in_session,
        "available": summary.available,
        "by_template": dict(sorted(summary.by_template.items())),
    }


def _empty_summary() -> PoolSummary:
    return PoolSummary(
        total=0, by_state=dict.fromkeys(DesktopState, 0), assigned=0, in_session=0, available=0
    )


def pool_view(
    record: PoolRecord, summary: PoolSummary | None, policy: SessionPolicy = DEFAULT_POLICY
) -> dict[str, Any]:
    """A pool as the API shows it."""
    pool = record.pool
    join = record.domain_join
    health = record.health
    failing = record.reconcile_error
    return {
        "id": str(pool.id),
        "name": pool.name,
        "description": record.description,
        "cluster_id": str(pool.cluster_id),
        "template": pool.template,
        "kind": str(pool.kind),
        "os_type": str(pool.os_type),
        "clone_mode": str(pool.clone_mode),
        "min_size": pool.min_size,
        "max_size": pool.max_size,
        "spare": pool.spare,
        "naming_pattern": pool.naming_pattern,
        "target_nodes": list(pool.target_nodes),
        "storage": pool.storage,
        "schedule_id": None if pool.schedule_id is None else str(pool.schedule_id),
        "state": str(pool.state),
        "domain_join": None
        if join is None
        else {
            "domain": join.domain,
            "username": join.username,
            "organizational_unit": join.organizational_unit,
            "password": record.domain_join_password,
        },
        "generation": pool.generation,
        "reconciled_generation": pool.reconciled_generation,
        "reconciled_at": record.reconciled_at,
        "health": None
        if health is None
        else {"status": str(health.status), "reasons": list(health.reasons)},
        "reconcile_error": None
        if failing is None
        else {"code": failing.code, "reason": failing.reason, "since": failing.since},
        "counts": counts_view(summary or _empty_summary()),
        "session_policy": policy.as_json(),
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }


async def _views(call: Call, records: Sequence[PoolRecord]) -> list[dict[str, Any]]:
    shown = await service.show_pools(call.runtime, records)
    return [pool_view(pool.record, pool.summary, pool.policy) for pool in shown]


async def _view(call: Call, record: PoolRecord) -> dict[str, Any]:
    return (await _views(call, [record]))[0]


# ---------------------------------------------------------------------------------- helpers


def pool_id_of(call: Call) -> uuid.UUID:
    """The ``{pool_id}`` of the path; anything but a UUID is a 404."""
    return parse_id(call.path_param("pool_id"), "pool")


def _availability(pool: Pool, held: Sequence[Desktop], ready: bool, startable: bool) -> str:
    """What opening ``pool`` would give now (allocation's rules, then start on connect's)."""
    if pool.state is PoolState.DISABLED:
        return "disabled"
    usable = [d for d in held if d.state in (DesktopState.READY, DesktopState.IN_USE)]
    # The caller's own desktop resting powered off, or on its way to ready: started, waited for.
    coming = [d for d in held if d.state is DesktopState.POWERED_OFF or d.state in IN_FLIGHT_STATES]
    if pool.is_persistent and held:
        return "available" if usable else "startable" if coming else "desktop_not_ready"
    if not pool.is_persistent and any(d.state is DesktopState.IN_USE for d in usable):
        return "available"
    if coming:
        return "startable"
    if pool.state is PoolState.DRAINING:
        return "draining"
    return "available" if ready else "startable" if startable else "no_desktop_available"


def _retry_after(call: Call) -> str:
    """Seconds until the next reconciliation pass may have made a desktop ready."""
    seconds = call.runtime.config.duration("POOL_RECONCILE_INTERVAL")
    return str(max(1, min(int(seconds), 300)))


# ----------------------------------------------------------------------------------- routes


#: The pool, entitlement and "my pools" operations.
ROUTES = RouteTable()


@ROUTES.route(
    "GET",
    "/api/v1/pools",
    summary="List desktop pools",
    description="In name order (without case), with desktop counts; filter by cluster, state.",
    tags=("pools",),
    permission="pools:read",
    query=PoolQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of pools.", page_schema(PoolSchema))},
)
async def list_pools(call: Call) -> Page:
    limit = int(call.query["limit"])
    state = call.query.get("state")
    records = await service.list_pools(
        call.runtime,
        limit=limit + 1,
        after=cursor_pair(call.query.get("cursor")),
        cluster_id=call.query.get("cluster_id"),
        state=PoolState(state) if state else None,
    )
    page = paginate(records, limit, service.pool_cursor)
    return Page(await _views(call, page.items), page.next)


@ROUTES.route(
    "POST",
    "/api/v1/pools",
    summary="Create a desktop pool",
    description=(
        "Invalid settings are 422 with a pointer per field; an unknown cluster is 422 "
        "`/cluster_id`. The template is looked up on the cluster: 422 `/template` only when "
        "the driver lists the templates and has no such one, 422 `/os_type` when its OS "
        "differs; when the driver cannot be asked, the pool is created and "
        "`template_check.status` is `not_verified`. A name in use is 409 "
        "`pool_name_taken`; a domain-join password without a master key, 503 "
        "`secrets_key_missing`; one pool more than the license allows, 409 "
        "`license_limit_reached`. Reconciliation creates the desktops, as many as the "
        "license allows (the pool's health says why when it holds some back)."
    ),
    tags=("pools",),
    permission="pools:manage",
    body=PoolCreateSchema,
    responses={201: ResponseSpec("The new pool.", PoolWriteSchema)},
)
async def create_pool(call: Call) -> Reply:
    written = await service.create_pool(call.runtime, call.actor, create_pool_command(call.body))
    view = pool_view(written.record, None, written.policy)
    return Reply({**view, "template_check": written.check.view()}, 201)


@ROUTES.route(
    "GET",
    "/api/v1/pools/{pool_id}",
    summary="Get a desktop pool",
    tags=("pools",),
    permission="pools:read",
    responses={200: ResponseSpec("The pool.", PoolSchema)},
)
async def get_pool(call: Call) -> dict[str, Any]:
    return await _view(call, await service.get_pool(call.runtime, pool_id_of(call)))


@ROUTES.route(
    "PATCH",
    "/api/v1/pools/{pool_id}",
    summary="Change a desktop pool",
    description=(
        "Members given replace the stored ones; the result is validated as a whole, as on "
        "creation. The cluster, kind and OS cannot change while the pool has desktops. A "
        "new template or cluster is looked up as on creation. A change reconciliation "
        "reads bumps `generation`. `domain_join: null` removes the join settings and "
        "password; a `domain_join` without `password` keeps the stored password."
    ),
    tags=("pools",),
    permission="pools:manage",
    body=PoolChangeSchema,
    responses={200: ResponseSpec("The pool.", PoolWriteSchema)},
)
async def update_pool(call: Call) -> dict[str, Any]:
    change = change_pool_command(call.body)
    record, check = await service.change_pool(call.runtime, call.actor, pool_id_of(call), change)
    return {**await _view(call, record), "template_check": check.view()}


@ROUTES.route(
    "DELETE",
    "/api/v1/pools/{pool_id}",
    summary="Delete a desktop pool",
    description=(
        "Only an empty pool is deleted (409 `pool_not_empty` otherwise, with the count in "
        "`desktops`): set its state to `draining` first, and reconciliation deletes each "
        "desktop as it becomes free. Its entitlements and domain-join password go with it."
    ),
    tags=("pools",),
    permission="pools:manage",
    responses={204: ResponseSpec("Deleted.")},
)
async def delete_pool(call: Call) -> Reply:
    await service.delete_pool(call.runtime, call.actor, pool_id_of(call))
    return Reply(None, 204)


@ROUTES.route(
    "POST",
    "/api/v1/pools/{pool_id}/reconcile",
    summary="Reconcile a pool now",
    description=(
        "Enqueues an immediate reconciliation (job kind `pool.reconcile`, payload "
        '`{"pool_id"}`) instead of waiting for the next periodic pass. While one is '
        "queued and not started, asking again answers that job. Creating a pool and "
        "changing a setting that bumps its generation enqueue one too."
    ),
    tags=("pools",),
    permission="pools:manage",
    responses={202: ResponseSpec("The reconciliation job.", JobSchema)},
)
async def reconcile_pool(call: Call) -> Reply:
    job = await service.reconcile_pool_now(call.runtime, call.actor, pool_id_of(call))
    return Reply(job, 202)


# -- entitlements


@ROUTES.route(
    "GET",
    "/api/v1/pools/{pool_id}/entitlements",
    summary="List who may open a pool's desktops",
    description="Groups first, then users, by id.",
    tags=("pools",),
    permission="pools:read",
    query=PageQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of entitlements.", page_schema(EntitlementSchema))},
)
async def list_pool_entitlements(call: Call) -> Page:
    limit = int(call.query["limit"])
    items = await service.list_entitlements(
        call.runtime, pool_id_of(call), limit=limit + 1, after=cursor_pair(call.query.get("cursor"))
    )
    page = paginate(items, limit, service.entitlement_cursor)
    return Page([_entitlement_view(item) for item in page.items], page.next)


@ROUTES.route(
    "POST",
    "/api/v1/pools/{pool_id}/entitlements",
    summary="Entitle a user or group to a pool",
    description=(
        "The user or group must exist (422 `/subject_id`). Granting an entitlement that "
        "exists answers it with 200."
    ),
    tags=("pools",),
    permission="pools:manage",
    body=EntitlementCreateSchema,
    responses={
        201: ResponseSpec("Granted.", EntitlementSchema),
        200: ResponseSpec("It existed already.", EntitlementSchema),
    },
)
async def grant_pool_entitlement(call: Call) -> Reply:
    entitlement, created = await service.grant_entitlement(
        call.runtime,
        call.actor,
        pool_id_of(call),
        SubjectType(call.body["subject_type"]),
        call.body["subject_id"],
    )
    return Reply(_entitlement_view(entitlement), 201 if created else 200)


@ROUTES.route(
    "DELETE",
    "/api/v1/pools/{pool_id}/entitlements/{subject_type}/{subject_id}",
    summary="Revoke an entitlement",
    description=(
        "What the entitlement allowed ends at once for every user it concerns who may no "
        "longer open the pool (no other entitlement, no `pools:manage`): their open sessions "
        "close (end reason `access_revoked`), their unused connection tokens are refused, and "
        "a desktop they are logged on to is logged off (a non-persistent one is rebuilt; a "
        "persistent one stays assigned, `ready`, until an administrator unassigns it or the "
        "entitlement comes back; reconnecting is 403 `access_revoked` meanwhile)."
    ),
    tags=("pools",),
    permission="pools:manage",
    responses={204: ResponseSpec("Revoked.")},
)
async def revoke_pool_entitlement(call: Call) -> Reply:
    pool_id = pool_id_of(call)
    raw_type = call.path_param("subject_type")
    if raw_type not in SUBJECT_TYPES:
        raise NotFound(f"No entitlement of a {raw_type!r}: subjects are users and groups.")
    subject_type = SubjectType(raw_type)
    subject_id = parse_id(call.path_param("subject_id"), subject_type.value)
    await service.revoke_entitlement(call.runtime, call.actor, pool_id, subject_type, subject_id)
    return Reply(None, 204)


# -- the caller's pools
@ROUTES.route(
    "GET",
    "/api/v1/me/pools",
    summary="The pools the caller is entitled to",
    description=(
        "Pools the caller is entitled to (directly or through a group), in name order, "
        "with whether opening one gives a desktop now and the desktop the caller holds. "
        "Holders of `pools:manage` may open any pool, but only pools they are entitled to "
        "are listed here."
    ),
    tags=("me",),
    permission=None,
    authenticated=True,
    query=PageQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of pools.", page_schema(MyPoolSchema))},
)
async def list_my_pools(call: Call) -> Page:
    principal = call.caller
    limit = int(call.query["limit"])
    records, held = await service.my_pools(
        call.runtime,
        principal.id,
        principal.group_ids,
        limit=limit,
        after=cursor_pair(call.query.get("cursor")),
    )
    page = paginate(records, limit, service.pool_cursor)
    items = []
    for shown in held:
        record = shown.record
        pool = record.pool
        mine = [d for d in shown.held if d.state is not DesktopState.DELETING]
        items.append(
            {
                "id": str(pool.id),
                "name": pool.name,
                "description": record.description,
                "kind": str(pool.kind),
                "os_type": str(pool.os_type),
                "state": str(pool.state),
                "availability": _availability(pool, mine, shown.ready, shown.startable),
                "desktop": (
                    {"id": str(mine[0].id), "name": mine[0].name, "state": str(mine[0].state)}
                    if mine
                    else None
                ),
            }
        )
    return Page(items, page.next)


@ROUTES.route(
    "POST",
    "/api/v1/me/pools/{pool_id}/desktop",
    summary="Open a desktop of a pool",
    description=(
        "Hands the caller a desktop: the one they hold (persistent pools, reconnects), else "
        "a free ready one, and a single-use connection token to it (valid "
        "`SESSION_TOKEN_TTL`) with the gateway tunnel's URL. Entitled users (directly or "
        "through a group) and holders of `pools:manage` may; a pool the caller may not "
        "open answers 404 exactly as a pool that does not exist. 409 "
        "`pool_unavailable` when the pool is disabled, or draining and the caller holds "
        "nothing there. When no desktop is ready but one can be started for the caller (a "
        "free one the pool's schedule powered off, the caller's own resting powered off, or "
        "his own on its way to ready), it is reserved to him and started: 202 with the "
        "pending connection (start on connect). When none can be started but the pool may "
        "grow (enabled, below its `max_size`, the license allowing), a free desktop on its "
        "way to ready is reserved to him, else a new one is built for him: 202 with the "
        "pending connection (`starting.building` true); many callers at once each get their "
        "own. 503 `no_desktop_available` (or `desktop_not_ready` for the caller's own "
        "desktop) with `Retry-After` when nothing can be (the pool at its maximum, every "
        "desktop held); 503 `gateway_not_configured` (nothing "
        "is allocated) when `GATEWAY_PUBLIC_WS_URL` is unset, or not `wss://` outside "
        "development; 503 `desktop_unreachable` with `Retry-After` when the desktop's "
        "address is not known yet (the desktop stays the caller's: ask again); 409 "
        "`license_limit_reached` (nothing is allocated) when a new session would go beyond "
        "the license's concurrent sessions."
    ),
    tags=("me",),
    permission="pools:manage",
    entitlement=True,
    responses={
        200: ResponseSpec("The caller's desktop and its connection.", DesktopConnectionSchema),
        202: PENDING_CONNECTION,
        **ALLOCATION_PROBLEMS,
    },
)
async def open_pool_desktop(call: Call) -> Reply:
    try:
        opened = await brokering.open_pool_desktop(
            call.runtime, call.caller, pool_id_of(call), call.actor.audit_event
        )
    except (NoDesktopAvailable, DesktopNotReady) as error:
        error.headers = {**error.headers, "Retry-After": _retry_after(call)}
        raise
    return opened_view(opened)


def _entitlement_view(entitlement: Entitlement) -> dict[str, Any]:
    return {
        "pool_id": str(entitlement.pool_id),
        "subject_type": str(entitlement.subject_type),
        "subject_id": str(entitlement.subject_id),
        "created_at": entitlement.created_at,
    }
