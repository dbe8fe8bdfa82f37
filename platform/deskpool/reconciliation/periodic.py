"""The schedule of pool reconciliation, and the interface the pools work plugs into it.

Every ``POOL_RECONCILE_INTERVAL`` one worker of the deployment (never two at once: it is a
:class:`~deskpool.jobs.periodic.PeriodicTask`) takes a batch of at most
``POOL_RECONCILE_BATCH_SIZE`` pools, those reconciled longest ago first, and reconciles them one
after the other. A pool that fails to reconcile fails alone: it is logged in one warning line
(no traceback), says so on the pool (its ``reconcile_error``), and the batch goes on.

What "reconcile a pool" means belongs to the pools work: it implements :class:`PoolReconciler`
and registers the task through ``deskpool_register_periodic_tasks``::

    registry.add(POOL_RECONCILE_TASK, pool_reconcile_task(PoolService))
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import asyncpg

from deskpool.jobs.model import LeaseLost
from deskpool.jobs.periodic import PeriodicContext, PeriodicTask
from deskpool.reconciliation.failures import PoolReconcileFailed, error_text

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: The name the reconciliation task is registered under.
POOL_RECONCILE_TASK = "pool_reconcile"


class PoolReconciler(Protocol):
    """What the pools work provides to the reconciliation schedule."""

    async def pools_to_reconcile(self, connection: asyncpg.Connection, limit: int) -> Sequence[str]:
        """Ids of at most ``limit`` pools, the one reconciled longest ago (or never) first."""

    async def reconcile_pool(self, pool_id: str, context: PeriodicContext) -> None:
        """Reconcile one pool and record when it was reconciled (so it moves to the back).

        Effects in PostgreSQL should be fenced with ``context.fence`` or by enqueueing jobs,
        which carry their own fencing.
        """


ReconcilerFactory = Callable[["Runtime"], PoolReconciler]


@dataclass(frozen=True)
class ReconcileBatch:
    """What one reconciliation run did."""

    reconciled: tuple[str, ...]
    failed: tuple[str, ...]


async def reconcile_batch(reconciler: PoolReconciler, context: PeriodicContext) -> ReconcileBatch:
    """Reconcile one batch of pools, oldest-reconciled first; a failing pool does not stop it."""
    batch_size = int(context.runtime.config["POOL_RECONCILE_BATCH_SIZE"])
    async with context.runtime.db.acquire() as connection:
        pool_ids = list(await reconciler.pools_to_reconcile(connection, batch_size))
    reconciled: list[str] = []
    failed: list[str] = []
    for pool_id in pool_ids[:batch_size]:
        if context.cancelled.is_set():
            break
        try:
            await reconciler.reconcile_pool(pool_id, context)
        except LeaseLost:
            raise
        except Exception as error:
            log.warning(
                "reconciling pool %s failed: %s; the batch goes on",
                pool_id,
                error if isinstance(error, PoolReconcileFailed) else error_text(error),
            )
            failed.append(pool_id)
        else:
            reconciled.append(pool_id)
    return ReconcileBatch(tuple(reconciled), tuple(failed))


def pool_reconcile_task(factory: ReconcilerFactory) -> PeriodicTask:
    """The periodic task that reconciles pools every ``POOL_RECONCILE_INTERVAL``.

    :param factory: builds the reconciler from the worker's runtime (once per run).
    """

    async def run(context: PeriodicContext) -> None:
        batch = await reconcile_batch(factory(context.runtime), context)
        # Every interval reconciles pools: only failures are worth a line above debug.
        level = logging.WARNING if batch.failed else logging.DEBUG
        log.log(level, "reconciled %d pool(s), %d failed", len(batch.reconciled), len(batch.failed))

    return PeriodicTask(
        run,
        every="POOL_RECONCILE_INTERVAL",
        description="Reconcile a batch of pools (POOL_RECONCILE_BATCH_SIZE), oldest first.",
    )
