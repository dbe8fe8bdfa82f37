"""The pool domain model: pools, desktops, the VMs observed on a cluster, and pool validation.

Everything here is a frozen dataclass; a change is a new value (:func:`dataclasses.replace`),
made by the functions of :mod:`deskpool.desktops.states` for desktops. Identifiers are UUIDs for
records deskpool owns (pools, desktops, clusters) and strings for what the hypervisor names
(VM ids, node and storage names). Times are timezone-aware :class:`datetime.datetime` values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from uuid import UUID

from deskpool.errors import FieldError
from deskpool.names import is_display_name
from deskpool.pools.naming import pattern_problems
from deskpool_driver_api import PowerState as PowerState  # one definition, the contract's

#: The largest ``max_size`` a pool may have.
MAX_POOL_SIZE = 10_000

#: The longest pool name.
MAX_POOL_NAME_LENGTH = 64


class PoolKind(StrEnum):
    """Whether a user keeps their desktop between sessions."""

    #: Any free desktop is handed out and rebuilt after logoff.
    NON_PERSISTENT = "non_persistent"
    #: A user is assigned one desktop and gets it back every time.
    PERSISTENT = "persistent"


class OsType(StrEnum):
    """The guest operating system of a pool's template; Windows adds a provisioning step."""

    LINUX = "linux"
    WINDOWS = "windows"


class CloneMode(StrEnum):
    """How desktops are cloned from the template."""

    #: A copy-on-write clone sharing the template's disk: fast and small.
    LINKED = "linked"
    #: An independent copy of the template's disks.
    FULL = "full"


class PoolState(StrEnum):
    """The administrative state of a pool."""

    #: Reconciled to its desired size; hands out desktops.
    ENABLED = "enabled"
    #: Frozen: no desktop is created, rebuilt or deleted, and no new session starts.
    DISABLED = "disabled"
    #: Winding down: nothing is created and desktops are deleted as they become free.
    DRAINING = "draining"


class DesktopState(StrEnum):
    """The state of a desktop; :mod:`deskpool.desktops.states` says which transitions are legal."""

    #: The VM is being cloned from the template.
    PROVISIONING = "provisioning"
    #: The VM exists and is being powered on.
    STARTING = "starting"
    #: The VM runs; provisioning waits for its guest agent (``GUEST_AGENT_WAIT_TIMEOUT``).
    WAITING_FOR_AGENT = "waiting_for_agent"
    #: Windows only: waiting for Sysprep/OOBE to finish (``WINDOWS_READY_WAIT_TIMEOUT``).
    WAITING_FOR_WINDOWS = "waiting_for_windows"
    #: Can be handed to a user.
    READY = "ready"
    #: Handed to a user for a session.
    IN_USE = "in_use"
    #: Free and kept, its VM powered off by the pool's schedule (``idle: power_off``); it is
    #: powered on (through ``starting``) when the schedule or a user needs it.
    POWERED_OFF = "powered_off"
    #: Being rebuilt or reset to the template (after logoff in a non-persistent pool).
    REFRESHING = "refreshing"
    #: Its VM is being destroyed; the record goes when the VM is gone.
    DELETING = "deleting"
    #: A step failed; ``failed_step`` and ``last_error`` say which and why.
    FAILED = "failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Pool:
    """A desktop pool: desktops cloned from one template, kept between a minimum and a maximum.

    :ivar min_size: desktops kept even when nobody uses them.
    :ivar max_size: the most desktops the pool ever has, whatever the demand.
    :ivar spare: free, ready desktops kept on top of the ones in use, for the next users.
    :ivar naming_pattern: how desktops are named, for example ``lab-{n:03}``.
    :ivar target_nodes: cluster nodes new VMs may be placed on; empty means any node.
    :ivar storage: the storage new VMs' disks go to; ``None`` means the template's.
    :ivar generation: incremented on every change of the pool's settings.
    :ivar reconciled_generation: the generation the last completed reconciliation saw.
    :ivar schedule_id: the capacity schedule (:mod:`deskpool.schedules`) whose phase in force
        sets the pool's ready and spare desktops; ``None``: ``min_size`` and ``spare`` always.
    """

    id: UUID
    name: str
    cluster_id: UUID
    template: str
    kind: PoolKind
    min_size: int
    max_size: int
    spare: int
    naming_pattern: str
    os_type: OsType
    clone_mode: CloneMode = CloneMode.LINKED
    target_nodes: tuple[str, ...] = ()
    storage: str | None = None
    state: PoolState = PoolState.ENABLED
    generation: int = 1
    reconciled_generation: int = 0
    schedule_id: UUID | None = None

    @property
    def is_persistent(self) -> bool:
        """Whether users keep their desktop between sessions."""
        return self.kind is PoolKind.PERSISTENT

    @property
    def is_windows(self) -> bool:
        """Whether desktops wait for Windows Sysprep/OOBE during provisioning."""
        return self.os_type is OsType.WINDOWS


