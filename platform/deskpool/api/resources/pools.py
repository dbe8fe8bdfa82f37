"""Desktop pools (``pools:read`` / ``pools:manage``), their entitlements, and opening a desktop.

A pool is a set of desktops cloned from one template of one cluster, kept between its
``min_size`` and ``max_size`` with ``spare`` free desktops ready (the rules are in
:mod:`deskpool.pools.reconcile`). The API stores what an administrator wants; the worker's
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
  (:func:`deskpool.pools.repository.allocate_desktop`) and a connection token to it
  (:func:`deskpool.sessions.service.open_pool_desktop`): entitled users (directly or through a
  group) and holders of ``pools:manage`` may; a pool the caller may not open is 404, exactly as
  one that does not exist; 409 when the pool is disabled or draining, 503 with ``Retry-After``
  when no desktop is ready.

Every change is recorded in the audit trail in the same transaction.
"""

from __future__ import annotations

import logging
import re
import string
import uuid
from collections.abc import Sequence
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate

from deskpool.api.context import Call
from deskpool.api.inputs import storable_text
from deskpool.api.pagination import Page, PageQuery, cursor_pair, page_schema, paginate
from deskpool.api.problems import PROBLEM_CONTENT_TYPE, ProblemSchema
from deskpool.api.resources.jobs import JobSchema
from deskpool.api.resources.sessions import (
    DesktopConnectionSchema,
    SessionPolicyInputSchema,
    SessionPolicySchema,
    connection_view,
)
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.api.secret_fields import SecretInput, SecretStatusSchema
from deskpool.errors import InvalidCursor, NotFound
from deskpool.ids import parse_id
from deskpool.pools import repository, service
from deskpool.pools.allocation import DesktopNotReady, NoDesktopAvailable
from deskpool.pools.model import (
    MAX_POOL_NAME_LENGTH,
    MAX_POOL_SIZE,
    CloneMode,
    Desktop,
    DesktopState,
    OsType,
    Pool,
    PoolKind,
    PoolState,
)
from deskpool.pools.naming import MAX_NAME_LENGTH
from deskpool.pools.reconcile import PoolSummary
from deskpool.pools.repository import PoolRecord, SubjectType
from deskpool.sessions import service as sessions
from deskpool.sessions.model import DEFAULT_POLICY, SessionPolicy

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------- fields


def bounded_name_width(value: Any) -> None:
    """Refuse a naming pattern whose number is padded beyond a host name's length.

    :func:`deskpool.pools.naming.pattern_problems` renders the pattern to check it; a width of
    ``{n:0999999999}`` would render a gigabyte first, so it is refused before (a name is at
    most :data:`~deskpool.pools.naming.MAX_NAME_LENGTH` characters anyway).
    """
    if not isinstance(value, str):
        return
    try:
        parts = list(string.Formatter().parse(value))
    except ValueError:
        return  # not a format string: validate_pool says so
    for _, _, spec, _ in parts:
        if spec and any(int(number) > MAX_NAME_LENGTH for number in re.findall(r"\d+", spec)):
            raise ValidationError(
                f"The number's width must be at most {MAX_NAME_LENGTH} (a host name's length)."
            )


def _text(minimum: int, maximum: int, *, extra: Sequence[Any] = (), **kwargs: Any) -> fields.String:
    return fields.String(
        validate=[validate.Length(min=minimum, max=maximum), storable_text, *extra], **kwargs
    )


def _size(minimum: int, description: str, **kwargs: Any) -> fields.Integer:
    return fields.Integer(
        strict=True,
        validate=validate.Range(min=minimum, max=MAX_POOL_SIZE),
        metadata={"description": description},
        **kwargs,
    )


def _choice(values: Sequence[str], description: str, **kwargs: Any) -> fields.String:
    return fields.String(
        validate=validate.OneOf(list(values)), metadata={"description": description}, **kwargs
    )


_KINDS = [kind.value for kind in PoolKind]
_OS_TYPES = [os_type.value for os_type in OsType]
_CLONE_MODES = [mode.value for mode in CloneMode]
_POOL_STATES = [state.value for state in PoolState]
_DESKTOP_STATES = [state.value for state in DesktopState]
_SUBJECT_TYPES = [subject.value for subject in SubjectType]

