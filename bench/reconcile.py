"""Pool reconciliation benchmark: one reconcile cycle over 100 to 1,000 pools of 20 desktops.

For each size the benchmark makes a fresh database and a fresh simulated cluster, and seeds
them directly (no provisioning): N converged Linux pools of 20 ready desktops each, every
desktop's VM running on the simulator and tagged for it. It then runs the worker's real
reconciliation task body (:func:`deskpool.jobs.pool_reconcile.reconcile_batch` with
:class:`deskpool.pools.reconciler.PoolReconcilerService`) with a batch size of N, so one cycle
reconciles every pool: load the desktops, list the cluster's VMs once, plan every pool, and
record each pool's pass. Each cycle is timed; the median of ``--cycles`` is reported, with
pools per second and how the cycle time grows from one size to the next (1.0 per doubling
means linear).

``--drift`` removes that fraction of the VMs from the simulator before each cycle, so the
cycle also applies actions (each vanished VM: a guarded state change, a provisioning job and
an audit event, in one transaction).

The peer, measured in the same run on the same seeded data, is the straightforward design
this reconciler avoids: reconciling pool by pool, listing the cluster's VMs for each pool
(``--peer-max`` bounds the sizes it runs at, since it grows with pools times VMs). The ratio
is the peer's cycle time divided by deskpool's.

Run it from the repository root with PostgreSQL and Redis running (``make services``)::

    .venv/bin/python bench/reconcile.py
    .venv/bin/python bench/reconcile.py --sizes 100 1000 --drift 0.01
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import secrets
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg

from deskpool.clusters.shared_state import RedisSharedState
from deskpool.db import migrate
from deskpool.drivers import OsType, OwnershipTags
from deskpool.host import bootstrap
from deskpool.jobs.periodic import PeriodicContext
from deskpool.jobs.pool_reconcile import POOL_RECONCILE_TASK, reconcile_batch
from deskpool.pools.planner import ReconcilePolicy
from deskpool.pools.reconciler import PoolReconcilerService
from deskpool.runtime import Runtime
from deskpool.testing.services import (
    ServiceAddresses,
    create_test_database,
    drop_test_database,
)
from deskpool_driver_simulator.cluster import SimulatedCluster, SimulatedVm

DESKTOPS_PER_POOL = 20
TEMPLATE_ID = "9000"
STATE_KEY = "cluster"


class PoolByPoolReconciler(PoolReconcilerService):
    """The peer: each pool planned alone, so the cluster is listed once per pool."""

    async def reconcile_pool(self, pool_id: str, context: PeriodicContext) -> None:
        pool = next(pool for pool in self._batch if str(pool.id) == pool_id)
        planned = (await self.plan([pool]))[pool.id]

        async def fence(connection: asyncpg.Connection) -> None:
            return None

        await self.apply(planned, fence)


@dataclass
class Seeded:
    """A seeded database and cluster."""

    url: str
    runtime: Runtime
    cluster_id: uuid.UUID
    document: SimulatedCluster


async def seed(admin_url: str, kv_addr: str, pools: int) -> Seeded:
    """A fresh database and simulated cluster with ``pools`` converged pools."""
    url = await create_test_database(admin_url, prefix="deskpool_bench_reconcile")
    connection = await asyncpg.connect(url)
    try:
        await migrate(connection)
        cluster_id = uuid.uuid4()
        await connection.execute(
            "INSERT INTO clusters (id, name, driver, endpoint) VALUES ($1, 'bench', 'simulator', "
            "'simulator://bench')",
            cluster_id,
        )
        pool_ids = [uuid.uuid4() for _ in range(pools)]
        await connection.execute(
            """
            INSERT INTO pools (id, name, cluster_id, template, kind, os_type, min_size,
                               max_size, spare, naming_pattern)
            SELECT id, 'pool-' || n, $2, $3, 'non_persistent', 'linux', $4, $4, 0,
                   'p' || n || '-{n:02}'
              FROM unnest($1::uuid[]) WITH ORDINALITY AS p (id, n)
            """,
            pool_ids,
            cluster_id,
            TEMPLATE_ID,
            DESKTOPS_PER_POOL,
        )
        rows = await connection.fetch(
            """
            INSERT INTO desktops (pool_id, cluster_id, name, state, vm_id, template, node)
            SELECT p.id, $2, 'p' || p.n || '-' || lpad(d::text, 2, '0'), 'ready',
                   (100 + (p.n - 1) * $4 + d - 1)::text, $3, 'sim-node-1'
              FROM unnest($1::uuid[]) WITH ORDINALITY AS p (id, n),
                   generate_series(1, $4) AS d
            RETURNING id, name, vm_id
            """,
            pool_ids,
            cluster_id,
            TEMPLATE_ID,
            DESKTOPS_PER_POOL,
        )
        await connection.execute("ANALYZE")
    finally:
        await connection.close()

    tags = OwnershipTags()
    now = time.time()
    document = SimulatedCluster(next_id=100 + len(rows))
    for row in rows:
        document.vms[row["vm_id"]] = SimulatedVm(
            id=row["vm_id"],
            name=row["name"],
            node="sim-node-1",
            template_id=TEMPLATE_ID,
            os_type=OsType.LINUX,
            tags=tuple(sorted(tags.tags_for(str(row["id"])))),
            description="",
            clone_done_at=now - 600,
            powered_on_at=now - 600,
        )
    environ = {
        "DATABASE_URL": url,
        "KVSTORE_ADDR": kv_addr,
        "KVSTORE_KEY_PREFIX": f"deskpool-bench-{secrets.token_hex(4)}:",
        "METRICS_ADDR": "",
        "LOG_LEVEL": "warn",
        "POOL_RECONCILE_BATCH_SIZE": str(pools),
    }
    process = bootstrap(environ, ["worker"], log_setup=False)
    runtime = Runtime(process.config, process.plugins)
    await runtime.open()
    return Seeded(url, runtime, cluster_id, document)


async def store_cluster(seeded: Seeded, drift: float) -> int:
    """Store the simulated cluster, ``drift`` of its VMs removed; return how many were."""
    document = seeded.document
    removed = 0
    if drift > 0:
        step = max(1, round(1 / drift))
        vms = {vm_id: vm for index, (vm_id, vm) in enumerate(document.vms.items()) if index % step}
        removed = len(document.vms) - len(vms)
        document = SimulatedCluster(next_id=document.next_id, vms=vms)
    state = RedisSharedState(
        seeded.runtime.kv, seeded.runtime.drivers.shared_state_prefix(seeded.cluster_id)
    )
    await state.set(STATE_KEY, document.to_bytes())
    return removed


async def reset(seeded: Seeded) -> None:
    """Put every desktop back to ready with its VM, and forget jobs, audit events and passes."""
    async with seeded.runtime.db.acquire() as connection:
        await connection.execute(
            """
            UPDATE desktops SET state = 'ready', vm_id = (100 + ordinal - 1)::text
              FROM (SELECT id, row_number() OVER (ORDER BY pool_n, name) AS ordinal
                      FROM (SELECT d.id, d.name, substring(p.name FROM 6)::int AS pool_n
                              FROM desktops d JOIN pools p ON p.id = d.pool_id) AS named
                   ) AS numbered
             WHERE desktops.id = numbered.id AND desktops.state <> 'ready'
            """
        )
        await connection.execute(
            "TRUNCATE jobs, audit_events, periodic_tasks; UPDATE pools SET reconciled_at = NULL"
        )


async def cycle(seeded: Seeded, reconciler: PoolReconcilerService) -> tuple[float, int, int]:
    """One reconcile cycle over every pool: seconds, pools reconciled, actions applied."""
    runtime = seeded.runtime
    async with runtime.db.acquire() as connection:
        fence = await connection.fetchval(
            """
            INSERT INTO periodic_tasks (name, fence, lease_expires_at, last_started_at)
            VALUES ($1, 1, now() + interval '10 minutes', now())
            RETURNING fence
            """,
            POOL_RECONCILE_TASK,
        )
    context = PeriodicContext(
        POOL_RECONCILE_TASK,
        runtime,
        fence=fence,
        started_at=datetime.now(UTC),
        interval=timedelta(seconds=30),
        lease_duration=timedelta(minutes=10),
    )
    started = time.perf_counter()
    batch = await reconcile_batch(reconciler, context)
    seconds = time.perf_counter() - started
    if batch.failed:
        raise RuntimeError(f"{len(batch.failed)} pool(s) failed to reconcile")
    async with runtime.db.acquire() as connection:
        actions = await connection.fetchval("SELECT count(*) FROM audit_events")
    return seconds, len(batch.reconciled), int(actions)


@dataclass
class Measurement:
    """The cycles of one size."""

    pools: int
    seconds: float
    actions: int
    peer_seconds: float | None


async def measure(
    admin_url: str, kv_addr: str, pools: int, cycles: int, drift: float, peer: bool
) -> Measurement:
    """Seed ``pools`` pools, then time ``cycles`` cycles of deskpool (and of the peer)."""
    seeded = await seed(admin_url, kv_addr, pools)
    try:
        policy = ReconcilePolicy()
        times: list[float] = []
        actions = 0
        for _ in range(cycles):
            await reset(seeded)
            await store_cluster(seeded, drift)
            seconds, reconciled, actions = await cycle(
                seeded, PoolReconcilerService(seeded.runtime, policy)
            )
            assert reconciled == pools, (reconciled, pools)
            times.append(seconds)
        peer_seconds = None
        if peer:
            await reset(seeded)
            await store_cluster(seeded, drift)
            peer_seconds, _, _ = await cycle(seeded, PoolByPoolReconciler(seeded.runtime, policy))
        return Measurement(pools, statistics.median(times), actions, peer_seconds)
    finally:
        await seeded.runtime.close()
        await drop_test_database(admin_url, seeded.url)


def report(measurements: Sequence[Measurement], drift: float) -> str:
    """The results as a table."""
    lines = [
        f"One reconcile cycle, {DESKTOPS_PER_POOL} desktops per pool, one simulated cluster, "
        f"drift {drift:.1%} (median cycle)",
        "",
        "| pools | desktops | actions | cycle (s) | pools/s | ms/pool | growth | "
        "pool-by-pool peer (s) | peer / deskpool |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    previous: Measurement | None = None
    for m in measurements:
        growth = "-"
        if previous is not None:
            # time ratio over size ratio: 1.0 is linear, below is better than linear
            growth = f"{(m.seconds / previous.seconds) / (m.pools / previous.pools):.2f}"
        peer = "-" if m.peer_seconds is None else f"{m.peer_seconds:.2f}"
        ratio = "-" if m.peer_seconds is None else f"{m.peer_seconds / m.seconds:.1f}x"
        lines.append(
            f"| {m.pools} | {m.pools * DESKTOPS_PER_POOL} | {m.actions} | {m.seconds:.2f} | "
            f"{m.pools / m.seconds:.0f} | {1000 * m.seconds / m.pools:.2f} | {growth} | "
            f"{peer} | {ratio} |"
        )
        previous = m
    lines.append("")
    lines.append(
        "growth: (cycle time ratio) / (pool count ratio) from the previous row; 1.00 = linear"
    )
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> None:
    """Measure every size, one after the other, and print the table."""
    servers = ServiceAddresses.from_environ()
    measurements = []
    for pools in args.sizes:
        measurement = await measure(
            servers.admin_url,
            servers.kv_addr,
            pools,
            args.cycles,
            args.drift,
            peer=pools <= args.peer_max,
        )
        print(
            f"{pools} pools: {measurement.seconds:.2f}s per cycle"
            + (
                f" (pool-by-pool peer {measurement.peer_seconds:.2f}s)"
                if measurement.peer_seconds is not None
                else ""
            ),
            flush=True,
        )
        measurements.append(measurement)
    print()
    print(report(measurements, args.drift))


def main() -> None:
    """Parse the arguments and run."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 200, 500, 1000])
    parser.add_argument("--cycles", type=int, default=3, help="cycles per size (median)")
    parser.add_argument(
        "--drift", type=float, default=0.0, help="fraction of VMs removed before each cycle"
    )
    parser.add_argument(
        "--peer-max", type=int, default=200, help="largest size the peer is measured at"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
