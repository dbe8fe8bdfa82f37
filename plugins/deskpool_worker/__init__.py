"""The ``worker`` component: runs queued jobs and periodic tasks.

The component combines a :class:`~deskpool_worker.runner.JobRunner` (at most
``WORKER_CONCURRENCY`` jobs at once, claimed and completed in batches under leases of
``WORKER_LEASE_DURATION``) and a :class:`~deskpool_worker.scheduler.PeriodicScheduler`. It runs
the job kinds and periodic tasks that plugins register (``deskpool_register_job_kinds``,
``deskpool_register_periodic_tasks``) and registers the platform's own: the desktop jobs and
``pool.reconcile`` (:mod:`deskpool_worker.pools`), and the periodic tasks of pool
reconciliation, audit partition maintenance, the pruning of finished jobs and of expired
idempotency keys, and licensing (the
expiry watermark and activation reports, :mod:`deskpool.licensing.tasks`).

On stop (SIGTERM) it stops claiming, gives in-flight jobs and runs ``WORKER_SHUTDOWN_TIMEOUT``
to finish, then cancels them and releases their leases so another worker takes them at once.
The process supervisor's stop timeout must exceed ``WORKER_SHUTDOWN_TIMEOUT``
(docs/operators/worker.md).

A job's and a periodic run's statements are bounded by ``WORKER_STATEMENT_TIMEOUT``, not by the
requests' ``DATABASE_STATEMENT_TIMEOUT`` (:func:`deskpool.db.bounded.statement_bound`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from datetime import timedelta

from deskpool.audit import maintain_audit_partitions
from deskpool.config import SettingRegistry, parse_duration, parse_int
from deskpool.idempotency import store as idempotency_store
from deskpool.identity import access
from deskpool.jobs import queue
from deskpool.jobs.metrics import JobMetrics
from deskpool.jobs.model import JobKind, RegisteredJobKind
from deskpool.jobs.periodic import PeriodicContext, PeriodicTask
from deskpool.licensing import tasks as licensing_tasks
from deskpool.plugins import hookimpl
from deskpool.reconciliation.metrics import PoolReconcileMetrics
from deskpool.recordings import service as recordings
from deskpool.registry import Registry
from deskpool.revocation import service as revocation
from deskpool.runtime import ComponentFactory, Runtime
from deskpool.task_stop import cancel_until_done
from deskpool.vm_events.watcher import REFRESH_SECONDS, VmEventWatcher
from deskpool_worker import event_export, outage, pools, sessions
from deskpool_worker.runner import JobRunner, RunnerSettings
from deskpool_worker.scheduler import PeriodicScheduler

log = logging.getLogger(__name__)

#: The reference section of the worker's settings.
SETTINGS_SECTION = "Worker and reconciliation"

#: How long succeeded and cancelled jobs stay listed before they are pruned.
FINISHED_JOB_RETENTION = timedelta(days=7)

#: How often finished jobs are pruned.
JOB_PRUNE_INTERVAL = 3600.0


def new_worker_id() -> str:
    """``host:pid:random``: unique per process, and says where a lease holder runs."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


