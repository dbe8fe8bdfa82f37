"""Request and response schemas of the pool resources: pools, entitlements, "my pools".

The handlers are in :mod:`deskpool.api.resources.pools`.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate

from deskpool.api.inputs import storable_text
from deskpool.api.pagination import PageQuery
from deskpool.api.problems import PROBLEM_CONTENT_TYPE, ProblemSchema
from deskpool.api.resources.session_schemas import SessionPolicyInputSchema, SessionPolicySchema
from deskpool.api.routes import ResponseSpec
from deskpool.api.secret_fields import SecretInput, SecretStatusSchema
from deskpool.api.validation import FullMatch
from deskpool.names import NAME_PATTERN, SPACE
from deskpool.pools.model import (
    MAX_POOL_NAME_LENGTH,
    MAX_POOL_SIZE,
    CloneMode,
    DesktopState,
    OsType,
    PoolKind,
    PoolState,
)
from deskpool.pools.naming import MAX_NAME_LENGTH, PATTERN_SHAPE
from deskpool.pools.store_entitlements import SubjectType
from deskpool.reconciliation.failures import FailureCode

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


_PATTERN_SHAPE = validate.Regexp(
    PATTERN_SHAPE,
    error=(
        # marshmallow formats the message: braces are doubled.
        "Must be host-name characters (letters, digits, hyphens; not at either end) around "
        "one {{n}} field, zero-padded if at all ({{n}}, {{n:03}}), for example lab-{{n:03}}."
    ),
)
#: Text with something visible in it (the pool model refuses blank templates, nodes, storages):
#: the white space of ``str.strip`` (:data:`deskpool.names.SPACE`), so the document agrees.
_VISIBLE = validate.Regexp(rf"^[{SPACE}]*[^{SPACE}]", error="Must not be blank.")
_DISPLAY_NAME = FullMatch(
    NAME_PATTERN, error="must not start or end with spaces or contain control characters"
)


class WholeNumber(fields.Integer):
    """An integer as JSON Schema's ``integer`` means it: ``3`` and ``3.0``, never ``"3"``."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return super()._deserialize(value, attr, data, **kwargs)


def _text(minimum: int, maximum: int, *, extra: Sequence[Any] = (), **kwargs: Any) -> fields.String:
    return fields.String(
        validate=[validate.Length(min=minimum, max=maximum), storable_text, *extra], **kwargs
    )