_DESCRIPTIONS = {
    "name": f"Unique among pools (without case), at most {MAX_POOL_NAME_LENGTH} characters.",
    "description": "Free text for administrators.",
    "cluster_id": "The cluster desktops are cloned on (fixed while the pool has desktops).",
    "template": (
        "The cluster's template desktops are cloned from: its id (a unique template name is "
        "accepted and stored as the id)."
    ),
    "kind": (
        "`persistent`: a user keeps one desktop; `non_persistent`: desktops are lent and "
        "rebuilt after logoff (fixed while the pool has desktops)."
    ),
    "os_type": "The template's guest OS; Windows adds the Sysprep/OOBE wait.",
    "clone_mode": "`linked` (copy-on-write, fast) or `full` clones.",
    "min_size": "Desktops kept even when nobody uses them.",
    "max_size": f"The most desktops the pool ever has (1 to {MAX_POOL_SIZE}).",
    "spare": "Free ready desktops kept on top of those in use.",
    "naming_pattern": (
        "How desktops are named: one `{n}` field, e.g. `lab-{n:03}`; every name must be a "
        "host name (a Windows computer name for Windows pools)."
    ),
    "target_nodes": "Nodes new desktops may be placed on; empty for any node.",
    "storage": "The storage new desktops' disks go to; null for the template's.",
    "state": (
        "`enabled`: kept at size and handing out desktops; `disabled`: frozen, hands out "
        "nothing; `draining`: desktops are deleted as they become free."
    ),
}


# ---------------------------------------------------------------------------------- schemas


class DomainJoinInputSchema(Schema):
    """Active Directory join of a Windows pool's desktops."""

    domain = _text(
        1, 253, required=True, metadata={"description": "The domain's DNS name (corp.example)."}
    )
    username = _text(
        1, 256, required=True, metadata={"description": "The account that joins computers."}
    )
    organizational_unit = _text(
        1,
        1024,
        allow_none=True,
        load_default=None,
        metadata={"description": "Where computer accounts go (`OU=Desktops,DC=corp,...`)."},
    )
    password = SecretInput(
        max_bytes=1024,
        metadata={
            "description": (
                "The account's password. Write-only: sealed at rest, never returned. Required "
                "when the pool has none yet; left out, the stored one is kept."
            )
        },
    )


class DomainJoinSchema(Schema):
    """A pool's Active Directory join settings (the password is described, never shown)."""

    domain = fields.String(required=True)
    username = fields.String(required=True)
    organizational_unit = fields.String(required=True, allow_none=True)
    password = fields.Nested(SecretStatusSchema, required=True)


class PoolHealthSchema(Schema):
    """The verdict of the last reconciliation pass."""

    status = fields.String(
        required=True,
        validate=validate.OneOf(["healthy", "degraded", "failing"]),
        metadata={"description": "`healthy`, `degraded` (still serving) or `failing`."},
    )
    reasons = fields.List(
        fields.String(),
        required=True,
        metadata={"description": "Why it is not healthy, one sentence per cause."},
    )


DesktopStateCountsSchema = Schema.from_dict(
    {state: fields.Integer(required=True) for state in _DESKTOP_STATES},
    name="DesktopStateCounts",
)


class DesktopCountsSchema(Schema):
    """A pool's desktops, counted."""

    total = fields.Integer(required=True)
    by_state = fields.Nested(DesktopStateCountsSchema, required=True)
    assigned = fields.Integer(required=True, metadata={"description": "Held by a user."})
    in_session = fields.Integer(required=True, metadata={"description": "With a connection."})
    available = fields.Integer(
        required=True, metadata={"description": "Ready, free and clean: can be handed out now."}
    )


