"""How reconciliation is asked for: the ``pool.reconcile`` job, and the cluster orphan scan.

A change that alters what reconciliation does to a pool (a pool created, resized, drained)
enqueues ``pool.reconcile`` for it (:func:`deskpool.pools.jobs.enqueue_pool_reconcile`, in the
change's transaction: the services below reconciliation ask for it there); the job
(:func:`pool_reconcile_job_kind`) reconciles that one pool at once, fenced by its lease; a pool
whose reconciliation fails ends the job failed at once, with the reason it records on the pool
(the periodic pass tries again). The periodic ``cluster_orphan_scan``
(:func:`cluster_orphan_task`) reports the orphans of clusters no pool uses. Both run the
reconciliation service (:class:`~deskpool.reconciliation.reconciler.PoolReconcilerService`) that
``factory`` builds; the periodic pass over every pool is :mod:`deskpool.reconciliation.periodic`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import asyncpg

from deskpool.jobs.context import JobContext
from deskpool.jobs.model import JobKind, PermanentJobFailure
from deskpool.jobs.periodic import PeriodicContext, PeriodicTask, hold_periodic_run

# Asked for below reconciliation (pools/jobs.py); here too, as the worker registers the kind.
from deskpool.pools.jobs import POOL_RECONCILE_JOB as POOL_RECONCILE_JOB
from deskpool.pools.jobs import enqueue_pool_reconcile as enqueue_pool_reconcile
from deskpool.reconciliation.failures import PoolReconcileFailed, ReconcileBusy

if TYPE_CHECKING:
    from deskpool.reconciliation.reconciler import PoolReconcilerService
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)


#: Builds the reconciliation service a run or a job uses, for its runtime.
ReconcilerFactory = Callable[["Runtime"], "PoolReconcilerService"]


#: The periodic task that reports the orphans of clusters no pool uses.
CLUSTER_ORPHAN_TASK = "cluster_orphan_scan"


def cluster_orphan_task(factory: ReconcilerFactory) -> PeriodicTask:
    """Report the orphans of clusters without pools, every ``POOL_RECONCILE_INTERVAL``."""

    async def run(context: PeriodicContext) -> None:
        async def fence(connection: asyncpg.Connection) -> None:
            await hold_periodic_run(connection, context.name, context.fence)

        reported = await factory(context.runtime).report_orphans_on_idle_clusters(fence)
        if reported:
            log.info("%d orphan VM(s) reported on clusters without pools", reported)

    return PeriodicTask(
        run,
        every="POOL_RECONCILE_INTERVAL",
        description="Reports VMs tagged as deskpool's on clusters that no pool uses.",
    )


def pool_reconcile_job_kind(factory: ReconcilerFactory) -> JobKind:
    """The ``pool.reconcile`` job kind, reconciling with what ``factory`` builds."""

    async def reconcile_one_pool(context: JobContext) -> None:
        try:
            pool_id = uuid.UUID(str(context.payload["pool_id"]))
        except (KeyError, ValueError) as error:
            raise PermanentJobFailure(f"the payload names no pool ({error})") from None
        try:
            await factory(context.runtime).reconcile_now(pool_id, context.hold_lease)
        except ReconcileBusy as busy:
            # Another reconciliation of the pool is applying; the periodic pass follows it.
            log.warning("%s", busy)
        except PoolReconcileFailed as failed:
            # Recorded on the pool; the periodic pass tries again, retrying the job would not.
            raise PermanentJobFailure(str(failed)) from None

    return JobKind(reconcile_one_pool)
