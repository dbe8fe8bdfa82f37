"""Fixtures of the worker side of pools: a worker runtime, simulator clusters, pools, jobs.

The tests run on a database of this directory's modules' own (pools, jobs and the periodic
task table are emptied before each test), so a reconciliation pass sees only the test's pools.
Each test's cluster is a fresh simulator cluster (its state lives in Redis under the test's
key prefix), with phases of a few milliseconds.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import asyncpg
import pytest
from tests.support.pools import (
    pool_model,
)
from tests.support.provisioning import (
    FAST,
    LINUX_TEMPLATE,
    POLICY,
    ConvergedPool,
    MakeCluster,
    MakePool,
    RunJob,
    Simulator,
    SimulatorFor,
    claim,
    desktops,
    job_context,
    no_fence,
    provision_all,
)

from deskpool.clusters.repository import ClusterRecord, ConnectionSettings, get_cluster
from deskpool.clusters.repository import insert_cluster as insert_cluster_record
from deskpool.jobs import queue
from deskpool.jobs.context import JobContext
from deskpool.pools import store as store_pools
from deskpool.pools.model import Desktop, Pool
from deskpool.reconciliation.reconciler import PoolReconcilerService
from deskpool.runtime import Runtime
from deskpool.testing.pytest_plugin import fresh_database, opened_runtime
from deskpool.testing.services import (
    ServiceAddresses,
)
from deskpool_driver_simulator import SimulatorDriver


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


@pytest.fixture
def make_pool(db: asyncpg.Connection, cluster: ClusterRecord) -> MakePool:
    """``await make_pool(**fields)``: a stored pool on ``cluster`` (Linux, 0 to 10 desktops)."""

    async def make(**overrides: Any) -> Pool:
        fields = {"template": LINUX_TEMPLATE, "max_size": 10, **overrides}
        cluster_id = fields.pop("cluster_id", cluster.id)
        record = await store_pools.create_pool(db, pool_model(cluster_id, **fields))
        return record.pool

    return make


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


# ------------------------------------------------------------------------------ reconciliation


@pytest.fixture
def reconciler(runtime: Runtime) -> PoolReconcilerService:
    """The reconciliation service of ``runtime``, with :data:`POLICY`."""
    return PoolReconcilerService(runtime, POLICY)


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