class PoolSchema(Schema):
    """A desktop pool."""

    id = fields.String(required=True)
    name = fields.String(required=True)
    description = fields.String(required=True)
    cluster_id = fields.String(required=True)
    template = fields.String(required=True)
    kind = _choice(_KINDS, _DESCRIPTIONS["kind"], required=True)
    os_type = _choice(_OS_TYPES, _DESCRIPTIONS["os_type"], required=True)
    clone_mode = _choice(_CLONE_MODES, _DESCRIPTIONS["clone_mode"], required=True)
    min_size = fields.Integer(required=True)
    max_size = fields.Integer(required=True)
    spare = fields.Integer(required=True)
    naming_pattern = fields.String(required=True)
    target_nodes = fields.List(fields.String(), required=True)
    storage = fields.String(required=True, allow_none=True)
    state = _choice(_POOL_STATES, _DESCRIPTIONS["state"], required=True)
    domain_join = fields.Nested(DomainJoinSchema, required=True, allow_none=True)
    generation = fields.Integer(
        required=True, metadata={"description": "Incremented by every change of a setting."}
    )
    reconciled_generation = fields.Integer(
        required=True,
        metadata={
            "description": (
                "The generation the last finished reconciliation saw; equal to `generation` "
                "once the pool's current settings have been acted on."
            )
        },
    )
    reconciled_at = fields.AwareDateTime(required=True, allow_none=True)
    health = fields.Nested(
        PoolHealthSchema,
        required=True,
        allow_none=True,
        metadata={"description": "Null until reconciliation first looked at the pool."},
    )
    counts = fields.Nested(DesktopCountsSchema, required=True)
    session_policy = fields.Nested(
        SessionPolicySchema,
        required=True,
        metadata={"description": "What happens to sessions of the pool's desktops."},
    )
    created_at = fields.AwareDateTime(required=True)
    updated_at = fields.AwareDateTime(required=True)


class TemplateCheckSchema(Schema):
    """Whether the pool's template was found on its cluster."""

    status = fields.String(
        required=True,
        validate=validate.OneOf(["verified", "not_verified", "not_checked"]),
        metadata={
            "description": (
                "`verified`: the driver lists it; `not_verified`: the driver could not be "
                "asked (see `detail`), the pool is stored anyway; `not_checked`: the change "
                "did not touch the template or cluster."
            )
        },
    )
    detail = fields.String(required=True, allow_none=True)


class PoolWriteSchema(PoolSchema):
    """A pool as created or changed, with the outcome of its template check."""

    template_check = fields.Nested(TemplateCheckSchema, required=True)


class PoolCreateSchema(Schema):
    """A new desktop pool."""

    name = _text(
        1, MAX_POOL_NAME_LENGTH, required=True, metadata={"description": _DESCRIPTIONS["name"]}
    )
    description = _text(
        0, 1000, load_default="", metadata={"description": _DESCRIPTIONS["description"]}
    )
    cluster_id = fields.UUID(required=True, metadata={"description": _DESCRIPTIONS["cluster_id"]})
    template = _text(1, 200, required=True, metadata={"description": _DESCRIPTIONS["template"]})
    kind = _choice(_KINDS, _DESCRIPTIONS["kind"], required=True)
    os_type = _choice(_OS_TYPES, _DESCRIPTIONS["os_type"], required=True)
    clone_mode = _choice(_CLONE_MODES, _DESCRIPTIONS["clone_mode"], load_default="linked")
    min_size = _size(0, _DESCRIPTIONS["min_size"], load_default=0)
    max_size = _size(1, _DESCRIPTIONS["max_size"], required=True)
    spare = _size(0, _DESCRIPTIONS["spare"], load_default=0)
    naming_pattern = _text(
        1,
        100,
        required=True,
        extra=[bounded_name_width],
        metadata={"description": _DESCRIPTIONS["naming_pattern"]},
    )
    target_nodes = fields.List(
        _text(1, 100),
        validate=validate.Length(max=64),
        load_default=list,
        metadata={"description": _DESCRIPTIONS["target_nodes"]},
    )
    storage = _text(
        1,
        200,
        allow_none=True,
        load_default=None,
        metadata={"description": _DESCRIPTIONS["storage"]},
    )
    state = _choice(_POOL_STATES, _DESCRIPTIONS["state"], load_default="enabled")
    domain_join = fields.Nested(
        DomainJoinInputSchema,
        allow_none=True,
        load_default=None,
        metadata={"description": "Active Directory join (Windows pools only)."},
    )
    session_policy = fields.Nested(
        SessionPolicyInputSchema,
        metadata={"description": "Session policy members to set; those left out stay as they are."},
    )


