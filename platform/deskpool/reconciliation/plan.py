"""What a reconciliation plan is made of: its policy, its actions, and what it reports.

The pure planner (:mod:`deskpool.reconciliation.planner`) follows a :class:`ReconcilePolicy`
(backoffs,
timeouts, orphan handling) and returns, for each pool, a :class:`PoolPlan`: the *actions* to
take (frozen dataclasses, each with a human-readable ``reason`` for the audit trail; an action
on a desktop's record is applied through :func:`desktop_event` and the transitions of
:mod:`deskpool.desktops.states`), the pool's :class:`PoolHealth` and its counts
(:class:`PoolSummary`). These are plain data: the planner decides, the reconciliation service
(:mod:`deskpool.reconciliation.reconciler`) applies, the API shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, ClassVar
from uuid import UUID

from deskpool.desktops.states import (
    Delete,
    DesktopEvent,
    Failed,
    PowerOff,
    PowerUp,
    Refresh,
    Replace,
    Retry,
)

# A pool's health and desktop counts are the pool's values (its store keeps them); a plan names
# them, so they are re-exported here.
from deskpool.pools.model import Desktop, DesktopState
from deskpool.pools.model import HealthStatus as HealthStatus
from deskpool.pools.model import PoolHealth as PoolHealth
from deskpool.pools.model import PoolSummary as PoolSummary
from deskpool.pools.model import summarize as summarize

if TYPE_CHECKING:
    from deskpool.config import Config
    from deskpool.rollouts.plan import RolloutPlan

S = DesktopState


# --------------------------------------------------------------------------- policy


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcilePolicy:
    """The knobs of reconciliation.

    :ivar failure_backoff_base: the wait before the first retry of a failed desktop.
    :ivar failure_backoff_max: the longest wait between retries.
    :ivar delete_orphans: delete VMs tagged for a pool that belong to none of its desktops,
        instead of only reporting them.
    :ivar guest_agent_wait_timeout: ``GUEST_AGENT_WAIT_TIMEOUT``.
    :ivar windows_ready_wait_timeout: ``WINDOWS_READY_WAIT_TIMEOUT``.
    :ivar operation_timeout: how long cloning, powering on, refreshing or deleting may take
        before the desktop is considered stuck (its job was lost).
    :ivar timeout_grace: added to every timeout, so the job that enforces a wait timeout
        itself fails the step first and reconciliation only catches desktops whose job was lost.
    """

    failure_backoff_base: timedelta = timedelta(seconds=30)
    failure_backoff_max: timedelta = timedelta(hours=1)
    delete_orphans: bool = False
    guest_agent_wait_timeout: timedelta = timedelta(minutes=10)
    windows_ready_wait_timeout: timedelta = timedelta(minutes=30)
    operation_timeout: timedelta = timedelta(hours=1)
    timeout_grace: timedelta = timedelta(minutes=1)

    def __post_init__(self) -> None:
        zero = timedelta(0)
        if self.failure_backoff_base <= zero:
            raise ValueError("failure_backoff_base must be positive")
        if self.failure_backoff_max < self.failure_backoff_base:
            raise ValueError("failure_backoff_max must be at least failure_backoff_base")
        for name in ("guest_agent_wait_timeout", "windows_ready_wait_timeout", "operation_timeout"):
            if getattr(self, name) <= zero:
                raise ValueError(f"{name} must be positive")
        if self.timeout_grace < zero:
            raise ValueError("timeout_grace must not be negative")

    @classmethod
    def from_config(cls, config: Config) -> ReconcilePolicy:
        """Return the policy with the wait timeouts of ``config`` and the other defaults."""
        return cls(
            guest_agent_wait_timeout=timedelta(seconds=config.duration("GUEST_AGENT_WAIT_TIMEOUT")),
            windows_ready_wait_timeout=timedelta(
                seconds=config.duration("WINDOWS_READY_WAIT_TIMEOUT")
            ),
        )

    def step_timeout(self, state: DesktopState) -> timedelta | None:
        """Return how long a desktop may stay in ``state``; ``None`` when it may stay forever."""
        if state is S.WAITING_FOR_AGENT:
            return self.guest_agent_wait_timeout
        if state is S.WAITING_FOR_WINDOWS:
            return self.windows_ready_wait_timeout
        if state in (S.PROVISIONING, S.STARTING, S.REFRESHING, S.DELETING):
            return self.operation_timeout
        return None

    def backoff(self, failure_count: int) -> timedelta:
        """Return the wait before retrying after ``failure_count`` consecutive failures."""
        doublings = min(max(failure_count, 1) - 1, 64)
        seconds = self.failure_backoff_base.total_seconds() * 2.0**doublings
        if seconds >= self.failure_backoff_max.total_seconds():
            return self.failure_backoff_max
        return timedelta(seconds=seconds)


def retry_due_at(desktop: Desktop, policy: ReconcilePolicy) -> datetime | None:
    """Return when a failed desktop is retried; ``None`` when it is not failed."""
    if desktop.state is not S.FAILED:
        return None
    failed_at = desktop.last_failed_at or desktop.state_changed_at
    return failed_at + policy.backoff(desktop.failure_count)


# --------------------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class CreateDesktop:
    """Create a desktop record named ``name`` (state ``provisioning``) and provision it."""

    kind: ClassVar[str] = "create_desktop"
    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class DesktopAction:
    """An action on one desktop's record: the desktop, and why (for the audit trail)."""

    kind: ClassVar[str]
    desktop_id: UUID
    reason: str


