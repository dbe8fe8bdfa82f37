"""Prometheus metrics of the job queue and the periodic tasks.

Registered on the runtime's own registry (``runtime.metrics``), never the global one, and served
at ``/metrics`` by the ops listener of the worker process.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
_DURATION_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600)


class JobMetrics:
    """The worker's metrics.

    :param registry: the process's registry (``runtime.metrics``).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.queue_depth = Gauge(
            "deskpool_jobs",
            "Jobs in the queue by state (queued, running, dead) and kind, as last counted.",
            ["state", "kind"],
            registry=registry,
        )
        self.in_flight = Gauge(
            "deskpool_jobs_in_flight",
            "Jobs this worker process is running now.",
            registry=registry,
        )
        self.claim_latency = Histogram(
            "deskpool_job_claim_latency_seconds",
            "Time from a job being due to a worker claiming it.",
            ["kind"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.run_duration = Histogram(
            "deskpool_job_run_duration_seconds",
            "Time one attempt of a job ran, by outcome.",
            ["kind", "outcome"],
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.retries = Counter(
            "deskpool_job_retries",
            "Failed attempts that were scheduled to run again.",
            ["kind"],
            registry=registry,
        )
        self.reclaims = Counter(
            "deskpool_job_reclaims",
            "Jobs taken back because their lease expired without a heartbeat.",
            ["kind"],
            registry=registry,
        )
        self.dead = Counter(
            "deskpool_jobs_dead",
            "Jobs that ran out of attempts or failed permanently.",
            ["kind"],
            registry=registry,
        )
        self.stale_results = Counter(
            "deskpool_job_stale_results",
            "Results (completion, failure) rejected because the lease had been reclaimed.",
            ["kind"],
            registry=registry,
        )
        self.periodic_runs = Counter(
            "deskpool_periodic_runs",
            "Runs of periodic tasks by this process, by outcome.",
            ["task", "outcome"],
            registry=registry,
        )
        self.periodic_duration = Histogram(
            "deskpool_periodic_run_duration_seconds",
            "Time one run of a periodic task took.",
            ["task"],
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )

    def set_queue_depth(self, depth: Mapping[tuple[str, str], int]) -> None:
        """Replace the queue-depth gauge with a fresh count (labels absent now are dropped)."""
        self.queue_depth.clear()
        for (state, kind), jobs in depth.items():
            self.queue_depth.labels(state, kind).set(jobs)