class PoolChangeSchema(Schema):
    """Changes to a pool; what is absent stays as it is."""

    name = _text(1, MAX_POOL_NAME_LENGTH, metadata={"description": _DESCRIPTIONS["name"]})
    description = _text(0, 1000, metadata={"description": _DESCRIPTIONS["description"]})
    cluster_id = fields.UUID(metadata={"description": _DESCRIPTIONS["cluster_id"]})
    template = _text(1, 200, metadata={"description": _DESCRIPTIONS["template"]})
    kind = _choice(_KINDS, _DESCRIPTIONS["kind"])
    os_type = _choice(_OS_TYPES, _DESCRIPTIONS["os_type"])
    clone_mode = _choice(_CLONE_MODES, _DESCRIPTIONS["clone_mode"])
    min_size = _size(0, _DESCRIPTIONS["min_size"])
    max_size = _size(1, _DESCRIPTIONS["max_size"])
    spare = _size(0, _DESCRIPTIONS["spare"])
    naming_pattern = _text(
        1,
        100,
        extra=[bounded_name_width],
        metadata={"description": _DESCRIPTIONS["naming_pattern"]},
    )
    target_nodes = fields.List(
        _text(1, 100),
        validate=validate.Length(max=64),
        metadata={"description": _DESCRIPTIONS["target_nodes"]},
    )
    storage = _text(1, 200, allow_none=True, metadata={"description": _DESCRIPTIONS["storage"]})
    state = _choice(_POOL_STATES, _DESCRIPTIONS["state"])
    domain_join = fields.Nested(
        DomainJoinInputSchema,
        allow_none=True,
        metadata={"description": "Replaces the join settings; null removes them and the password."},
    )
    session_policy = fields.Nested(
        SessionPolicyInputSchema,
        metadata={"description": "Session policy members to set; those left out stay as they are."},
    )


class PoolQuery(PageQuery):
    """Filters of the pool list."""

    cluster_id = fields.UUID(metadata={"description": "Only pools on this cluster."})
    state = _choice(_POOL_STATES, "Only pools in this state.")


class EntitlementSchema(Schema):
    """A user or group that may open a pool's desktops."""

    pool_id = fields.String(required=True)
    subject_type = _choice(_SUBJECT_TYPES, "`user` or `group`.", required=True)
    subject_id = fields.String(required=True)
    created_at = fields.AwareDateTime(required=True)


class EntitlementCreateSchema(Schema):
    """An entitlement to grant."""

    subject_type = _choice(_SUBJECT_TYPES, "`user` or `group`.", required=True)
    subject_id = fields.UUID(required=True, metadata={"description": "The user's or group's id."})


class HeldDesktopSchema(Schema):
    """A desktop the caller holds in a pool."""

    id = fields.String(required=True)
    name = fields.String(required=True)
    state = _choice(_DESKTOP_STATES, "The desktop's state.", required=True)


_AVAILABILITY = ["available", "no_desktop_available", "desktop_not_ready", "disabled", "draining"]


class MyPoolSchema(Schema):
    """A pool the caller may open, and whether opening it would give a desktop now."""

    id = fields.String(required=True)
    name = fields.String(required=True)
    description = fields.String(required=True)
    kind = _choice(_KINDS, _DESCRIPTIONS["kind"], required=True)
    os_type = _choice(_OS_TYPES, _DESCRIPTIONS["os_type"], required=True)
    state = _choice(_POOL_STATES, _DESCRIPTIONS["state"], required=True)
    availability = _choice(
        _AVAILABILITY,
        (
            "`available`: opening it gives a desktop now; `no_desktop_available`: none is "
            "ready, try again shortly; `desktop_not_ready`: the caller's own desktop is being "
            "built or repaired; `disabled` / `draining`: the pool gives out no new desktop."
        ),
        required=True,
    )
    desktop = fields.Nested(
        HeldDesktopSchema,
        required=True,
        allow_none=True,
        metadata={"description": "The desktop the caller holds in the pool, if any."},
    )


