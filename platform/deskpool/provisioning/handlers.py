"""The handlers of the desktop jobs, as the worker registers and runs them.

Each handler reads its payload, opens the desktop's work (:func:`desktop_work`: the desktop,
its pool, the cluster's driver) and runs the steps of :mod:`deskpool.provisioning.steps`;
:func:`desktop_job_kinds` gives them to ``deskpool_register_job_kinds`` with their time limits.
The kinds and how they are enqueued are :mod:`deskpool.desktops.jobs`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from typing import Any

import asyncpg

from deskpool.clusters.repository import get_cluster
from deskpool.desktops.jobs import (
    DELETE,
    DELETE_ORPHAN_VM,
    POWER_OFF,
    POWER_ON,
    PROVISION,
    REBUILD,
    RESTART,
)
from deskpool.desktops.states import Refresh, Retry
from deskpool.desktops.store import get_desktop
from deskpool.drivers import NotOwned, VirtualMachine, VmNotFound
from deskpool.errors import DeskpoolError
from deskpool.jobs.context import JobContext
from deskpool.jobs.model import JobKind, PermanentJobFailure
from deskpool.pools.model import DesktopState
from deskpool.pools.store import get_pool
from deskpool.provisioning.recorder import DesktopRecorder, describe_failure, retryable
from deskpool.provisioning.steps import DesktopWork
from deskpool.provisioning.store import desktop_exists, vm_is_recorded
from deskpool.reconciliation.store_orphans import forget_orphans

log = logging.getLogger(__name__)

S = DesktopState

#: How long one attempt of a provisioning or rebuild job may run (a timed-out attempt is
#: retried and resumes at the step it reached; waits are bounded by their own timeouts).
PROVISION_JOB_TIMEOUT = timedelta(hours=4)
#: How long one attempt of the other desktop jobs may run.
SHORT_JOB_TIMEOUT = timedelta(minutes=30)


def desktop_job_kinds() -> dict[str, JobKind]:
    """The desktop job kinds with their time limits, for ``deskpool_register_job_kinds``."""
    return {
        PROVISION: JobKind(provision_desktop, timeout=PROVISION_JOB_TIMEOUT),
        REBUILD: JobKind(rebuild_desktop, timeout=PROVISION_JOB_TIMEOUT),
        DELETE: JobKind(delete_desktop, timeout=SHORT_JOB_TIMEOUT),
        POWER_ON: JobKind(power_on_desktop, timeout=SHORT_JOB_TIMEOUT),
        POWER_OFF: JobKind(power_off_desktop, timeout=SHORT_JOB_TIMEOUT),
        RESTART: JobKind(restart_desktop, timeout=SHORT_JOB_TIMEOUT),
        DELETE_ORPHAN_VM: JobKind(delete_orphan_vm, timeout=SHORT_JOB_TIMEOUT),
    }


def _desktop_id(payload: Mapping[str, Any]) -> uuid.UUID:
    try:
        return uuid.UUID(str(payload["desktop_id"]))
    except (KeyError, ValueError) as error:
        raise PermanentJobFailure(f"the payload names no desktop ({error})") from None


@asynccontextmanager
async def desktop_work(
    context: JobContext, *, fail_desktop: bool = True
) -> AsyncIterator[DesktopWork | None]:
    """The work of ``context``'s job on its desktop, with the cluster's driver open.

    Yields ``None`` when there is nothing to do: the desktop or its pool is gone (deleted
    meanwhile), or the driver cannot be opened for good and the desktop was failed.

    :param fail_desktop: when the driver cannot be opened (no such driver installed, stored
        settings refused) on the job's last attempt, or for good, fail the desktop rather
        than only the job.
    """
    runtime = context.runtime
    desktop = await get_desktop(runtime.db, _desktop_id(context.payload))
    pool = None if desktop is None else await get_pool(runtime.db, desktop.pool_id)
    cluster = None if pool is None else await get_cluster(runtime.db, pool.cluster_id)
    if desktop is None or pool is None or cluster is None:
        yield None
        return
    async with AsyncExitStack() as stack:
        try:
            driver = await stack.enter_async_context(runtime.drivers.open(cluster))
        except DeskpoolError as error:
            recorder = DesktopRecorder(context, desktop, pool)
            if not fail_desktop or (retryable(error) and not recorder.last_attempt):
                raise
            await recorder.fail(describe_failure(error))
            driver = None
        yield None if driver is None else DesktopWork(context, desktop, pool, cluster, driver)


async def provision_desktop(context: JobContext) -> None:
    """``desktop.provision``: carry the desktop from where it is to ``ready``."""
    async with desktop_work(context) as work:
        if work is not None:
            await work.advance()


async def rebuild_desktop(context: JobContext) -> None:
    """``desktop.rebuild``: replace the VM by a fresh clone under the same name.

    A ready or powered-off desktop is moved to ``refreshing`` first, a failed one retried; a
    desktop in use is left alone (the API refuses to rebuild it).
    """
    async with desktop_work(context) as work:
        if work is None:
            return
        state = work.desktop.state
        if state in (S.READY, S.POWERED_OFF):
            if await work.record(Refresh()) is None:
                return
        elif state is S.FAILED:
            if work.desktop.failed_step is S.DELETING:
                log.info("desktop %s failed while being deleted; not rebuilt", work.desktop.name)
                return
            if await work.record(Retry()) is None:
                return
        elif state is S.IN_USE:
            log.info("desktop %s is in use; not rebuilt", work.desktop.name)
            return
        await work.advance()


async def delete_desktop(context: JobContext) -> None:
    """``desktop.delete``: delete the desktop's VMs, then its record."""
    async with desktop_work(context) as work:
        if work is not None:
            await work.delete()


