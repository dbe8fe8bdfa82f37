"""One pool's plan fails alone, and a plan made before another pass applied never overgrows.

:func:`plan_pools` with ``failures`` plans every other pool of the batch as if the failing
one did not exist; :func:`creates_allowed` cuts a plan's creates, under the pool's lock, to
what the pool still lacks.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime

from tests.support.pool_builders import DesktopBuilder, PoolBuilder
from tests.unit.pools.planning import POLICY

from deskpool.pools.model import PoolState
from deskpool.reconciliation.applying import creates_allowed
from deskpool.reconciliation.failures import FailureCode, PlanFailed, plan_failure
from deskpool.reconciliation.planner import plan_pools
from deskpool.reconciliation.planning import PlannedPool
from deskpool.reconciliation.store import PoolNow
from deskpool.rollouts.model import InUsePolicy, Rollout, RolloutState
from deskpool.rollouts.planner import RolloutView


def _naive_rollout(pool_id: uuid.UUID) -> RolloutView:
    """A scheduled rollout whose start was read back naive (stored at 0001-01-01)."""
    rollout = Rollout(
        id=uuid.uuid4(),
        pool_id=pool_id,
        from_template="ubuntu-22.04",
        to_template="ubuntu-24.04",
        canary=1,
        batch_size=1,
        min_ready=0,
        surge=0,
        in_use=InUsePolicy.WAIT_FOR_LOGOFF,
        warning_seconds=60,
        message="",
        start_at=datetime(1, 1, 1),
        stop_on_error=True,
        recreate_assigned=False,
        state=RolloutState.SCHEDULED,
        created_by="test",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    return RolloutView(rollout, {})


def test_a_pool_whose_rollout_cannot_be_planned_fails_alone(
    make_pool: PoolBuilder, now: datetime
) -> None:
    first = make_pool(min_size=2)
    broken = make_pool(id=uuid.UUID(int=200), name="dev", naming_pattern="dev-{n}", min_size=1)
    third = make_pool(id=uuid.UUID(int=300), name="ops", naming_pattern="ops-{n}", min_size=1)
    failures: dict[uuid.UUID, Exception] = {}

    plans = plan_pools(
        [first, broken, third],
        [],
        {first.cluster_id: []},
        now,
        POLICY,
        rollouts={broken.id: _naive_rollout(broken.id)},
        failures=failures,
    )

    assert [plan.pool_id for plan in plans] == [first.id, third.id]
    assert [len(plan.actions) for plan in plans] == [2, 1]
    failed = failures[broken.id]
    assert isinstance(failed, PlanFailed)
    assert failed.code is FailureCode.ROLLOUT_UNUSABLE
    failure = plan_failure(failed, "to 'ubuntu-24.04'")
    assert failure.code is FailureCode.ROLLOUT_UNUSABLE
    assert failure.reason == (
        "its image rollout to 'ubuntu-24.04' cannot be planned (TypeError: can't compare "
        "offset-naive and offset-aware datetimes); cancel the rollout and create it again"
    )


def _planned(pool_builder: PoolBuilder, make_desktop: DesktopBuilder, seen: int) -> PlannedPool:
    pool = pool_builder(min_size=5, max_size=5)
    desktops = [make_desktop(pool, n) for n in range(1, seen + 1)]
    [plan] = plan_pools([pool], desktops, {pool.cluster_id: []}, datetime.now(UTC), POLICY)
    return PlannedPool(pool, plan, {desktop.id: desktop for desktop in desktops}, {}, True)


def test_creates_planned_before_another_pass_applied_are_cut_to_what_is_missing(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder
) -> None:
    planned = _planned(make_pool, make_desktop, 0)  # it saw no desktop, wants 5
    others = frozenset(uuid.uuid4() for _ in range(5))  # another pass made them meanwhile
    now = PoolNow(5, PoolState.ENABLED, others, frozenset())
    assert creates_allowed(planned, now, 5) == 0
    assert creates_allowed(planned, replace(now, desktop_ids=frozenset(list(others)[:3])), 5) == 2
    assert creates_allowed(planned, replace(now, desktop_ids=frozenset()), 5) == 5


def test_creates_follow_the_pool_as_it_is_under_the_lock(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder
) -> None:
    planned = _planned(make_pool, make_desktop, 2)  # it saw 2 desktops, wants 3 more
    seen = frozenset(planned.desktops)
    assert creates_allowed(planned, PoolNow(5, PoolState.ENABLED, seen, frozenset()), 3) == 3
    assert creates_allowed(planned, PoolNow(3, PoolState.ENABLED, seen, frozenset()), 3) == 1
    assert creates_allowed(planned, PoolNow(5, PoolState.DISABLED, seen, frozenset()), 3) == 0
    assert creates_allowed(planned, None, 3) == 0  # the pool is gone