class WorkerComponent:
    """Runs jobs and periodic tasks until stopped.

    :param runtime: the process runtime.
    """

    name = pools.WORKER_COMPONENT

    def __init__(self, runtime: Runtime) -> None:
        # Handing a started desktop over judges its user's access, and schedule and session
        # work revokes what a user lost: revocation is composed here, as the api and the
        # gateway compose it (deskpool.identity.access).
        access.install(revocation)
        self.runtime = runtime
        config = runtime.config
        self.worker_id = new_worker_id()
        self.metrics = JobMetrics(runtime.metrics)
        #: Counted on by every reconciler of this process (``pools.reconcile_metrics_of``).
        self.reconcile_metrics = PoolReconcileMetrics(runtime.metrics)
        lease = timedelta(seconds=config.duration("WORKER_LEASE_DURATION"))
        kinds = {name: JobKind.of(item) for name, item in runtime.plugins.job_kinds().items()}
        self.runner = JobRunner(
            runtime,
            RunnerSettings(
                worker_id=self.worker_id,
                concurrency=config["WORKER_CONCURRENCY"],
                lease=lease,
                poll_interval=config.duration("WORKER_POLL_INTERVAL"),
                statement_timeout=config.duration("WORKER_STATEMENT_TIMEOUT"),
                kinds=kinds,
            ),
            self.metrics,
        )
        tasks = {
            name: periodic_task(item) for name, item in runtime.plugins.periodic_tasks().items()
        }
        self.scheduler = PeriodicScheduler(
            runtime,
            tasks,
            self.metrics,
            worker_id=self.worker_id,
            lease=lease,
            statement_timeout=config.duration("WORKER_STATEMENT_TIMEOUT"),
        )
        #: Every worker watches the VM events of the clusters that report them.
        self.vm_events = VmEventWatcher(runtime)
        #: Every worker sends webhook deliveries (each subscription by one worker at a time).
        self.webhooks = event_export.webhook_sender(runtime, self.worker_id)
        #: With SYSLOG_ADDRESS, every worker may stream the audit trail (one at a time).
        self.syslog = event_export.syslog_streamer(runtime, self.worker_id)
        self._watching: asyncio.Task[None] | None = None
        #: Every worker keeps the outage snapshot (replays and refreshes are idempotent).
        self.outage = outage.SnapshotKeeper(runtime)
        self._sending: asyncio.Task[None] | None = None
        self._exporting: asyncio.Task[None] | None = None
        self._started = False

    @property
    def started(self) -> bool:
        """Whether the worker runs."""
        return self._started

    async def start(self) -> None:
        """Start the job runner and the periodic scheduler."""
        await self.runner.start()
        await self.scheduler.start()
        self._watching = asyncio.create_task(self._watch_vm_events(), name="vm-events")
        self.outage.start()
        self._sending = asyncio.create_task(self.webhooks.run(), name="webhooks")
        if self.syslog is not None:
            self._exporting = asyncio.create_task(self.syslog.run(), name="syslog")
        self._started = True
        log.info(
            "worker %s: %d job kind(s) (%s), %d periodic task(s) (%s), concurrency %d",
            self.worker_id,
            len(self.runner.kinds),
            ", ".join(sorted(self.runner.kinds)) or "none",
            len(self.scheduler.tasks),
            ", ".join(sorted(self.scheduler.tasks)) or "none",
            self.runner.settings.concurrency,
        )

    async def stop(self) -> None:
        """Stop claiming; drain within ``WORKER_SHUTDOWN_TIMEOUT``; release what is left."""
        self._started = False
        timeout = self.runtime.config.duration("WORKER_SHUTDOWN_TIMEOUT")
        await self.outage.stop()
        for task in (self._watching, self._sending, self._exporting):
            await cancel_until_done(task)
        self._watching = self._sending = self._exporting = None
        await asyncio.gather(self.runner.stop(timeout), self.scheduler.stop(timeout))
        await self.vm_events.close()

    async def _watch_vm_events(self) -> None:
        """Refresh the VM event watchers (every ``POOL_RECONCILE_INTERVAL``, 5 s at most)."""
        interval = min(self.runtime.config.duration("POOL_RECONCILE_INTERVAL"), REFRESH_SECONDS)
        while True:
            try:
                await self.vm_events.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the database went away: try again next time
                log.warning("refreshing the VM event watchers failed: %s", type(error).__name__)
            await asyncio.sleep(interval)


def periodic_task(registered: object) -> PeriodicTask:
    """Check what a plugin registered as a periodic task."""
    if not isinstance(registered, PeriodicTask):
        raise TypeError(f"a periodic task is a deskpool.jobs.PeriodicTask, not {registered!r}")
    return registered


# --------------------------------------------------------------------------- built-in tasks


async def audit_maintenance(context: PeriodicContext) -> None:
    """Create the coming months' audit partitions; drop those past ``AUDIT_RETENTION_MONTHS``."""
    retention = int(context.runtime.config["AUDIT_RETENTION_MONTHS"])
    async with context.runtime.db.acquire() as connection:
        await maintain_audit_partitions(connection, retention)


async def prune_finished_jobs(context: PeriodicContext) -> None:
    """Delete succeeded and cancelled jobs older than :data:`FINISHED_JOB_RETENTION`."""
    async with context.runtime.db.acquire() as connection:
        pruned = await queue.prune_finished(connection, FINISHED_JOB_RETENTION)
    if pruned:
        log.info("pruned %d finished job(s)", pruned)


async def purge_idempotency_keys(context: PeriodicContext) -> None:
    """Delete the idempotency keys (and their stored responses) older than 24 hours."""
    purged = await idempotency_store.purge_expired(context.runtime.db)
    if purged:
        log.info("purged %d expired idempotency key(s)", purged)