async def power_on_desktop(context: JobContext) -> None:
    """``desktop.power_on``: power the desktop's VM on."""
    async with desktop_work(context, fail_desktop=False) as work:
        if work is not None:
            await work.power(POWER_ON)


async def power_off_desktop(context: JobContext) -> None:
    """``desktop.power_off``: shut the guest down, powering it off if it does not comply."""
    async with desktop_work(context, fail_desktop=False) as work:
        if work is not None:
            await work.power(POWER_OFF)


async def restart_desktop(context: JobContext) -> None:
    """``desktop.restart``: shut the guest down, then power it on again."""
    async with desktop_work(context, fail_desktop=False) as work:
        if work is not None:
            await work.power(RESTART)


async def delete_orphan_vm(context: JobContext) -> None:
    """``vm.delete_orphan``: delete a deskpool VM that no desktop records.

    The VM is re-read and deleted only if it still carries deskpool's tag, its desktop tag
    names no existing desktop whose job may own it, and no desktop records it.
    """
    runtime = context.runtime
    try:
        cluster_id = uuid.UUID(str(context.payload["cluster_id"]))
        vm_id = str(context.payload["vm_id"])
    except (KeyError, ValueError) as error:
        raise PermanentJobFailure(f"the payload names no cluster VM ({error})") from None
    cluster = await get_cluster(runtime.db, cluster_id)
    if cluster is None:
        return
    async with runtime.drivers.open(cluster) as driver:
        try:
            vm = await driver.get_vm(vm_id)
        except VmNotFound:
            vm = None
        if vm is not None:
            async with runtime.db.acquire() as connection:
                if await vm_is_recorded(connection, cluster_id, vm_id):
                    log.info("VM %s is a desktop's again; not deleted", vm_id)
                    return
                if await _desktop_may_own(connection, vm):
                    log.info("VM %s is tagged for an existing desktop; not deleted", vm_id)
                    return
            try:
                await driver.delete(vm_id, desktop_id=vm.desktop_id)
            except VmNotFound:
                pass
            except NotOwned as error:
                raise PermanentJobFailure(describe_failure(error)) from error
    async with runtime.db.acquire() as connection, connection.transaction():
        await context.hold_lease(connection)
        await forget_orphans(connection, cluster_id, [vm_id])


async def _desktop_may_own(connection: asyncpg.Connection, vm: VirtualMachine) -> bool:
    """Whether the VM's desktop tag names a desktop that exists (its job may own the VM)."""
    if vm.desktop_id is None:
        return False
    try:
        desktop_id = uuid.UUID(str(vm.desktop_id))
    except ValueError:
        return False
    return await desktop_exists(connection, desktop_id)