@dataclass(frozen=True, slots=True, kw_only=True)
class Desktop:
    """One desktop of a pool: a VM on the cluster and what deskpool knows about it.

    :ivar vm_id: the hypervisor's id of the VM; ``None`` until the clone exists.
    :ivar template: the template the current VM was built from (a pool's template may change).
    :ivar state_changed_at: when the desktop entered its current state (for step timeouts).
    :ivar assigned_user: the user the desktop belongs to (persistent pools) or is lent to for
        the current session (non-persistent pools).
    :ivar in_session: whether a remote desktop connection is open to it now.
    :ivar used_since_refresh: whether a user has had it since it was last built or reset; a
        used desktop is refreshed before anyone else gets it.
    :ivar failed_step: the state the desktop was in when it last failed.
    :ivar last_error: why it last failed, short and without secrets (shown and aggregated).
    :ivar failure_count: failures since it was last ready; drives the retry backoff.
    :ivar last_failed_at: when it last failed.
    """

    id: UUID
    pool_id: UUID
    name: str
    state: DesktopState
    created_at: datetime
    state_changed_at: datetime
    vm_id: str | None = None
    template: str | None = None
    assigned_user: str | None = None
    in_session: bool = False
    used_since_refresh: bool = False
    failed_step: DesktopState | None = None
    last_error: str | None = None
    failure_count: int = 0
    last_failed_at: datetime | None = None

    @property
    def is_busy(self) -> bool:
        """Whether a user holds the desktop: assigned to someone, in use or in a session."""
        return (
            self.assigned_user is not None or self.in_session or self.state is DesktopState.IN_USE
        )

    @property
    def is_available(self) -> bool:
        """Whether the desktop can be handed to a new user right now: ready, free and clean."""
        return self.state is DesktopState.READY and not self.is_busy and not self.used_since_refresh


@dataclass(frozen=True, slots=True, kw_only=True)
class ObservedVm:
    """A VM as the hypervisor driver lists it during reconciliation.

    deskpool tags the VMs it creates with the desktop's and the pool's ids; a VM without those
    tags is not deskpool's and reconciliation never touches it.

    :ivar desktop_id: the desktop id tag, if any.
    :ivar pool_id: the pool id tag, if any.
    """

    vm_id: str
    name: str
    power_state: PowerState
    desktop_id: UUID | None = None
    pool_id: UUID | None = None

    @property
    def is_tagged(self) -> bool:
        """Whether deskpool created this VM (it carries a desktop or pool tag)."""
        return self.desktop_id is not None or self.pool_id is not None


# --------------------------------------------------------------------------- summaries


class HealthStatus(StrEnum):
    """How well a pool is doing."""

    #: Nothing is wrong.
    HEALTHY = "healthy"
    #: Something needs attention; the pool still serves users.
    DEGRADED = "degraded"
    #: Desktops fail and none is usable.
    FAILING = "failing"


@dataclass(frozen=True, slots=True)
class PoolHealth:
    """A pool's health and, when it is not healthy, why (one sentence per cause)."""

    status: HealthStatus
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ReconcileError:
    """Why a pool's reconciliation fails, and since when (the first failing pass).

    :ivar code: which part failed (``deskpool.reconciliation.failures.FailureCode``).
    """

    code: str
    reason: str
    since: datetime