@hookimpl
def deskpool_register_components(registry: Registry[ComponentFactory]) -> None:
    """Register the ``worker`` component."""
    registry.add("worker", WorkerComponent)


@hookimpl
def deskpool_declare_settings(registry: SettingRegistry) -> None:
    """Declare the worker's own settings.

    They are the job runner's, the audit maintenance's, ``POOL_FAILURE_BACKOFF`` and
    ``SESSION_CHECK_INTERVAL``. Pool reconciliation's and licensing's settings are the platform's
    (:mod:`deskpool.area_settings`): platform code reads them.
    """
    worker = registry.section(SETTINGS_SECTION, owner="worker")
    worker.add(
        "WORKER_POLL_INTERVAL",
        parse_duration,
        "1m",
        "Job queue polling interval (a fallback: LISTEN/NOTIFY wakes idle workers at once).",
        type_name="duration",
    )
    worker.add(
        "WORKER_CONCURRENCY",
        parse_int(1, 256),
        "32",
        "Jobs one worker process runs at the same time (most jobs wait on a hypervisor, so many "
        "fit one process); also the size of a claim batch.",
        type_name="integer",
    )
    worker.add(
        "WORKER_LEASE_DURATION",
        parse_duration,
        "5m",
        "How long a leased job runs without a heartbeat before another worker reclaims it.",
        type_name="duration",
    )
    worker.add(
        "WORKER_STATEMENT_TIMEOUT",
        parse_duration,
        "5m",
        "Longest a statement of a job or a periodic task may run (the server cancels it, the "
        "worker gives up on an answer 0.5 s later). A job may rightly run longer statements than "
        "a request (`DATABASE_STATEMENT_TIMEOUT`, which bounds the worker's own bookkeeping: "
        "claims, heartbeats, completions).",
        type_name="duration",
    )
    worker.add(
        "WORKER_SHUTDOWN_TIMEOUT",
        parse_duration,
        "30s",
        "Graceful drain deadline for in-flight jobs at shutdown. The supervisor's stop timeout "
        "must exceed it.",
        type_name="duration",
    )
    worker.add(
        "AUDIT_RETENTION_MONTHS",
        parse_int(0, 1200),
        "0",
        "Trailing months of audit events kept. 0 keeps all.",
        type_name="integer",
    )
    worker.add(
        "AUDIT_MAINTENANCE_INTERVAL",
        parse_duration,
        "24h",
        "How often upcoming audit partitions are provisioned and expired ones pruned.",
        type_name="duration",
    )
    pools.declare_settings(registry)
    sessions.declare_settings(registry)
    outage.declare_settings(registry)
    event_export.declare_settings(registry)
    event_export.declare_syslog_settings(registry)


@hookimpl
def deskpool_register_job_kinds(registry: Registry[RegisteredJobKind]) -> None:
    """Register the desktop jobs and ``pool.reconcile``."""
    pools.register_job_kinds(registry)


@hookimpl
def deskpool_register_periodic_tasks(registry: Registry[PeriodicTask]) -> None:
    """Register reconciliation, the session check, audit, recordings, jobs and licensing tasks."""
    pools.register_periodic_tasks(registry)
    sessions.register_periodic_tasks(registry)
    licensing_tasks.register_periodic_tasks(registry)
    registry.add(
        "audit_maintenance",
        PeriodicTask(
            audit_maintenance,
            every="AUDIT_MAINTENANCE_INTERVAL",
            description="Create upcoming audit partitions and drop expired ones.",
        ),
    )
    registry.add(
        "recording_retention",
        PeriodicTask(
            recordings.retention_task,
            every="RECORDINGS_MAINTENANCE_INTERVAL",
            description="Delete session recordings older than RECORDINGS_RETENTION_DAYS.",
        ),
    )
    registry.add(
        "idempotency_purge",
        PeriodicTask(
            purge_idempotency_keys,
            every=JOB_PRUNE_INTERVAL,
            description="Delete idempotency keys and their responses after 24 hours.",
        ),
    )
    registry.add(
        "job_prune",
        PeriodicTask(
            prune_finished_jobs,
            every=JOB_PRUNE_INTERVAL,
            description="Delete succeeded and cancelled jobs after a week.",
        ),
    )
