"""A pool whose reconciliation failed: why, in words an administrator can act on.

One pool's reconciliation fails alone. Whatever its schedule, its rollout, its plan or the
application of its plan raises, the other pools of the pass are planned and applied as if it
did not exist, and the pool records a :class:`ReconcileError` (a code, the reason in words, and
since when it has been failing) that the API's pool, the console's pool page and the metric
``deskpool_pool_reconcile_failing`` show. The next pass that succeeds clears it.

The codes:

``schedule_unusable``
    The phase in force of the pool's capacity schedule cannot be computed (a stored date the
    calendar cannot reach, say); or the schedule's warnings and log-offs cannot be planned.
``rollout_unusable``
    The pool's active image rollout cannot be planned (a start time that is not an instant).
``plan_failed``
    Anything else while planning the pool.
``apply_failed``
    Applying the pool's plan failed; nothing of it was kept.

The reason names the exception's type, and its message only for the errors of computation
(arithmetic, types, values) whose text says what went wrong in the data and holds no secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from deskpool.errors import error_text as error_text

# What the pool's store records is the pool's value; it is re-exported here.
from deskpool.pools.model import ReconcileError as ReconcileError


class FailureCode(StrEnum):
    """Which part of a pool's reconciliation failed (module docstring)."""

    SCHEDULE_UNUSABLE = "schedule_unusable"
    ROLLOUT_UNUSABLE = "rollout_unusable"
    PLAN_FAILED = "plan_failed"
    APPLY_FAILED = "apply_failed"


@dataclass(frozen=True, slots=True)
class PoolFailure:
    """One pool's failed pass: the code and the reason to record."""

    code: FailureCode
    reason: str


class PlanFailed(Exception):
    """A pool's planning raised: which part (``code``) and the error it raised."""

    def __init__(self, code: FailureCode, error: BaseException) -> None:
        super().__init__(f"{code}: {error_text(error)}")
        self.code = code
        self.error = error


class ReconcileBusy(Exception):
    """Another reconciliation of the pool held its lock for longer than a pass waits.

    Not a failure of the pool: the other reconciliation is doing the work; this pass leaves the
    pool to the next one.
    """


class PoolReconcileFailed(Exception):
    """Reconciling a pool failed; the failure is recorded on the pool."""

    def __init__(self, pool_name: str, failure: PoolFailure) -> None:
        super().__init__(f"pool {pool_name}: {failure.reason}")
        self.failure = failure


def schedule_failure(schedule: str, error: BaseException) -> PoolFailure:
    """The failure of a pool whose schedule cannot be evaluated."""
    return PoolFailure(
        FailureCode.SCHEDULE_UNUSABLE,
        f"the phase in force of its capacity schedule {schedule} cannot be computed "
        f"({error_text(error)}); correct or replace the schedule",
    )


def logoff_failure(error: BaseException) -> PoolFailure:
    """The failure of a pool whose schedule's warnings and log-offs cannot be planned."""
    return PoolFailure(
        FailureCode.SCHEDULE_UNUSABLE,
        f"the warnings and log-offs of its capacity schedule cannot be planned "
        f"({error_text(error)}); correct or replace the schedule",
    )


def plan_failure(failed: BaseException, rollout: str | None = None) -> PoolFailure:
    """The failure of a pool whose plan raised (``rollout``: its active rollout, if any)."""
    if isinstance(failed, PlanFailed) and failed.code is FailureCode.ROLLOUT_UNUSABLE:
        return PoolFailure(
            FailureCode.ROLLOUT_UNUSABLE,
            f"its image rollout {rollout or ''} cannot be planned ({error_text(failed.error)}); "
            "cancel the rollout and create it again".replace("  ", " "),
        )
    error = failed.error if isinstance(failed, PlanFailed) else failed
    return PoolFailure(
        FailureCode.PLAN_FAILED, f"its reconciliation could not be planned ({error_text(error)})"
    )


def apply_failure(error: BaseException) -> PoolFailure:
    """The failure of a pool whose plan could not be applied (nothing of it was kept)."""
    return PoolFailure(
        FailureCode.APPLY_FAILED,
        f"applying its reconciliation failed ({error_text(error)}); nothing was changed, "
        "the next pass tries again",
    )
