"""The rollout domain model: a pool's image rolled out to another template, and its rules.

A *rollout* moves a pool from one template (``from_template``) to another (``to_template``)
with a *strategy* (:class:`Strategy`): ``canary`` desktops first, then ``batch_size`` at a
time, never fewer than ``min_ready`` ready free desktops while that can be avoided, at most
``surge`` desktops above ``max_size``, users of desktops in use waited for (``wait_for_logoff``)
or warned and then logged off (``force_logoff``). Its life:

==============  ==========================================================================
state           meaning
==============  ==========================================================================
``scheduled``   waits for ``start_at``
``canary``      the canary desktops are being replaced; nothing else is touched
``rolling``     the canary is ready on the new template; the rest follows in batches
``paused``      an administrator paused it; nothing new is replaced (``paused_from`` says
                where it resumes)
``succeeded``   every desktop in its scope runs the new template
``failed``      a canary or batch desktop failed with ``stop_on_error``; the pool serves the
                old template again and ``reason`` says why
``cancelled``   an administrator cancelled it; desktops already on the new template stay
==============  ==========================================================================

Each desktop the rollout touches has a :class:`RolloutDesktop` entry. Everything here is plain
data and rules without I/O; the planning is :mod:`deskpool.rollouts.planner`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from uuid import UUID

from deskpool.errors import Conflict, FieldError
from deskpool.pools.model import Pool

#: The longest message a rollout shows users.
MAX_MESSAGE_LENGTH = 500

#: The longest warning before a forced log-off: a day.
MAX_WARNING_SECONDS = 86_400


class RolloutState(StrEnum):
    """Where a rollout is (module docstring)."""

    SCHEDULED = "scheduled"
    CANARY = "canary"
    ROLLING = "rolling"
    PAUSED = "paused"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


#: States in which a rollout is the pool's active one (at most one per pool).
ACTIVE_STATES = frozenset(
    {RolloutState.SCHEDULED, RolloutState.CANARY, RolloutState.ROLLING, RolloutState.PAUSED}
)

#: States in which a rollout has ended.
ENDED = frozenset({RolloutState.SUCCEEDED, RolloutState.FAILED, RolloutState.CANCELLED})

#: States in which a rollout replaces desktops.
RUNNING_STATES = frozenset({RolloutState.CANARY, RolloutState.ROLLING})


class InUsePolicy(StrEnum):
    """What happens to a desktop in use that the rollout must replace."""

    #: It is replaced after its user logs off.
    WAIT_FOR_LOGOFF = "wait_for_logoff"
    #: Its user is warned, and logged off ``warning_seconds`` later.
    FORCE_LOGOFF = "force_logoff"


class EntryRole(StrEnum):
    """Why the rollout touched a desktop."""

    CANARY = "canary"
    BATCH = "batch"


class EntryState(StrEnum):
    """What the rollout did to a desktop."""

    #: In use; replaced once its user logs off.
    WAITING_FOR_LOGOFF = "waiting_for_logoff"
    #: In use; its user was warned and is logged off at ``logoff_at``.
    WARNED = "warned"
    #: Being rebuilt from the new template.
    REPLACING = "replacing"
    #: Ready on the new template (or gone from the pool).
    REPLACED = "replaced"
    #: Its rebuild failed.
    FAILED = "failed"


class RolloutConflict(Conflict):
    """The rollout cannot do that in its state, or the pool already has an active rollout."""

    code = "rollout_conflict"
    title = "The rollout cannot do that now"


@dataclass(frozen=True, slots=True, kw_only=True)
class Strategy:
    """How a rollout replaces desktops (module docstring); ``min_ready`` ``None`` = ``spare``."""

    canary: int = 1
    batch_size: int = 1
    min_ready: int | None = None
    surge: int = 0
    in_use: InUsePolicy = InUsePolicy.WAIT_FOR_LOGOFF
    warning_seconds: int = 300
    message: str = ""
    start_at: datetime | None = None
    stop_on_error: bool = True
    recreate_assigned: bool = False


@dataclass(frozen=True)
class StartRollout:
    """A rollout to start: the template to move the pool to, and how."""

    template: str
    strategy: Strategy = Strategy()


def validate_strategy(strategy: Strategy, pool: Pool, to_template: str) -> list[FieldError]:
    """Every invalid field of a rollout of ``pool`` to ``to_template`` with ``strategy``."""
    errors: list[FieldError] = []

    def error(field: str, message: str) -> None:
        errors.append(FieldError(f"/{field}", message))

    if not to_template.strip():
        error("template", "must name a template of the cluster")
    elif to_template == pool.template:
        error("template", f"the pool already runs template {pool.template}")
    if strategy.canary < 0:
        error("canary", "must be 0 or more")
    elif strategy.canary > pool.max_size:
        error("canary", f"must not exceed the pool's max_size ({pool.max_size})")
    if strategy.batch_size < 1:
        error("batch_size", "must be at least 1")
    if strategy.min_ready is not None:
        if strategy.min_ready < 0:
            error("min_ready", "must be 0 or more")
        elif strategy.min_ready > pool.max_size:
            error("min_ready", f"must not exceed the pool's max_size ({pool.max_size})")
    if strategy.surge < 0:
        error("surge", "must be 0 or more")
    elif strategy.surge > pool.max_size:
        error("surge", f"must not exceed the pool's max_size ({pool.max_size})")
    if not 0 <= strategy.warning_seconds <= MAX_WARNING_SECONDS:
        error("warning_seconds", f"must be between 0 and {MAX_WARNING_SECONDS}")
    if len(strategy.message) > MAX_MESSAGE_LENGTH:
        error("message", f"must be at most {MAX_MESSAGE_LENGTH} characters")
    if strategy.recreate_assigned and not pool.is_persistent:
        error("recreate_assigned", "only persistent pools assign desktops")
    return errors


@dataclass(frozen=True, slots=True, kw_only=True)
class Rollout:
    """A rollout of a pool's image (module docstring); ``min_ready`` is resolved."""

    id: UUID
    pool_id: UUID
    from_template: str
    to_template: str
    canary: int
    batch_size: int
    min_ready: int
    surge: int
    in_use: InUsePolicy
    warning_seconds: int
    message: str
    start_at: datetime
    stop_on_error: bool
    recreate_assigned: bool
    state: RolloutState
    created_by: str
    created_at: datetime
    paused_from: RolloutState | None = None
    reason: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def is_active(self) -> bool:
        """Whether it is the pool's active rollout."""
        return self.state in ACTIVE_STATES

    @property
    def is_running(self) -> bool:
        """Whether it replaces desktops now."""
        return self.state in RUNNING_STATES


