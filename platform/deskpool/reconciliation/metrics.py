"""Prometheus metrics of pool reconciliation.

Registered on the runtime's own registry (``runtime.metrics``) once per runtime: the worker
component makes one :class:`PoolReconcileMetrics` and every reconciler the worker builds (one per
run or ``pool.reconcile`` job) counts on it.

``deskpool_reconcile_actions_total{kind}``
    Actions reconciliation applied, by kind (``create_desktop``, ``report_orphan``, ...).
``deskpool_reconcile_cycle_seconds``
    How long one reconciliation cycle took: a periodic run's batch, or one pool reconciled now.
``deskpool_rollout_desktops{pool_id,rollout_id,state}``
    The desktops of each active image rollout by state (``total``, ``on_new_template``,
    ``replacing``, ``waiting_for_logoff``, ``failed``), as its last reconciliation pass counted
    them; a rollout's series go when it ends.
``deskpool_pool_phase{pool_id,phase}``
    1 for the phase of the pool's schedule in force at the last pass (an exception's own
    settings are named after the exception); a pool without a schedule has ``phase=""``.
``deskpool_pool_powered_off_desktops{pool_id}``
    The pool's desktops powered off by its schedule, at the last pass.
``deskpool_pool_desktops{pool_id,state}``
    The pool's desktops at the last pass: ``ready`` (free, powered on), ``in_use``,
    ``powered_off``, ``other``.
``deskpool_pool_reconcile_failing{pool_id}``
    1 while the pool's reconciliation fails (its ``reconcile_error``), 0 once a pass over it
    succeeds again, as this worker last saw it.
``deskpool_reconcile_failures_total{code}``
    Passes over a pool that failed, by the failure's code (``schedule_unusable``,
    ``rollout_unusable``, ``plan_failed``, ``apply_failed``).
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from deskpool.rollouts.model import RolloutCounts
from deskpool.schedules.samples import CapacitySample

#: The states ``deskpool_rollout_desktops`` counts.
ROLLOUT_STATES = ("total", "on_new_template", "replacing", "waiting_for_logoff", "failed")

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
        self.rollout_desktops = Gauge(
            "deskpool_rollout_desktops",
            "Desktops of each active image rollout, by state.",
            ["pool_id", "rollout_id", "state"],
            registry=registry,
        )

        self.pool_phase = Gauge(
            "deskpool_pool_phase",
            "1 for the phase of the pool's schedule in force at the last pass.",
            ["pool_id", "phase"],
            registry=registry,
        )
        self.powered_off = Gauge(
            "deskpool_pool_powered_off_desktops",
            "Desktops of the pool powered off by its schedule, at the last pass.",
            ["pool_id"],
            registry=registry,
        )
        self.desktops = Gauge(
            "deskpool_pool_desktops",
            "The pool's desktops at the last pass, by state: ready (free, powered on), in_use, "
            "powered_off, other (being built, repaired, failed...).",
            ["pool_id", "state"],
            registry=registry,
        )
        self.failing = Gauge(
            "deskpool_pool_reconcile_failing",
            "1 while the pool's reconciliation fails (its reconcile_error), 0 once it succeeds.",
            ["pool_id"],
            registry=registry,
        )
        self.failures = Counter(
            "deskpool_reconcile_failures",
            "Passes over a pool that failed, by the failure's code.",
            ["code"],
            registry=registry,
        )
        self._phases: dict[str, str] = {}

    def observe_failure(self, pool_id: str, code: str) -> None:
        """Count a failed pass over the pool; it is failing."""
        self.failures.labels(code=code).inc()
        self.failing.labels(pool_id).set(1)

    def observe_success(self, pool_id: str) -> None:
        """A pass over the pool succeeded: it is not failing."""
        self.failing.labels(pool_id).set(0)

    def observe_schedule(self, pool_id: str, phase: str, sample: CapacitySample) -> None:
        """Record the pool's phase in force (the former one's series goes) and its desktops."""
        former = self._phases.get(pool_id)
        if former is not None and former != phase:
            with contextlib.suppress(KeyError):
                self.pool_phase.remove(pool_id, former)
        self._phases[pool_id] = phase
        self.pool_phase.labels(pool_id, phase).set(1)
        self.powered_off.labels(pool_id).set(sample.powered_off)
        for state in ("ready", "in_use", "powered_off", "other"):
            self.desktops.labels(pool_id, state).set(getattr(sample, state))

    def count_action(self, kind: str) -> None:
        """Count one applied action of ``kind``."""
        self.actions.labels(kind=kind).inc()

    def observe_cycle(self, seconds: float) -> None:
        """Record the duration of one cycle."""
        self.cycle_seconds.observe(seconds)

    def observe_rollout(
        self, pool_id: str, rollout_id: str, counts: RolloutCounts, *, ended: bool
    ) -> None:
        """Record a rollout's desktops by state; forget its series once it ``ended``."""
        for state in ROLLOUT_STATES:
            if ended:
                with contextlib.suppress(KeyError):
                    self.rollout_desktops.remove(pool_id, rollout_id, state)
            else:
                value = getattr(counts, state)
                self.rollout_desktops.labels(pool_id, rollout_id, state).set(value)
