"""The desktop jobs against the simulator: provisioning step by step, resuming, failing, power.

Each test enqueues a job the way reconciliation or the API does (:func:`enqueue_desktop_job`),
claims it and runs its registered handler, then looks at the desktop's record and at the
simulated cluster.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from tests.support.provisioning import (
    WINDOWS_TEMPLATE,
    MakeCluster,
    MakePool,
    RunJob,
    Simulator,
    SimulatorFor,
    add_desktop,
    claim,
    job_context,
)

from deskpool.desktops import store as store_desktops
from deskpool.desktops.jobs import (
    DELETE,
    POWER_OFF,
    POWER_ON,
    PROVISION,
    REBUILD,
    enqueue_desktop_job,
    idempotency_key,
)
from deskpool.desktops.states import Delete, Retry
from deskpool.drivers import PowerState
from deskpool.jobs.model import Job, LeaseLost
from deskpool.pools.model import Desktop, DesktopState, OsType, Pool
from deskpool.provisioning.handlers import provision_desktop
from deskpool.runtime import Runtime
from deskpool.testing.processes import until

S = DesktopState


async def desktop_of(db: asyncpg.Connection, desktop_id: uuid.UUID) -> Desktop:
    found = await store_desktops.get_desktop(db, desktop_id)
    assert found is not None
    return found


async def queued(
    db: asyncpg.Connection, pool: Pool, silent_agent: Simulator | None = None
) -> tuple[Desktop, Job]:
    """A new desktop of ``pool`` and its queued provisioning job.

    :param silent_agent: the simulator on which the desktop's guest agent never answers.
    """
    desktop = await add_desktop(db, pool)
    if silent_agent is not None:
        await silent_agent.driver.admin.inject(agent_never_answers=desktop.name)
    return desktop, await enqueue_desktop_job(db, PROVISION, desktop)


async def failed_at(
    db: asyncpg.Connection, run_job: RunJob, job: Job, desktop: Desktop, step: DesktopState
) -> Desktop:
    """Run ``job`` and return its desktop, which must have failed at ``step``."""
    await run_job(job.id)
    failed = await desktop_of(db, desktop.id)
    assert failed.state is S.FAILED
    assert failed.failed_step is step
    return failed


async def provisioned(db: asyncpg.Connection, run_job: RunJob, pool: Pool) -> Desktop:
    """A desktop of ``pool`` taken through the provisioning job."""
    desktop, job = await queued(db, pool)
    await run_job(job.id)
    return await desktop_of(db, desktop.id)


async def test_a_linux_desktop_is_cloned_started_and_ready_once_its_agent_answers(
    db: asyncpg.Connection, make_pool: MakePool, run_job: RunJob, simulator: Simulator
) -> None:
    pool = await make_pool(target_nodes=("sim-node-2",))
    desktop = await provisioned(db, run_job, pool)

    assert desktop.state is S.READY
    assert desktop.template == pool.template
    assert await simulator.vms_of(desktop.id) == [desktop.vm_id]
    assert desktop.vm_id is not None
    vm = await simulator.driver.get_vm(desktop.vm_id)
    assert vm.name == desktop.name
    assert vm.node == "sim-node-2"
    assert vm.power_state is PowerState.RUNNING
    record = await store_desktops.get_desktop_record(db, desktop.id)
    assert record is not None
    assert record.node == "sim-node-2"


async def test_a_windows_desktop_waits_for_sysprep_before_it_is_ready(
    db: asyncpg.Connection, make_pool: MakePool, run_job: RunJob, simulator: Simulator
) -> None:
    pool = await make_pool(os_type=OsType.WINDOWS, template=WINDOWS_TEMPLATE)
    desktop = await provisioned(db, run_job, pool)
    assert desktop.state is S.READY
    assert desktop.vm_id is not None
    assert await simulator.driver.windows_ready(desktop.vm_id)


async def test_a_silent_guest_agent_fails_the_step_after_its_timeout(
    db: asyncpg.Connection, make_pool: MakePool, run_job: RunJob, simulator: Simulator
) -> None:
    pool = await make_pool()
    desktop, job = await queued(db, pool, silent_agent=simulator)
    failed = await failed_at(db, run_job, job, desktop, S.WAITING_FOR_AGENT)
    assert failed.last_error == "the guest agent did not answer within 300ms"
    assert failed.vm_id is not None
    audit = await db.fetchrow(
        "SELECT * FROM audit_events WHERE action = 'desktop.fail' AND resource_id = $1",
        str(desktop.id),
    )
    assert audit is not None
    assert audit["actor"] == "system:worker"
    assert audit["outcome"] == "failure"


async def test_windows_stuck_in_oobe_fails_the_windows_step(
    db: asyncpg.Connection, make_pool: MakePool, run_job: RunJob, simulator: Simulator
) -> None:
    pool = await make_pool(os_type=OsType.WINDOWS, template=WINDOWS_TEMPLATE)
    desktop = await add_desktop(db, pool)
    await simulator.driver.admin.inject(oobe_never_finishes=desktop.name)
    job = await enqueue_desktop_job(db, PROVISION, desktop)
    failed = await failed_at(db, run_job, job, desktop, S.WAITING_FOR_WINDOWS)
    assert failed.last_error == "Windows did not finish Sysprep/OOBE within 300ms"


async def test_a_rerun_after_a_crash_mid_clone_adopts_the_clone_instead_of_making_another(
    db: asyncpg.Connection,
    make_cluster: MakeCluster,
    make_pool: MakePool,
    runtime: Runtime,
    run_job: RunJob,
    simulator_for: SimulatorFor,
) -> None:
    slow = await make_cluster(clone_seconds=0.5)
    simulator = await simulator_for(slow)
    pool = await make_pool(cluster_id=slow.id)
    desktop, job = await queued(db, pool)

    # The first attempt dies while its clone is copying: its task is cancelled the moment the
    # tagged VM exists, as a SIGKILL would leave it (the simulator finishes the copy itself).
    claimed = await claim(db, job.id)
    attempt = asyncio.create_task(provision_desktop(job_context(runtime, claimed)))
    await until(lambda: simulator.vms_of(desktop.id), "the first attempt's clone exists")
    attempt.cancel()
    await asyncio.gather(attempt, return_exceptions=True)
    [first_clone] = await simulator.vms_of(desktop.id)
    assert (await desktop_of(db, desktop.id)).state is S.PROVISIONING

    await db.execute("UPDATE jobs SET state = 'queued' WHERE id = $1", job.id)  # reclaimed
    await run_job(job.id)

    ready = await desktop_of(db, desktop.id)
    assert ready.state is S.READY
    assert ready.vm_id == first_clone
    assert await simulator.vms_of(desktop.id) == [first_clone]


async def test_a_retried_desktop_gets_a_new_vm_and_the_failed_one_is_destroyed(
    db: asyncpg.Connection, make_pool: MakePool, run_job: RunJob, simulator: Simulator
) -> None:
    pool = await make_pool()
    desktop, job = await queued(db, pool, silent_agent=simulator)
    failed = await failed_at(db, run_job, job, desktop, S.WAITING_FOR_AGENT)
    await simulator.driver.admin.clear_faults()

    retried = await store_desktops.apply_event(db, desktop.id, Retry(), datetime.now(UTC))
    assert retried.state is S.PROVISIONING
    assert retried.vm_id == failed.vm_id
    job = await enqueue_desktop_job(db, PROVISION, retried)
    assert job.idempotency_key == idempotency_key(PROVISION, retried)
    assert job.idempotency_key != idempotency_key(PROVISION, desktop)
    await run_job(job.id)

    ready = await desktop_of(db, desktop.id)
    assert ready.state is S.READY
    assert ready.vm_id not in (None, failed.vm_id)
    assert await simulator.vms_of(desktop.id) == [ready.vm_id]


async def test_enqueueing_twice_for_one_entry_into_a_state_gives_one_job(
    db: asyncpg.Connection, make_pool: MakePool
) -> None:
    pool = await make_pool()
    desktop = await add_desktop(db, pool)
    first = await enqueue_desktop_job(db, PROVISION, desktop)
    again = await enqueue_desktop_job(db, PROVISION, await desktop_of(db, desktop.id))
    assert again.id == first.id
    assert first.resource_type == "desktops"
    assert first.resource_id == str(desktop.id)
    assert first.payload == {"desktop_id": str(desktop.id)}
    power = await enqueue_desktop_job(db, POWER_ON, desktop)
    assert (await enqueue_desktop_job(db, POWER_ON, desktop)).id == power.id
    assert power.priority > first.priority


async def test_rebuild_replaces_the_vm_under_the_same_name(
    db: asyncpg.Connection, make_pool: MakePool, run_job: RunJob, simulator: Simulator
) -> None:
    pool = await make_pool()
    desktop = await provisioned(db, run_job, pool)
    await run_job((await enqueue_desktop_job(db, REBUILD, desktop)).id)

    rebuilt = await desktop_of(db, desktop.id)
    assert rebuilt.state is S.READY
    assert rebuilt.name == desktop.name
    assert rebuilt.vm_id not in (None, desktop.vm_id)
    assert await simulator.vms_of(desktop.id) == [rebuilt.vm_id]


async def test_delete_destroys_the_vm_then_the_record(
    db: asyncpg.Connection, make_pool: MakePool, run_job: RunJob, simulator: Simulator
) -> None:
    pool = await make_pool()
    desktop = await provisioned(db, run_job, pool)
    await run_job((await enqueue_desktop_job(db, DELETE, desktop)).id)

    assert await store_desktops.get_desktop(db, desktop.id) is None
    assert await simulator.vms_of(desktop.id) == []
    assert await db.fetchval(
        "SELECT count(*) FROM audit_events WHERE action = 'desktop.delete' AND resource_id = $1",
        str(desktop.id),
    )


async def test_power_off_and_on(
    db: asyncpg.Connection, make_pool: MakePool, run_job: RunJob, simulator: Simulator
) -> None:
    pool = await make_pool()
    desktop = await provisioned(db, run_job, pool)
    assert desktop.vm_id is not None
    await run_job((await enqueue_desktop_job(db, POWER_OFF, desktop)).id)
    assert await simulator.driver.power_state(desktop.vm_id) is PowerState.STOPPED
    # The desktop's state follows its VM.
    powered_off = await desktop_of(db, desktop.id)
    assert powered_off.state is S.POWERED_OFF
    await run_job((await enqueue_desktop_job(db, POWER_ON, powered_off)).id)
    assert await simulator.driver.power_state(desktop.vm_id) is PowerState.RUNNING
    assert (await desktop_of(db, desktop.id)).state is S.READY


async def test_a_desktop_deleted_during_a_wait_is_left_to_its_deletion(
    db: asyncpg.Connection,
    make_pool: MakePool,
    runtime: Runtime,
    simulator: Simulator,
) -> None:
    pool = await make_pool()
    desktop, job = await queued(db, pool, silent_agent=simulator)
    context = job_context(runtime, await claim(db, job.id))
    attempt = asyncio.create_task(provision_desktop(context))

    async def waiting() -> bool:
        return (await desktop_of(db, desktop.id)).state is S.WAITING_FOR_AGENT

    await until(waiting, "the job waits for the agent")
    await store_desktops.apply_event(db, desktop.id, Delete(), datetime.now(UTC))
    await attempt

    assert (await desktop_of(db, desktop.id)).state is S.DELETING  # not failed by the job


async def test_a_missing_template_fails_the_desktop_at_provisioning(
    db: asyncpg.Connection, make_pool: MakePool, run_job: RunJob, simulator: Simulator
) -> None:
    pool = await make_pool(template="no-such-template")
    desktop, job = await queued(db, pool)
    failed = await failed_at(db, run_job, job, desktop, S.PROVISIONING)
    assert "no-such-template" in (failed.last_error or "")
    assert await simulator.vms_of(desktop.id) == []


async def test_a_cluster_without_an_installed_driver_fails_the_desktop_on_the_last_attempt(
    db: asyncpg.Connection, make_cluster: MakeCluster, make_pool: MakePool, run_job: RunJob
) -> None:
    missing = await make_cluster("nosuchdriver")
    pool = await make_pool(cluster_id=missing.id)
    desktop, job = await queued(db, pool)
    await db.execute("UPDATE jobs SET max_attempts = 1 WHERE id = $1", job.id)
    failed = await failed_at(db, run_job, job, desktop, S.PROVISIONING)
    assert "nosuchdriver" in (failed.last_error or "")


async def test_an_attempt_whose_job_was_reclaimed_records_nothing(
    db: asyncpg.Connection, make_pool: MakePool, runtime: Runtime, simulator: Simulator
) -> None:
    pool = await make_pool()
    desktop, job = await queued(db, pool, silent_agent=simulator)
    lease = timedelta(milliseconds=150)
    attempt = asyncio.create_task(
        provision_desktop(job_context(runtime, await claim(db, job.id), lease))
    )

    async def waiting() -> bool:
        return (await desktop_of(db, desktop.id)).state is S.WAITING_FOR_AGENT

    await until(waiting, "the job waits for the agent")
    await db.execute("UPDATE jobs SET fence = fence + 1 WHERE id = $1", job.id)  # reclaimed
    with pytest.raises(LeaseLost):
        await attempt

    assert (await desktop_of(db, desktop.id)).state is S.WAITING_FOR_AGENT
