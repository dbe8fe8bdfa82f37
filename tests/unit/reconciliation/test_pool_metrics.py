"""A pool's desktops by state and its schedule's phase, as the last reconciliation pass saw them."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from deskpool.reconciliation.metrics import PoolReconcileMetrics
from deskpool.schedules.samples import CapacitySample


def sample(ready: int, in_use: int, powered_off: int, other: int) -> CapacitySample:
    return CapacitySample(
        at=datetime(2026, 11, 30, 9, tzinfo=UTC),
        ready=ready,
        in_use=in_use,
        powered_off=powered_off,
        other=other,
        phase="office",
        min_ready=2,
        spare=1,
    )


def test_a_pools_desktops_by_state_follow_each_pass() -> None:
    registry = CollectorRegistry()
    metrics = PoolReconcileMetrics(registry)

    def desktops(state: str) -> float | None:
        return registry.get_sample_value(
            "deskpool_pool_desktops", {"pool_id": "pool-1", "state": state}
        )

    metrics.observe_schedule("pool-1", "office", sample(3, 1, 0, 2))
    assert [desktops(s) for s in ("ready", "in_use", "powered_off", "other")] == [3, 1, 0, 2]
    metrics.observe_schedule("pool-1", "night", sample(0, 1, 5, 0))
    assert [desktops(s) for s in ("ready", "in_use", "powered_off", "other")] == [0, 1, 5, 0]
    labels = {"pool_id": "pool-1"}
    assert registry.get_sample_value("deskpool_pool_powered_off_desktops", labels) == 5
    assert registry.get_sample_value("deskpool_pool_phase", {**labels, "phase": "night"}) == 1
    assert registry.get_sample_value("deskpool_pool_phase", {**labels, "phase": "office"}) is None
