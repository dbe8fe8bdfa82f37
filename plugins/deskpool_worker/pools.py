"""The pools work the worker runs: desktop jobs, ``pool.reconcile``, and the reconciliation task.

The platform holds the logic (:mod:`deskpool.provisioning.handlers`,
:mod:`deskpool.reconciliation.reconciler`); this module registers it with the worker, builds the
reconciliation policy from the configuration, and declares the worker's pool setting:

``POOL_FAILURE_BACKOFF``
    How long a failed desktop waits before it is retried the first time; the wait doubles
    with each consecutive failure of the desktop, up to an hour (or this value, if longer).

The reconciliation metrics (:class:`~deskpool.reconciliation.metrics.PoolReconcileMetrics`)
are made once per runtime, by the worker component; every reconciler the factory builds counts
on the running worker's (:func:`reconcile_metrics_of`).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from deskpool.config import Config, SettingRegistry, parse_duration
from deskpool.jobs.model import RegisteredJobKind
from deskpool.jobs.periodic import PeriodicTask
from deskpool.provisioning.handlers import desktop_job_kinds
from deskpool.reconciliation.jobs import (
    CLUSTER_ORPHAN_TASK,
    POOL_RECONCILE_JOB,
    cluster_orphan_task,
    pool_reconcile_job_kind,
)
from deskpool.reconciliation.metrics import PoolReconcileMetrics
from deskpool.reconciliation.periodic import POOL_RECONCILE_TASK, pool_reconcile_task
from deskpool.reconciliation.plan import ReconcilePolicy
from deskpool.reconciliation.reconciler import PoolReconcilerService
from deskpool.registry import Registry
from deskpool.runtime import Runtime

#: The component whose reconciliation metrics the reconcilers count on.
WORKER_COMPONENT = "worker"

#: The setting of the first retry's wait.
FAILURE_BACKOFF_SETTING = "POOL_FAILURE_BACKOFF"


def declare_settings(registry: SettingRegistry) -> None:
    """Declare ``POOL_FAILURE_BACKOFF``."""
    registry.section("Worker and reconciliation", owner="worker").add(
        FAILURE_BACKOFF_SETTING,
        parse_duration,
        "30s",
        "How long a failed desktop waits before its first retry; the wait doubles with "
        "each consecutive failure, up to 1h.",
        type_name="duration",
    )


def reconcile_policy(config: Config) -> ReconcilePolicy:
    """The wait timeouts of SPEC §8.5 and the configured failure backoff."""
    policy = ReconcilePolicy.from_config(config)
    base = timedelta(seconds=config.duration(FAILURE_BACKOFF_SETTING))
    if base <= timedelta(0):
        return policy
    return replace(
        policy, failure_backoff_base=base, failure_backoff_max=max(policy.failure_backoff_max, base)
    )


def reconcile_metrics_of(runtime: Runtime) -> PoolReconcileMetrics | None:
    """The reconciliation metrics of the runtime's worker component, if one runs."""
    worker = runtime.components.get(WORKER_COMPONENT)
    metrics = getattr(worker, "reconcile_metrics", None)
    return metrics if isinstance(metrics, PoolReconcileMetrics) else None


def pool_reconciler(runtime: Runtime) -> PoolReconcilerService:
    """A reconciler with the configured policy (one per reconciliation run or job)."""
    return PoolReconcilerService(
        runtime, reconcile_policy(runtime.config), reconcile_metrics_of(runtime)
    )


def register_job_kinds(registry: Registry[RegisteredJobKind]) -> None:
    """The desktop jobs and ``pool.reconcile``."""
    for name, kind in desktop_job_kinds().items():
        registry.add(name, kind)
    registry.add(POOL_RECONCILE_JOB, pool_reconcile_job_kind(pool_reconciler))


def register_periodic_tasks(registry: Registry[PeriodicTask]) -> None:
    """Pool reconciliation and the orphan scan of pool-less clusters (both periodic)."""
    registry.add(POOL_RECONCILE_TASK, pool_reconcile_task(pool_reconciler))
    registry.add(CLUSTER_ORPHAN_TASK, cluster_orphan_task(pool_reconciler))
