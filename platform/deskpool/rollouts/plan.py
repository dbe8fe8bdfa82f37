"""What a rollout's part of a reconciliation plan is made of: its actions and its limits.

The pure rollout planner (:mod:`deskpool.rollouts.planner`) returns a :class:`RolloutPlan`
for a pool with an active rollout; the pool planner (:mod:`deskpool.reconciliation.planner`) folds
it
into the pool's plan, and the reconciliation service applies its actions
(:mod:`deskpool.reconciliation.rollout_apply`). Each action carries a human-readable ``reason`` for
the audit
trail.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar
from uuid import UUID

from deskpool.rollouts.model import EntryRole, EntryState, RolloutCounts, RolloutState


@dataclass(frozen=True, slots=True)
class ChangeRollout:
    """Move the rollout to ``state``; the pool clones ``serving_template`` from then on."""

    kind: ClassVar[str] = "rollout_state"
    rollout_id: UUID
    state: RolloutState
    serving_template: str
    reason: str


@dataclass(frozen=True, slots=True)
class ReplaceForRollout:
    """Rebuild a free desktop from the new template (its entry becomes ``replacing``)."""

    kind: ClassVar[str] = "rollout_replace"
    desktop_id: UUID
    desktop_name: str
    role: EntryRole
    reason: str


@dataclass(frozen=True, slots=True)
class SettleEntry:
    """Record what became of a desktop the rollout touched (``replaced``, ``failed``...)."""

    kind: ClassVar[str] = "rollout_settle"
    desktop_id: UUID
    desktop_name: str
    role: EntryRole
    state: EntryState
    error: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class WaitForLogoff:
    """A desktop in use is replaced once its user logs off (its entry says so)."""

    kind: ClassVar[str] = "rollout_wait"
    desktop_id: UUID
    desktop_name: str
    role: EntryRole
    reason: str


@dataclass(frozen=True, slots=True)
class WarnUser:
    """Warn the user of a desktop in use that they are logged off at ``ends_at``."""

    kind: ClassVar[str] = "rollout_warn"
    desktop_id: UUID
    desktop_name: str
    role: EntryRole
    user: str
    ends_at: datetime
    message: str
    reason: str


@dataclass(frozen=True, slots=True)
class ForceLogoff:
    """The warning has run out: log the user of the desktop off."""

    kind: ClassVar[str] = "rollout_force_logoff"
    desktop_id: UUID
    desktop_name: str
    user: str
    reason: str


#: Everything a rollout may ask of reconciliation.
RolloutAction = (
    ChangeRollout | ReplaceForRollout | SettleEntry | WaitForLogoff | WarnUser | ForceLogoff
)


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    """A rollout's part of one reconciliation pass over its pool.

    :ivar actions: what the rollout does this pass.
    :ivar touched: desktops the rest of the plan must leave alone this pass.
    :ivar extra: desktops the pool may create beyond its usual target this pass, to keep
        ``min_ready`` while desktops are replaced (never beyond ``record_cap``).
    :ivar record_cap: the most desktop records the pool may have: ``max_size + surge``.
    :ivar hold_size: whether the pool must not shrink this pass (a rollout is under way).
    :ivar counts: how far the rollout is, after this pass's bookkeeping.
    :ivar shrink_to: every desktop runs the new template, but the pool has more than it keeps
        (the rollout's surge): the pool shrinks to this many before the rollout ends.
    """

    rollout_id: UUID
    actions: tuple[RolloutAction, ...]
    touched: frozenset[UUID]
    extra: int
    record_cap: int
    hold_size: bool
    counts: RolloutCounts
    shrink_to: int | None = None
