"""``deskpool_rollout_desktops``: an active rollout's desktops by state, gone when it ends."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from deskpool.reconciliation.metrics import PoolReconcileMetrics
from deskpool.rollouts.model import RolloutCounts


def test_a_rollouts_desktops_by_state_are_gauges_until_it_ends() -> None:
    registry = CollectorRegistry()
    metrics = PoolReconcileMetrics(registry)
    counts = RolloutCounts(total=6, on_new_template=3, replacing=2, waiting_for_logoff=1, failed=0)
    metrics.observe_rollout("pool-1", "rollout-1", counts, ended=False)

    def value(state: str) -> float | None:
        return registry.get_sample_value(
            "deskpool_rollout_desktops",
            {"pool_id": "pool-1", "rollout_id": "rollout-1", "state": state},
        )

    assert [value(s) for s in ("total", "on_new_template", "replacing")] == [6, 3, 2]
    assert (value("waiting_for_logoff"), value("failed")) == (1, 0)
    metrics.observe_rollout("pool-1", "rollout-1", counts, ended=True)
    assert value("total") is None
