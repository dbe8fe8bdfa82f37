"""Fixtures of the worker side of pools: a worker runtime, simulator clusters, pools, jobs.

The tests run on a database of this directory's modules' own (pools, jobs and the periodic
task table are emptied before each test), so a reconciliation pass sees only the test's pools.
Each test's cluster is a fresh simulator cluster (its state lives in Redis under the test's
key prefix), with phases of a few milliseconds.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

import asyncpg
import pytest
from tests.integration.pools.conftest import pool_model

from deskpool.clusters.repository import ClusterRecord, ConnectionSettings, get_cluster
from deskpool.clusters.repository import insert_cluster as insert_cluster_record
from deskpool.desktops import store as store_desktops
from deskpool.desktops.jobs import PROVISION
from deskpool.jobs import queue
from deskpool.jobs.context import JobContext
from deskpool.jobs.model import ClaimedJob, LeaseLost
from deskpool.pools import store as store_pools
from deskpool.pools.model import Desktop, Pool
from deskpool.reconciliation import store as store_reconcile
from deskpool.reconciliation.plan import ReconcilePolicy
from deskpool.reconciliation.reconciler import PoolReconcilerService
from deskpool.runtime import Runtime
from deskpool.testing.pytest_plugin import fresh_database, opened_runtime
from deskpool.testing.services import (
    ServiceAddresses,
)
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


@pytest.fixture(scope="package")
def provisioning_database(test_servers: ServiceAddresses) -> Iterator[str]:
    """A migrated database of these tests' own, dropped at the end."""
    with fresh_database(test_servers, prefix="deskpool_provisioning") as url:
        yield url


@pytest.fixture
def db_url(provisioning_database: str) -> str:
    """``db`` connects to the provisioning tests' database."""
    return provisioning_database


@pytest.fixture
def db_emptied() -> tuple[str, ...]:
    """``db`` empties clusters (and so pools), jobs, periodic runs and reported orphans."""
    return ("clusters", "jobs", "periodic_tasks", "pool_orphans")


@pytest.fixture
def worker_environ(deskpool_environ: dict[str, str], provisioning_database: str) -> dict[str, str]:
    """The environment of a worker process of these tests (short wait timeouts)."""
    return {
        **deskpool_environ,
        "DATABASE_URL": provisioning_database,
        "GUEST_AGENT_WAIT_TIMEOUT": "300ms",
        "WINDOWS_READY_WAIT_TIMEOUT": "300ms",
        "POOL_FAILURE_BACKOFF": "1s",
    }


@pytest.fixture
async def runtime(worker_environ: dict[str, str], db: asyncpg.Connection) -> AsyncIterator[Runtime]:
    """An opened runtime with the worker component's plugins."""
    async with opened_runtime(worker_environ, ("worker",)) as opened:
        yield opened


MakeCluster = Callable[..., Awaitable[ClusterRecord]]


@pytest.fixture
def make_cluster(db: asyncpg.Connection) -> MakeCluster:
    """``await make_cluster(driver="simulator", **options)``: a stored cluster record."""

    async def make(driver: str = "simulator", **options: Any) -> ClusterRecord:
        cluster_id = uuid.uuid4()
        await insert_cluster_record(
            db,
            cluster_id=cluster_id,
            name=f"cluster-{secrets.token_hex(4)}",
            driver=driver,
            settings=ConnectionSettings(endpoint="simulator://local", options={**FAST, **options}),
        )
        record = await get_cluster(db, cluster_id)
        assert record is not None
        return record

    return make


@pytest.fixture
async def cluster(make_cluster: MakeCluster) -> ClusterRecord:
    """A fast simulator cluster."""
    return await make_cluster()


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


@pytest.fixture
async def simulator_for(runtime: Runtime) -> AsyncIterator[SimulatorFor]:
    """``await simulator_for(cluster)``: the test's hands on a simulator cluster."""
    drivers: list[SimulatorDriver] = []

    async def make(record: ClusterRecord) -> Simulator:
        driver = cast(SimulatorDriver, await runtime.drivers.driver_for(record))
        drivers.append(driver)
        return Simulator(driver)

    yield make
    for driver in drivers:
        await driver.close()


@pytest.fixture
async def simulator(simulator_for: SimulatorFor, cluster: ClusterRecord) -> Simulator:
    """The test's hands on ``cluster``: list, delete behind deskpool's back, inject faults."""
    return await simulator_for(cluster)


MakePool = Callable[..., Awaitable[Pool]]


@pytest.fixture
def make_pool(db: asyncpg.Connection, cluster: ClusterRecord) -> MakePool:
    """``await make_pool(**fields)``: a stored pool on ``cluster`` (Linux, 0 to 10 desktops)."""

    async def make(**overrides: Any) -> Pool:
        fields = {"template": LINUX_TEMPLATE, "max_size": 10, **overrides}
        cluster_id = fields.pop("cluster_id", cluster.id)
        record = await store_pools.create_pool(db, pool_model(cluster_id, **fields))
        return record.pool

    return make


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


@pytest.fixture
def run_job(runtime: Runtime, db: asyncpg.Connection) -> RunJob:
    """``await run_job(job_id)``: claim the job and run its registered handler once."""

    async def run(job_id: int) -> JobContext:
        job = await claim(db, job_id)
        kinds = runtime.plugins.job_kinds()
        context = job_context(runtime, job)
        await kinds.get(job.kind).handler(context)
        async with runtime.db.acquire() as connection:
            await queue.complete(connection, [job.lease])
        return context

    return run


async def provision_all(db: asyncpg.Connection, run_job: RunJob) -> None:
    """Run every queued provisioning job."""
    for job_id in await db.fetch(
        "SELECT id FROM jobs WHERE kind = $1 AND state = 'queued' ORDER BY id", PROVISION
    ):
        await run_job(job_id["id"])


# ------------------------------------------------------------------------------ reconciliation

#: The reconciliation policy of these tests: a failed desktop may be retried at once.
POLICY = ReconcilePolicy(failure_backoff_base=timedelta(milliseconds=1))


async def no_fence(connection: asyncpg.Connection) -> None:
    """Effects of a test's direct call need no lease."""


@pytest.fixture
def reconciler(runtime: Runtime) -> PoolReconcilerService:
    """The reconciliation service of ``runtime``, with :data:`POLICY`."""
    return PoolReconcilerService(runtime, POLICY)


async def desktops(db: asyncpg.Connection, pool: Pool) -> list[Desktop]:
    """The desktops of ``pool``."""
    return (await store_reconcile.desktops_of_pools(db, [pool.id]))[pool.id]


ConvergedPool = Callable[..., Awaitable[tuple[Pool, list[Desktop]]]]


@pytest.fixture
def converged_pool(
    db: asyncpg.Connection, make_pool: MakePool, reconciler: PoolReconcilerService, run_job: RunJob
) -> ConvergedPool:
    """``pool, desktops = await converged_pool(**fields)``: a pool reconciled once.

    Every desktop the reconciliation made is provisioned (so ready, each with its VM).
    """

    async def make(**fields: Any) -> tuple[Pool, list[Desktop]]:
        pool = await make_pool(**fields)
        await reconciler.reconcile_now(pool.id, no_fence)
        await provision_all(db, run_job)
        return pool, await desktops(db, pool)

    return make