@dataclass(frozen=True, slots=True)
class DeleteDesktop(DesktopAction):
    """Delete the desktop: destroy its VM, then its record."""

    kind: ClassVar[str] = "delete_desktop"


@dataclass(frozen=True, slots=True)
class ReplaceDesktop(DesktopAction):
    """The desktop's VM vanished: provision a new one under the same name."""

    kind: ClassVar[str] = "replace_desktop"


@dataclass(frozen=True, slots=True)
class RetryFailed(DesktopAction):
    """Retry a failed desktop whose backoff has passed (provision it anew, or delete it)."""

    kind: ClassVar[str] = "retry_failed"


@dataclass(frozen=True, slots=True)
class RefreshDesktop(DesktopAction):
    """Rebuild a free desktop from the pool's template."""

    kind: ClassVar[str] = "refresh_desktop"


@dataclass(frozen=True, slots=True)
class PowerOffDesktop(DesktopAction):
    """The schedule's phase powers idle desktops off: this free one is powered off."""

    kind: ClassVar[str] = "power_off_desktop"


@dataclass(frozen=True, slots=True)
class PowerUpDesktop(DesktopAction):
    """A powered-off desktop is needed (the phase asks for more): power it on and wait for it."""

    kind: ClassVar[str] = "power_up_desktop"


@dataclass(frozen=True, slots=True)
class MarkVmMissing:
    """The VM of a desktop its user owns vanished: mark the desktop failed with ``error``."""

    kind: ClassVar[str] = "mark_vm_missing"
    desktop_id: UUID
    vm_id: str
    error: str
    reason: str


@dataclass(frozen=True, slots=True)
class TimeOutStep:
    """The desktop stayed in ``step`` past its timeout: fail it there with ``error``."""

    kind: ClassVar[str] = "time_out_step"
    desktop_id: UUID
    step: DesktopState
    error: str
    reason: str


@dataclass(frozen=True, slots=True)
class PowerOn:
    """Power on (or resume) the VM of a free ready desktop."""

    kind: ClassVar[str] = "power_on"
    desktop_id: UUID
    vm_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class OrphanAction:
    """An action on a VM tagged for the pool that none of its desktops owns, and why."""

    kind: ClassVar[str]
    vm_id: str
    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class ReportOrphan(OrphanAction):
    """Record, once, that a VM tagged for the pool belongs to none of its desktops."""

    kind: ClassVar[str] = "report_orphan"


@dataclass(frozen=True, slots=True)
class DeleteOrphanVm(OrphanAction):
    """Destroy a VM tagged for the pool that belongs to none of its desktops."""

    kind: ClassVar[str] = "delete_orphan_vm"


#: Everything reconciliation may ask for.
Action = (
    CreateDesktop
    | DeleteDesktop
    | ReplaceDesktop
    | RetryFailed
    | RefreshDesktop
    | MarkVmMissing
    | TimeOutStep
    | PowerOn
    | PowerOffDesktop
    | PowerUpDesktop
    | ReportOrphan
    | DeleteOrphanVm
)


def desktop_event(action: Action) -> DesktopEvent | None:
    """Return the desktop event that applies ``action`` to its desktop's record.

    ``None`` for actions that create a record (:class:`CreateDesktop`) or only act on the
    cluster or the audit trail (:class:`PowerOn`, :class:`ReportOrphan`,
    :class:`DeleteOrphanVm`).
    """
    match action:
        case DeleteDesktop():
            return Delete()
        case ReplaceDesktop():
            return Replace()
        case RetryFailed():
            return Retry()
        case RefreshDesktop():
            return Refresh()
        case PowerOffDesktop():
            return PowerOff()
        case PowerUpDesktop():
            return PowerUp()
        case MarkVmMissing(error=error) | TimeOutStep(error=error):
            return Failed(error)
        case CreateDesktop() | PowerOn() | ReportOrphan() | DeleteOrphanVm():
            return None


@dataclass(frozen=True, slots=True)
class PoolPlan:
    """The outcome of one reconciliation pass over one pool.

    :ivar generation: the pool generation the plan was made for; once the actions are
        applied, the pool's ``reconciled_generation`` can be set to it.
    :ivar rollout: the part of the pool's active rollout, if it has one
        (:mod:`deskpool.rollouts.planner`); its actions are applied with the others.
    """

    pool_id: UUID
    generation: int
    actions: tuple[Action, ...]
    health: PoolHealth
    summary: PoolSummary = field(repr=False)
    rollout: RolloutPlan | None = None