def _size(minimum: int, description: str, **kwargs: Any) -> fields.Integer:
    return WholeNumber(
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
SUBJECT_TYPES = [subject.value for subject in SubjectType]

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
    "schedule_id": "The capacity schedule whose phase in force sets the ready and spare "
    "desktops (and powers idle ones off); null: min_size and spare around the clock.",
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


class ReconcileErrorSchema(Schema):
    """Why the pool's reconciliation fails, and since when (cleared by the next success)."""

    code = fields.String(
        required=True,
        validate=validate.OneOf([str(code) for code in FailureCode]),
        metadata={
            "description": (
                "`schedule_unusable`: the phase in force of its schedule cannot be computed; "
                "`rollout_unusable`: its image rollout cannot be planned; `plan_failed`, "
                "`apply_failed`: planning or applying its reconciliation failed."
            )
        },
    )
    reason = fields.String(
        required=True, metadata={"description": "What failed, in words, and what to do."}
    )
    since = fields.AwareDateTime(
        required=True, metadata={"description": "When the first of the failing passes ran."}
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
    by_template = fields.Dict(
        keys=fields.String(),
        values=fields.Integer(),
        required=True,
        metadata={"description": "Desktops by the template their VM was built from."},
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
    schedule_id = fields.String(
        required=True, allow_none=True, metadata={"description": _DESCRIPTIONS["schedule_id"]}
    )
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
    reconcile_error = fields.Nested(
        ReconcileErrorSchema,
        required=True,
        allow_none=True,
        metadata={
            "description": (
                "Why the pool's reconciliation fails; null while it succeeds. A failing pool "
                "keeps its desktops and the health of its last successful pass, and the other "
                "pools are reconciled as usual."
            )
        },
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
        1,
        MAX_POOL_NAME_LENGTH,
        required=True,
        extra=[_DISPLAY_NAME],
        metadata={"description": _DESCRIPTIONS["name"]},
    )
    description = _text(
        0, 1000, load_default="", metadata={"description": _DESCRIPTIONS["description"]}
    )
    cluster_id = fields.UUID(required=True, metadata={"description": _DESCRIPTIONS["cluster_id"]})
    template = _text(
        1, 200, required=True, extra=[_VISIBLE], metadata={"description": _DESCRIPTIONS["template"]}
    )
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
        extra=[bounded_name_width, _PATTERN_SHAPE],
        metadata={"description": _DESCRIPTIONS["naming_pattern"]},
    )
    target_nodes = fields.List(
        _text(1, 100, extra=[_VISIBLE]),
        validate=validate.Length(max=64),
        load_default=list,
        metadata={"description": _DESCRIPTIONS["target_nodes"], "uniqueItems": True},
    )
    storage = _text(
        1,
        200,
        allow_none=True,
        load_default=None,
        extra=[_VISIBLE],
        metadata={"description": _DESCRIPTIONS["storage"]},
    )
    schedule_id = fields.UUID(
        allow_none=True, load_default=None, metadata={"description": _DESCRIPTIONS["schedule_id"]}
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

    name = _text(
        1,
        MAX_POOL_NAME_LENGTH,
        extra=[_DISPLAY_NAME],
        metadata={"description": _DESCRIPTIONS["name"]},
    )
    description = _text(0, 1000, metadata={"description": _DESCRIPTIONS["description"]})
    cluster_id = fields.UUID(metadata={"description": _DESCRIPTIONS["cluster_id"]})
    template = _text(1, 200, extra=[_VISIBLE], metadata={"description": _DESCRIPTIONS["template"]})
    kind = _choice(_KINDS, _DESCRIPTIONS["kind"])
    os_type = _choice(_OS_TYPES, _DESCRIPTIONS["os_type"])
    clone_mode = _choice(_CLONE_MODES, _DESCRIPTIONS["clone_mode"])
    min_size = _size(0, _DESCRIPTIONS["min_size"])
    max_size = _size(1, _DESCRIPTIONS["max_size"])
    spare = _size(0, _DESCRIPTIONS["spare"])
    naming_pattern = _text(
        1,
        100,
        extra=[bounded_name_width, _PATTERN_SHAPE],
        metadata={"description": _DESCRIPTIONS["naming_pattern"]},
    )
    target_nodes = fields.List(
        _text(1, 100, extra=[_VISIBLE]),
        validate=validate.Length(max=64),
        metadata={"description": _DESCRIPTIONS["target_nodes"], "uniqueItems": True},
    )
    storage = _text(
        1,
        200,
        allow_none=True,
        extra=[_VISIBLE],
        metadata={"description": _DESCRIPTIONS["storage"]},
    )
    schedule_id = fields.UUID(
        allow_none=True, metadata={"description": _DESCRIPTIONS["schedule_id"]}
    )
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
    subject_type = _choice(SUBJECT_TYPES, "`user` or `group`.", required=True)
    subject_id = fields.String(required=True)
    created_at = fields.AwareDateTime(required=True)


class EntitlementCreateSchema(Schema):
    """An entitlement to grant."""

    subject_type = _choice(SUBJECT_TYPES, "`user` or `group`.", required=True)
    subject_id = fields.UUID(required=True, metadata={"description": "The user's or group's id."})


class HeldDesktopSchema(Schema):
    """A desktop the caller holds in a pool."""

    id = fields.String(required=True)
    name = fields.String(required=True)
    state = _choice(_DESKTOP_STATES, "The desktop's state.", required=True)


_AVAILABILITY = [
    "available",
    "startable",
    "no_desktop_available",
    "desktop_not_ready",
    "disabled",
    "draining",
]


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
            "`available`: opening it gives a desktop now; `startable`: none is ready, but "
            "opening it starts one for the caller (a desktop the pool's schedule powered off, "
            "or the caller's own, powered off or on its way to ready, or one the pool builds "
            "for him while it is below its maximum): the open answers a pending connection "
            "(202); `no_desktop_available`: none is ready and the pool is at its maximum, try "
            "again later; `desktop_not_ready`: the caller's own desktop is being "
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

ALLOCATION_PROBLEMS = {
    503: ResponseSpec(
        "No desktop is ready and none can be started or built: the pool is at its maximum "
        "(`no_desktop_available`), or the caller's own desktop is not ready "
        "(`desktop_not_ready`); try again after `Retry-After` seconds.",
        ProblemSchema,
        content_type=PROBLEM_CONTENT_TYPE,
        headers=_RETRY_AFTER,
    ),
}
