"""The provisioning tests' helpers: simulated clusters, pools, jobs run by hand, converged pools."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

import asyncpg

from deskpool.clusters.repository import ClusterRecord
from deskpool.desktops import store as store_desktops
from deskpool.desktops.jobs import PROVISION
from deskpool.jobs import queue
from deskpool.jobs.context import JobContext
from deskpool.jobs.model import ClaimedJob, LeaseLost
from deskpool.pools.model import Desktop, Pool
from deskpool.reconciliation import store as store_reconcile
from deskpool.reconciliation.plan import ReconcilePolicy
from deskpool.runtime import Runtime
from deskpool_driver_simulator import SimulatorDriver

LEASE = timedelta(seconds=30)


#: Fast simulated phases: a desktop is ready within a few tens of milliseconds.
FAST = {
    "clone_seconds": 0.01,
    "boot_seconds": 0.01,
    "agent_seconds": 0.01,
    "oobe_seconds": 0.02,
    "shutdown_seconds": 0.01,
}


LINUX_TEMPLATE = "ubuntu-22.04"
WINDOWS_TEMPLATE = "windows-11"
MakeCluster = Callable[..., Awaitable[ClusterRecord]]


@dataclass
class Simulator:
    """A simulator driver on a test cluster, outside deskpool's jobs (the test's own hands)."""

    driver: SimulatorDriver

    async def vms_of(self, desktop_id: uuid.UUID) -> list[str]:
        """Ids of the VMs tagged for the desktop."""
        return [
            vm.id for vm in await self.driver.list_owned_vms() if vm.desktop_id == str(desktop_id)
        ]


SimulatorFor = Callable[[ClusterRecord], Awaitable[Simulator]]
MakePool = Callable[..., Awaitable[Pool]]


async def add_desktop(db: asyncpg.Connection, pool: Pool, name: str | None = None) -> Desktop:
    """A new desktop of ``pool`` in ``provisioning``, as reconciliation creates one."""
    [desktop] = await store_desktops.insert_desktops(
        db, pool, [name or pool.naming_pattern.format(n=secrets.randbelow(99) + 1)]
    )
    return desktop


async def claim(db: asyncpg.Connection, job_id: int, lease: timedelta = LEASE) -> ClaimedJob:
    """Claim one given job, as a worker's claim would."""
    row = await db.fetchrow(
        """
        UPDATE jobs SET state = 'running', attempts = attempts + 1, fence = fence + 1,
                        worker = 'test', lease_expires_at = now() + $2::interval,
                        heartbeat_at = now(), started_at = now(), updated_at = now()
         WHERE id = $1 AND state = 'queued'
        RETURNING id, kind, payload, attempts, max_attempts, fence, resource_type, resource_id,
                  extract(epoch FROM now() - run_at)::float8 AS waited
        """,
        job_id,
        lease,
    )
    assert row is not None, f"job {job_id} is not queued"
    return ClaimedJob.from_record(row)


def job_context(runtime: Runtime, job: ClaimedJob, lease: timedelta = LEASE) -> JobContext:
    """The context a worker gives the handler of ``job``."""

    async def heartbeat() -> None:
        async with runtime.db.acquire() as connection:
            held = await queue.heartbeat(connection, [job.lease], lease)
        if job.lease not in held:
            raise LeaseLost(f"job {job.id} was reclaimed")

    return JobContext(
        job,
        runtime,
        lease_duration=lease,
        deadline=asyncio.get_running_loop().time() + 600,
        heartbeat=heartbeat,
    )


RunJob = Callable[..., Awaitable[JobContext]]


async def provision_all(db: asyncpg.Connection, run_job: RunJob) -> None:
    """Run every queued provisioning job."""
    for job_id in await db.fetch(
        "SELECT id FROM jobs WHERE kind = $1 AND state = 'queued' ORDER BY id", PROVISION
    ):
        await run_job(job_id["id"])


#: The reconciliation policy of these tests: a failed desktop may be retried at once.
POLICY = ReconcilePolicy(failure_backoff_base=timedelta(milliseconds=1))


async def no_fence(connection: asyncpg.Connection) -> None:
    """Effects of a test's direct call need no lease."""


async def desktops(db: asyncpg.Connection, pool: Pool) -> list[Desktop]:
    """The desktops of ``pool``."""
    return (await store_reconcile.desktops_of_pools(db, [pool.id]))[pool.id]


ConvergedPool = Callable[..., Awaitable[tuple[Pool, list[Desktop]]]]