def new_rollout(
    *,
    rollout_id: UUID,
    pool: Pool,
    to_template: str,
    strategy: Strategy,
    created_by: str,
    now: datetime,
) -> Rollout:
    """The rollout a valid request makes: ``scheduled``, to start at ``start_at`` or now."""
    return Rollout(
        id=rollout_id,
        pool_id=pool.id,
        from_template=pool.template,
        to_template=to_template,
        canary=strategy.canary,
        batch_size=strategy.batch_size,
        min_ready=pool.spare if strategy.min_ready is None else strategy.min_ready,
        surge=strategy.surge,
        in_use=strategy.in_use,
        warning_seconds=strategy.warning_seconds,
        message=strategy.message,
        start_at=strategy.start_at or now,
        stop_on_error=strategy.stop_on_error,
        recreate_assigned=strategy.recreate_assigned,
        state=RolloutState.SCHEDULED,
        created_by=created_by,
        created_at=now,
    )


def pause(rollout: Rollout, now: datetime) -> Rollout:
    """The rollout paused; only a scheduled, canary or rolling one can be."""
    if rollout.state not in (RolloutState.SCHEDULED, *RUNNING_STATES):
        raise RolloutConflict(f"a {rollout.state} rollout cannot be paused")
    return replace(rollout, state=RolloutState.PAUSED, paused_from=rollout.state, reason="paused")


def resume(rollout: Rollout, now: datetime) -> Rollout:
    """The paused rollout, back where it was paused."""
    if rollout.state is not RolloutState.PAUSED:
        raise RolloutConflict(f"a {rollout.state} rollout cannot be resumed")
    return replace(
        rollout, state=rollout.paused_from or RolloutState.SCHEDULED, paused_from=None, reason=""
    )


def cancel(rollout: Rollout, now: datetime) -> Rollout:
    """The rollout cancelled; desktops already on the new template stay."""
    if not rollout.is_active:
        raise RolloutConflict(f"a {rollout.state} rollout cannot be cancelled")
    return finish(rollout, RolloutState.CANCELLED, "cancelled by an administrator", now)


def finish(rollout: Rollout, state: RolloutState, reason: str, now: datetime) -> Rollout:
    """The rollout ended in ``state`` (succeeded, failed, cancelled) because of ``reason``."""
    return replace(rollout, state=state, reason=reason, finished_at=now, paused_from=None)


def serving_template(rollout: Rollout) -> str:
    """The template the pool clones while ``rollout`` is in its state.

    The new template only once the canary is proven (``rolling``, or a rolling rollout
    paused); before that, and after a failure or a cancellation, the old one.
    """
    rolling = rollout.state is RolloutState.ROLLING or (
        rollout.state is RolloutState.PAUSED and rollout.paused_from is RolloutState.ROLLING
    )
    if rolling or rollout.state is RolloutState.SUCCEEDED:
        return rollout.to_template
    return rollout.from_template


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutDesktop:
    """What a rollout did to one desktop (:class:`EntryState`)."""

    rollout_id: UUID
    desktop_id: UUID
    desktop_name: str
    role: EntryRole
    state: EntryState
    updated_at: datetime
    warned_at: datetime | None = None
    logoff_at: datetime | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RolloutCounts:
    """How far a rollout is.

    :ivar total: desktops of the pool the rollout must put on the new template.
    :ivar on_new_template: those ready or in use on it.
    :ivar replacing: being rebuilt by the rollout.
    :ivar waiting_for_logoff: in use, waiting for their user to log off (warned or not).
    :ivar failed: whose rebuild failed.
    """

    total: int
    on_new_template: int
    replacing: int
    waiting_for_logoff: int
    failed: int

    @property
    def percent(self) -> int:
        """Progress in whole percent (100 when there is nothing to do)."""
        if self.total <= 0:
            return 100
        return min(100, self.on_new_template * 100 // self.total)


def count_entries(entries: Iterable[RolloutDesktop]) -> Counter[EntryState]:
    """The rollout's desktops by entry state."""
    return Counter(entry.state for entry in entries)