@dataclass(frozen=True, slots=True)
class PoolSummary:
    """Desktop counts of a pool.

    :ivar by_state: the number of desktops in each state; every state is present.
    :ivar available: desktops that can be handed to a new user now.
    :ivar by_template: the number of desktops built from each template (desktops not built
        yet are not counted).
    """

    total: int
    by_state: Mapping[DesktopState, int]
    assigned: int
    in_session: int
    available: int
    by_template: Mapping[str, int] = field(default_factory=dict)


def summarize(desktops: Iterable[Desktop]) -> PoolSummary:
    """Count ``desktops`` by state, and those assigned, in a session and available."""
    by_state = dict.fromkeys(DesktopState, 0)
    by_template: dict[str, int] = {}
    total = assigned = in_session = available = 0
    for desktop in desktops:
        total += 1
        by_state[desktop.state] += 1
        if desktop.template is not None:
            by_template[desktop.template] = by_template.get(desktop.template, 0) + 1
        assigned += desktop.assigned_user is not None
        in_session += desktop.in_session
        available += desktop.is_available
    return PoolSummary(
        total=total,
        by_state=MappingProxyType(by_state),
        assigned=assigned,
        in_session=in_session,
        available=available,
        by_template=MappingProxyType(by_template),
    )


def validate_pool(pool: Pool) -> list[FieldError]:
    """Return every invalid field of ``pool``; an empty list means the pool is valid.

    The pointers are JSON pointers into the pool's API representation (``/min_size``), so the
    API can raise :class:`deskpool.errors.ValidationFailed` with the list as it is.
    """
    errors: list[FieldError] = []

    def error(field: str, message: str) -> None:
        errors.append(FieldError(f"/{field}", message))

    name = pool.name.strip()
    if not name:
        error("name", "must not be empty")
    elif len(pool.name) > MAX_POOL_NAME_LENGTH:
        error("name", f"must be at most {MAX_POOL_NAME_LENGTH} characters")
    elif not is_display_name(pool.name):
        error("name", "must not start or end with spaces or contain control characters")
    if not pool.template.strip():
        error("template", "must name a template of the cluster")

    if pool.min_size < 0:
        error("min_size", "must be 0 or more")
    if pool.spare < 0:
        error("spare", "must be 0 or more")
    if pool.max_size < 1:
        error("max_size", "must be at least 1")
    elif pool.max_size > MAX_POOL_SIZE:
        error("max_size", f"must be at most {MAX_POOL_SIZE}")
    if pool.min_size > pool.max_size >= 1:
        error("min_size", f"must not exceed max_size ({pool.max_size})")
    if pool.spare > pool.max_size >= 1:
        error("spare", f"must not exceed max_size ({pool.max_size})")

    for problem in pattern_problems(
        pool.naming_pattern, max_number=max(1, pool.max_size), windows=pool.is_windows
    ):
        error("naming_pattern", problem)

    seen: set[str] = set()
    for index, node in enumerate(pool.target_nodes):
        if not node.strip():
            error(f"target_nodes/{index}", "must name a node")
        elif node in seen:
            error(f"target_nodes/{index}", f"node {node!r} is listed twice")
        seen.add(node)
    if pool.storage is not None and not pool.storage.strip():
        error("storage", "must name a storage, or be left out to use the template's")

    if pool.generation < 1:
        error("generation", "must be at least 1")
    if not 0 <= pool.reconciled_generation <= pool.generation:
        error("reconciled_generation", "must be between 0 and generation")
    return errors


def validate_pool_change(current: Pool, proposed: Pool, *, has_desktops: bool) -> list[FieldError]:
    """Return the field errors of changing ``current`` into ``proposed``.

    ``proposed`` must itself be valid (:func:`validate_pool`, whose errors come first). While a
    pool has desktops, its cluster, kind and operating system cannot change: its desktops were
    built for them. Any other setting applies to desktops built from then on.
    """
    errors = validate_pool(proposed)
    if proposed.id != current.id:
        errors.append(FieldError("/id", "cannot change"))
    if has_desktops:
        for field, old, new in (
            ("cluster_id", current.cluster_id, proposed.cluster_id),
            ("kind", current.kind, proposed.kind),
            ("os_type", current.os_type, proposed.os_type),
        ):
            if old != new:
                errors.append(FieldError(f"/{field}", "cannot change while the pool has desktops"))
    return errors
