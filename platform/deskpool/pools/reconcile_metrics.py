"""Prometheus metrics of pool reconciliation.

Registered on the runtime's own registry (``runtime.metrics``) once per runtime: the worker
component makes one :class:`PoolReconcileMetrics` and every reconciler the worker builds (one per
run or ``pool.reconcile`` job) counts on it.

``deskpool_reconcile_actions_total{kind}``
    Actions reconciliation applied, by kind (``create_desktop``, ``report_orphan``, ...).
``deskpool_reconcile_cycle_seconds``
    How long one reconciliation cycle took: a periodic run's batch, or one pool reconciled now.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

_CYCLE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class PoolReconcileMetrics:
    """The reconciliation metrics.

    :param registry: the process's registry (``runtime.metrics``); make one per registry.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.actions = Counter(
            "deskpool_reconcile_actions",
            "Actions pool reconciliation applied, by kind.",
            ["kind"],
            registry=registry,
        )
        self.cycle_seconds = Histogram(
            "deskpool_reconcile_cycle_seconds",
            "Time one reconciliation cycle took (a periodic run's batch, or one pool now).",
            buckets=_CYCLE_BUCKETS,
            registry=registry,
        )

    def count_action(self, kind: str) -> None:
        """Count one applied action of ``kind``."""
        self.actions.labels(kind=kind).inc()

    def observe_cycle(self, seconds: float) -> None:
        """Record the duration of one cycle."""
        self.cycle_seconds.observe(seconds)
