"""Jobs: the PostgreSQL job queue, periodic tasks, and what their handlers receive.

Every slow or risky operation (cloning, powering, waiting for a guest) runs as a job in the
worker. The promise is at-least-once execution with no job lost, and no effect applied twice by
two workers at once:

- :mod:`deskpool.jobs.queue`: enqueue (with an idempotency key), claim with ``FOR UPDATE SKIP
  LOCKED`` under a lease with a fencing token, heartbeat, complete, fail (retry with backoff,
  then ``dead``), release, reclaim expired leases; the statements of the jobs API.
- :mod:`deskpool.jobs.model`: states, :class:`JobKind`, :class:`RetryPolicy`, leases.
- :mod:`deskpool.jobs.context`: :class:`JobContext`, what a handler receives.
- :mod:`deskpool.jobs.periodic`: :class:`PeriodicTask`, run once per interval across workers.
- :mod:`deskpool.reconciliation.periodic`: the reconciliation schedule the pools work plugs into.
- :mod:`deskpool.jobs.metrics`: the worker's Prometheus metrics.

Plugins register job kinds with ``deskpool_register_job_kinds`` and periodic tasks with
``deskpool_register_periodic_tasks``; the ``worker`` component runs them.
"""

from deskpool.jobs.context import JobContext
from deskpool.jobs.model import (
    Job,
    JobKind,
    JobLease,
    JobState,
    LeaseLost,
    PermanentJobFailure,
    RetryPolicy,
)
from deskpool.jobs.periodic import PeriodicContext, PeriodicTask
from deskpool.jobs.queue import enqueue

__all__ = [
    "Job",
    "JobContext",
    "JobKind",
    "JobLease",
    "JobState",
    "LeaseLost",
    "PeriodicContext",
    "PeriodicTask",
    "PermanentJobFailure",
    "RetryPolicy",
    "enqueue",
]