_RETRY_AFTER = {"Retry-After": "Seconds to wait before trying again."}

_ALLOCATION_PROBLEMS = {
    503: ResponseSpec(
        "No desktop is ready (`no_desktop_available`), or the caller's own desktop is not "
        "(`desktop_not_ready`); try again after `Retry-After` seconds.",
        ProblemSchema,
        content_type=PROBLEM_CONTENT_TYPE,
        headers=_RETRY_AFTER,
    ),
}


# ---------------------------------------------------------------------------------- views


def counts_view(summary: PoolSummary) -> dict[str, Any]:
    """The ``counts`` member of a pool."""
    return {
        "total": summary.total,
        "by_state": {str(state): count for state, count in summary.by_state.items()},
        "assigned": summary.assigned,
        "in_session": summary.in_session,
        "available": summary.available,
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
        "counts": counts_view(summary or _empty_summary()),
        "session_policy": policy.as_json(),
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }


async def _views(db: Any, records: Sequence[PoolRecord]) -> list[dict[str, Any]]:
    counts = await repository.pool_counts(db, [record.pool.id for record in records])
    policies = await sessions.pool_policies(db, [record.pool.id for record in records])
    return [
        pool_view(record, counts.get(record.pool.id), policies[record.pool.id])
        for record in records
    ]


async def _view(db: Any, record: PoolRecord) -> dict[str, Any]:
    return (await _views(db, [record]))[0]


# ---------------------------------------------------------------------------------- helpers


def pool_id_of(call: Call) -> uuid.UUID:
    """The ``{pool_id}`` of the path; anything but a UUID is a 404."""
    return parse_id(call.path_param("pool_id"), "pool")


async def existing_pool(call: Call) -> PoolRecord:
    """The pool addressed by the path, or 404."""
    pool_id = pool_id_of(call)
    record = await repository.get_pool_record(call.runtime.db, pool_id)
    if record is None:
        raise NotFound(f"No pool has the id {pool_id}.")
    return record


def _availability(pool: Pool, held: Sequence[Desktop], available: int) -> str:
    """What opening ``pool`` would give now (as :func:`.allocation.choose_desktop` decides)."""
    if pool.state is PoolState.DISABLED:
        return "disabled"
    usable = [d for d in held if d.state in (DesktopState.READY, DesktopState.IN_USE)]
    if pool.is_persistent and held:
        return "available" if usable else "desktop_not_ready"
    if not pool.is_persistent and any(d.state is DesktopState.IN_USE for d in usable):
        return "available"
    if pool.state is PoolState.DRAINING:
        return "draining"
    return "available" if available else "no_desktop_available"


def _retry_after(call: Call) -> str:
    """Seconds until the next reconciliation pass may have made a desktop ready."""
    seconds = call.runtime.config.duration("POOL_RECONCILE_INTERVAL")
    return str(max(1, min(int(seconds), 300)))


# ----------------------------------------------------------------------------------- routes


def register(routes: RouteTable) -> None:
    """Add the pool, entitlement and "my pools" operations."""

    @routes.route(
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
        records = await repository.list_pools(
            call.runtime.db,
            limit=limit + 1,
            after=cursor_pair(call.query.get("cursor")),
            cluster_id=call.query.get("cluster_id"),
            state=PoolState(state) if state else None,
        )
        page = paginate(records, limit, repository.pool_cursor)
        return Page(await _views(call.runtime.db, page.items), page.next)

    @routes.route(
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
        written = await service.create_pool(call.runtime, call.actor, call.body)
        view = pool_view(written.record, None, written.policy)
        return Reply({**view, "template_check": written.check.view()}, 201)

    @routes.route(
        "GET",
        "/api/v1/pools/{pool_id}",
        summary="Get a desktop pool",
        tags=("pools",),
        permission="pools:read",
        responses={200: ResponseSpec("The pool.", PoolSchema)},
    )
    async def get_pool(call: Call) -> dict[str, Any]:
        return await _view(call.runtime.db, await existing_pool(call))

    @routes.route(
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
        record, check = await service.change_pool(
            call.runtime, call.actor, pool_id_of(call), call.body
        )
        return {**await _view(call.runtime.db, record), "template_check": check.view()}

    @routes.route(
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

    @routes.route(
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

    @routes.route(
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
        record = await existing_pool(call)
        limit = int(call.query["limit"])
        after = cursor_pair(call.query.get("cursor"))
        if after is not None and after[0] not in _SUBJECT_TYPES:
            raise InvalidCursor()
        items = await repository.list_entitlements(
            call.runtime.db, record.pool.id, limit=limit + 1, after=after
        )
        page = paginate(items, limit, repository.entitlement_cursor)
        return Page([_entitlement_view(item) for item in page.items], page.next)

    @routes.route(
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

    @routes.route(
        "DELETE",
        "/api/v1/pools/{pool_id}/entitlements/{subject_type}/{subject_id}",
        summary="Revoke an entitlement",
        description=("Desktops the user holds stay theirs until an administrator unassigns them."),
        tags=("pools",),
        permission="pools:manage",
        responses={204: ResponseSpec("Revoked.")},
    )
    async def revoke_pool_entitlement(call: Call) -> Reply:
        pool_id = pool_id_of(call)
        raw_type = call.path_param("subject_type")
        if raw_type not in _SUBJECT_TYPES:
            raise NotFound(f"No entitlement of a {raw_type!r}: subjects are users and groups.")
        subject_type = SubjectType(raw_type)
        subject_id = parse_id(call.path_param("subject_id"), subject_type.value)
        await service.revoke_entitlement(
            call.runtime, call.actor, pool_id, subject_type, subject_id
        )
        return Reply(None, 204)

    # -- the caller's pools
    @routes.route(
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
        db = call.runtime.db
        limit = int(call.query["limit"])
        after = cursor_pair(call.query.get("cursor"))
        entitled = await repository.entitled_pools(db, principal.id, principal.group_ids)
        records = (
            await repository.list_pools(db, limit=limit + 1, after=after, pool_ids=entitled)
            if entitled
            else []
        )
        page = paginate(records, limit, repository.pool_cursor)
        ids = [record.pool.id for record in page.items]
        counts = await repository.pool_counts(db, ids)
        held: dict[uuid.UUID, list[Desktop]] = {pool_id: [] for pool_id in ids}
        for desktop in await repository.desktops_held_by(db, principal.id, ids):
            held[desktop.pool_id].append(desktop)
        items = []
        for record in page.items:
            pool = record.pool
            mine = [d for d in held[pool.id] if d.state is not DesktopState.DELETING]
            items.append(
                {
                    "id": str(pool.id),
                    "name": pool.name,
                    "description": record.description,
                    "kind": str(pool.kind),
                    "os_type": str(pool.os_type),
                    "state": str(pool.state),
                    "availability": _availability(pool, mine, counts[pool.id].available),
                    "desktop": (
                        {"id": str(mine[0].id), "name": mine[0].name, "state": str(mine[0].state)}
                        if mine
                        else None
                    ),
                }
            )
        return Page(items, page.next)

    @routes.route(
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
            "nothing there; 503 `no_desktop_available` (or `desktop_not_ready` for the "
            "caller's own desktop) with `Retry-After`; 503 `gateway_not_configured` (nothing "
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
            **_ALLOCATION_PROBLEMS,
        },
    )
    async def open_pool_desktop(call: Call) -> dict[str, Any]:
        try:
            connection = await sessions.open_pool_desktop(
                call.runtime, call.caller, pool_id_of(call), call.audit_event
            )
        except (NoDesktopAvailable, DesktopNotReady) as error:
            error.headers = {**error.headers, "Retry-After": _retry_after(call)}
            raise
        return connection_view(connection)


def _entitlement_view(entitlement: repository.Entitlement) -> dict[str, Any]:
    return {
        "pool_id": str(entitlement.pool_id),
        "subject_type": str(entitlement.subject_type),
        "subject_id": str(entitlement.subject_id),
        "created_at": entitlement.created_at,
    }
