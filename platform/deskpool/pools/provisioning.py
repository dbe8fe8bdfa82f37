"""The worker's desktop jobs: provisioning, power, rebuild and deletion, step by step.

Every slow operation on a desktop is a job of the worker (:mod:`deskpool.jobs`), with the
payload ``{"desktop_id": ...}``:

==========================  =================================================================
kind                        what it does
==========================  =================================================================
``desktop.provision``       clone -> start -> wait for the guest agent
                            (``GUEST_AGENT_WAIT_TIMEOUT``) -> wait for Windows Sysprep/OOBE
                            (``WINDOWS_READY_WAIT_TIMEOUT``, Windows pools only) -> ``ready``
``desktop.rebuild``         delete the VM and provision a new one under the same name
``desktop.delete``          delete the VM, then the desktop's record
``desktop.power_on``        power the VM on
``desktop.power_off``       shut the guest down (powered off if it does not comply)
``desktop.restart``         shut the guest down, then power it on again
``vm.delete_orphan``        delete a VM tagged by deskpool that belongs to no desktop
                            (payload ``{"cluster_id", "vm_id"}``)
==========================  =================================================================

The desktop's state (:mod:`deskpool.pools.states`) is the job's progress: a job reads the
desktop and carries it on from the step it is at, applying each step's event when the step is
done, fenced by the job's lease. So a job that runs again (its worker died, its attempt timed
out) resumes where the last attempt stopped:

- *Cloning is idempotent.* Every clone carries the desktop's id as a tag. Before cloning, the
  job lists the cluster's deskpool VMs: a VM tagged for the desktop other than the one its
  record names (a VM of a failed earlier attempt, destroyed first) was made by an interrupted
  attempt of this very job, and is adopted instead of cloning another.
- *Wait timeouts are measured from when the desktop entered the step*, not from when the
  attempt started, so a retried wait does not start its clock again. A wait that runs out
  fails the step (SPEC §7): the desktop goes to ``failed`` with ``failed_step`` and
  ``last_error``; reconciliation retries it after a backoff.
- *Failures.* A driver error that may go away (:class:`TransientDriverError`) fails the
  attempt, and the job is retried with backoff; on its last attempt, or for an error no retry
  fixes (the template does not exist, the clone failed), the desktop is marked ``failed`` and
  the job ends. Whatever happens, a step's outcome is written only if the desktop is still in
  that step: a desktop an administrator deleted meanwhile is left alone.

Enqueue with :func:`enqueue_desktop_job`: it keys provisioning, rebuild and deletion jobs by
the desktop and the moment it entered its current state (its *attempt generation*), so a
reconciliation pass that sees the same desktop twice never enqueues a second job for it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from deskpool.audit import record_audit_event
from deskpool.clusters.repository import ClusterRecord, get_cluster
from deskpool.config import Config, format_duration
from deskpool.drivers import (
    DriverError,
    HypervisorDriver,
    NotFound,
    NotOwned,
    Unsupported,
    VirtualMachine,
    VmNotFound,
    VmNotRunning,
    deadline_after,
)
from deskpool.errors import DeskpoolError, ServiceUnavailable
from deskpool.events import AuditEvent
from deskpool.jobs.context import JobContext
from deskpool.jobs.model import Job, JobKind, LeaseLost, PermanentJobFailure
from deskpool.jobs.queue import enqueue
from deskpool.live.publishers import publish_desktop
from deskpool.pools.model import CloneMode, Desktop, DesktopState, Pool
from deskpool.pools.provisioning_store import (
    apply_event_in_state,
    unfinished_job,
    vm_is_recorded,
)
from deskpool.pools.repository import (
    get_desktop,
    get_pool,
    remove_desktop,
    set_desktop_node,
)
from deskpool.pools.states import (
    WAIT_TIMEOUT_SETTINGS,
    AgentReady,
    Cloned,
    Delete,
    DesktopEvent,
    Failed,
    IllegalTransition,
    Refresh,
    Refreshed,
    Retry,
    Started,
    WindowsReady,
)
from deskpool.pools.store_orphans import forget_orphans

log = logging.getLogger(__name__)

S = DesktopState

# --------------------------------------------------------------------------- job kinds

PROVISION = "desktop.provision"
REBUILD = "desktop.rebuild"
DELETE = "desktop.delete"
POWER_ON = "desktop.power_on"
POWER_OFF = "desktop.power_off"
RESTART = "desktop.restart"
DELETE_ORPHAN_VM = "vm.delete_orphan"

#: Kinds keyed by the desktop's attempt generation (one job per entry into a state).
GENERATIONAL_KINDS = frozenset({PROVISION, REBUILD, DELETE})
#: Kinds that only act on the VM's power; one unfinished job per desktop is enough.
POWER_KINDS = frozenset({POWER_ON, POWER_OFF, RESTART})

#: The resource type of desktop jobs (the jobs API lists a desktop's jobs by it).
DESKTOPS = "desktops"
#: The resource type of cluster-level jobs (orphan VMs).
CLUSTERS = "clusters"
#: Who jobs act as in the audit trail.
WORKER_ACTOR = "system:worker"

#: Power jobs are what a waiting user asked for: they go before provisioning work.
POWER_PRIORITY = 10

#: How long one attempt of a provisioning or rebuild job may run (a timed-out attempt is
#: retried and resumes at the step it reached; waits are bounded by their own timeouts).
PROVISION_JOB_TIMEOUT = timedelta(hours=4)
#: How long one attempt of the other desktop jobs may run.
SHORT_JOB_TIMEOUT = timedelta(minutes=30)

#: Bounds of the pause between two polls of a guest (a twentieth of the wait's timeout).
MIN_POLL_INTERVAL = 0.05
MAX_POLL_INTERVAL = 2.0
#: Seconds between two looks at a VM whose clone is still running.
BUSY_POLL_INTERVAL = 0.5
#: How long a clone may take, at most, before the attempt gives up on it.
CLONE_TIMEOUT = 3600.0
#: How long a guest gets to shut down before it is powered off.
GUEST_SHUTDOWN_TIMEOUT = 60.0
#: The longest error text kept on a failed desktop.
ERROR_TEXT_LIMIT = 500

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: The job that carries a desktop on from each state.
_JOB_OF_STATE: Mapping[DesktopState, str] = {
    S.PROVISIONING: PROVISION,
    S.STARTING: PROVISION,
    S.WAITING_FOR_AGENT: PROVISION,
    S.WAITING_FOR_WINDOWS: PROVISION,
    S.REFRESHING: REBUILD,
    S.DELETING: DELETE,
}


def attempt_generation(desktop: Desktop) -> int:
    """When the desktop entered its current state, in microseconds: one per entry."""
    return (desktop.state_changed_at - _EPOCH) // timedelta(microseconds=1)


def job_for_state(desktop: Desktop) -> str | None:
    """The job kind that carries the desktop on from its state; ``None`` when none does."""
    return _JOB_OF_STATE.get(desktop.state)


def idempotency_key(kind: str, desktop: Desktop) -> str | None:
    """``desktop.provision:<id>:<attempt generation>`` for generational kinds, else ``None``."""
    if kind not in GENERATIONAL_KINDS:
        return None
    return f"{kind}:{desktop.id}:{attempt_generation(desktop)}"


async def enqueue_desktop_job(connection: asyncpg.Connection, kind: str, desktop: Desktop) -> Job:
    """Enqueue the ``kind`` job of ``desktop`` unless it is already there; return the job.

    Provisioning, rebuild and deletion jobs are keyed by the attempt generation, so enqueueing
    twice for the same entry into a state gives the same job. A power job is not enqueued
    while another of its kind is queued or running for the desktop. Call it in the
    transaction that changed the desktop, so the job exists exactly when the change does.
    """
    resource_id = str(desktop.id)
    if kind in POWER_KINDS:
        existing = await unfinished_job(connection, kind, DESKTOPS, resource_id)
        if existing is not None:
            return existing
    return await enqueue(
        connection,
        kind,
        {"desktop_id": resource_id},
        priority=POWER_PRIORITY if kind in POWER_KINDS else 0,
        idempotency_key=idempotency_key(kind, desktop),
        resource_type=DESKTOPS,
        resource_id=resource_id,
    )


async def enqueue_orphan_deletion(
    connection: asyncpg.Connection, cluster_id: uuid.UUID, vm_id: str
) -> Job:
    """Enqueue the deletion of an orphan VM unless one is queued or running for it."""
    resource_id = f"{cluster_id}/{vm_id}"
    existing = await unfinished_job(connection, DELETE_ORPHAN_VM, CLUSTERS, resource_id)
    if existing is not None:
        return existing
    return await enqueue(
        connection,
        DELETE_ORPHAN_VM,
        {"cluster_id": str(cluster_id), "vm_id": vm_id},
        resource_type=CLUSTERS,
        resource_id=resource_id,
    )


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


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class ProvisioningSettings:
    """The wait timeouts of provisioning (SPEC §8.5)."""

    guest_agent_wait_timeout: timedelta
    windows_ready_wait_timeout: timedelta

    @classmethod
    def from_config(cls, config: Config) -> ProvisioningSettings:
        """``GUEST_AGENT_WAIT_TIMEOUT`` and ``WINDOWS_READY_WAIT_TIMEOUT``."""
        agent = WAIT_TIMEOUT_SETTINGS[S.WAITING_FOR_AGENT]
        windows = WAIT_TIMEOUT_SETTINGS[S.WAITING_FOR_WINDOWS]
        return cls(
            guest_agent_wait_timeout=timedelta(seconds=config.duration(agent)),
            windows_ready_wait_timeout=timedelta(seconds=config.duration(windows)),
        )


def poll_interval(timeout: timedelta) -> float:
    """Seconds between two polls of a guest during a wait of ``timeout``."""
    return min(MAX_POLL_INTERVAL, max(MIN_POLL_INTERVAL, timeout.total_seconds() / 20))


def describe_failure(error: BaseException) -> str:
    """The ``last_error`` of a desktop failed by ``error``: short, and never a secret."""
    if isinstance(error, DeskpoolError):
        text = error.detail
    else:
        text = f"unexpected error ({type(error).__name__})"
    return text[:ERROR_TEXT_LIMIT]


def _now() -> datetime:
    return datetime.now(UTC)


def _desktop_id(payload: Mapping[str, Any]) -> uuid.UUID:
    try:
        return uuid.UUID(str(payload["desktop_id"]))
    except (KeyError, ValueError) as error:
        raise PermanentJobFailure(f"the payload names no desktop ({error})") from None


def _retryable(error: BaseException) -> bool:
    """Whether a later attempt may succeed where this one met ``error``."""
    if isinstance(error, DriverError):
        return error.retryable
    return isinstance(error, ServiceUnavailable)


# --------------------------------------------------------------------------- one attempt


class _StepStopped(Exception):
    """The desktop left the step being worked on (deleted, failed, moved on by someone)."""


class DesktopRecorder:
    """Writes what one attempt of a job does to its desktop.

    Every outcome is written fenced by the job's lease, and only while the desktop is still
    in the state the step started from.
    """

    def __init__(self, context: JobContext, desktop: Desktop, pool: Pool) -> None:
        self.context = context
        self.desktop = desktop
        self.pool = pool
        self._last_heartbeat = asyncio.get_running_loop().time()

    @property
    def db(self) -> asyncpg.Pool:
        """The worker's connection pool."""
        return self.context.runtime.db

    @property
    def last_attempt(self) -> bool:
        """Whether the job will not be tried again if this attempt fails."""
        return self.context.attempt >= self.context.job.max_attempts

    async def reload(self) -> Desktop | None:
        """Read the desktop again; ``None`` once it is gone."""
        found = await get_desktop(self.db, self.desktop.id)
        if found is not None:
            self.desktop = found
        return found

    async def record(self, event: DesktopEvent, *, node: str | None = None) -> Desktop | None:
        """Apply ``event`` if the desktop is still in the state the step started from.

        :param node: the node the desktop's VM is on, recorded with the event.
        :returns: the desktop after it, or ``None`` when the desktop moved on meanwhile.
        :raises LeaseLost: the job was reclaimed; nothing is written.
        """
        step = self.desktop.state
        async with self.db.acquire() as connection, connection.transaction():
            await self.context.hold_lease(connection)
            after = await apply_event_in_state(
                connection, self.desktop.id, event, _now(), states={step}, pool=self.pool
            )
            if after is not None and node is not None:
                await set_desktop_node(connection, self.desktop.id, node)
        if after is None:
            log.info(
                "desktop %s left %s while the job worked on it; %s not recorded",
                self.desktop.name,
                step,
                event.name,
            )
            return None
        self.desktop = after
        await publish_desktop(self.context.runtime, after)
        return after

    async def record_from_any(self, event: DesktopEvent) -> Desktop | None:
        """Apply ``event`` in whatever state the desktop is; ``None`` if illegal there."""
        async with self.db.acquire() as connection, connection.transaction():
            await self.context.hold_lease(connection)
            current = await get_desktop(connection, self.desktop.id, for_update=True)
            if current is None:
                return None
            try:
                after = await apply_event_in_state(
                    connection, current.id, event, _now(), states={current.state}, pool=self.pool
                )
            except IllegalTransition as error:
                log.info("desktop %s: %s", current.name, error.detail)
                return None
        if after is not None:
            self.desktop = after
            await publish_desktop(self.context.runtime, after)
        return after

    async def fail(self, error: str) -> None:
        """Fail the desktop at its current step with ``error`` (if it is still there)."""
        step = self.desktop.state
        now = _now()
        async with self.db.acquire() as connection, connection.transaction():
            await self.context.hold_lease(connection)
            after = await apply_event_in_state(
                connection, self.desktop.id, Failed(error), now, states={step}, pool=self.pool
            )
            if after is None:
                return
            await record_audit_event(
                connection,
                AuditEvent(
                    action="desktop.fail",
                    actor=WORKER_ACTOR,
                    resource_type=DESKTOPS,
                    resource_id=str(self.desktop.id),
                    outcome="failure",
                    occurred_at=now,
                    details={
                        "pool_id": str(self.pool.id),
                        "desktop": self.desktop.name,
                        "step": str(step),
                        "error": error,
                        "job_id": self.context.id,
                    },
                ),
            )
        self.desktop = after
        await publish_desktop(self.context.runtime, after)
        log.warning("desktop %s failed at %s: %s", after.name, step, error)

    async def settle(self, error: BaseException) -> None:
        """Decide what a step's ``error`` leads to: a retry of the job, or a failed desktop.

        :raises: ``error`` again when a later attempt may succeed.
        """
        if _retryable(error) and not self.last_attempt:
            raise error
        await self.fail(describe_failure(error))

    async def pause(self, seconds: float) -> None:
        """Sleep between two polls, heartbeating the lease every third of its duration."""
        await asyncio.sleep(seconds)
        loop = asyncio.get_running_loop()
        if loop.time() - self._last_heartbeat >= self.context.lease_duration.total_seconds() / 3:
            await self.context.heartbeat()
            self._last_heartbeat = loop.time()

    async def still_in(self, state: DesktopState) -> None:
        """Raise :class:`_StepStopped` unless the desktop is still in ``state``."""
        current = await self.reload()
        if current is None or current.state is not state:
            raise _StepStopped


class DesktopWork(DesktopRecorder):
    """One attempt of a job on one desktop, with its pool's cluster and an open driver.

    Build it with :func:`desktop_work`.
    """

    def __init__(
        self,
        context: JobContext,
        desktop: Desktop,
        pool: Pool,
        cluster: ClusterRecord,
        driver: HypervisorDriver,
    ) -> None:
        super().__init__(context, desktop, pool)
        self.cluster = cluster
        self.driver = driver
        self.settings = ProvisioningSettings.from_config(context.runtime.config)

    # ------------------------------------------------------------------ driving the desktop

    async def advance(self) -> None:
        """Carry the desktop on, step by step, until it is ready, failed or taken elsewhere."""
        steps: Mapping[DesktopState, Callable[[], Awaitable[None]]] = {
            S.PROVISIONING: self.clone,
            S.REFRESHING: self.clone,
            S.STARTING: self.start,
            S.WAITING_FOR_AGENT: self.wait_for_agent,
            S.WAITING_FOR_WINDOWS: self.wait_for_windows,
        }
        while True:
            step = steps.get(self.desktop.state)
            if step is None:
                return
            before = self.desktop
            try:
                await step()
            except _StepStopped:
                pass
            except LeaseLost:
                raise  # another worker has the job: record nothing
            except DeskpoolError as error:
                await self.settle(error)
            except Exception as error:
                if self.last_attempt:
                    await self.fail(describe_failure(error))
                raise
            if self.desktop == before and await self.reload() == before:
                return  # nothing moved: the step recorded nothing and nobody else did
            if self.desktop.state is S.FAILED:
                return

    async def tagged_vms(self) -> tuple[list[VirtualMachine], list[VirtualMachine]]:
        """This desktop's VMs, and every deskpool VM of the cluster (for node placement)."""
        owned = await self.driver.list_owned_vms()
        mine = [vm for vm in owned if vm.desktop_id == str(self.desktop.id)]
        return sorted(mine, key=_vm_order), owned

    async def destroy(self, vm_id: str) -> None:
        """Delete a VM of this desktop; one already gone, or not this desktop's, is left."""
        try:
            await self.driver.delete(vm_id, desktop_id=str(self.desktop.id))
        except VmNotFound:
            return
        except NotOwned:
            log.warning(
                "VM %s no longer carries the tag of desktop %s (its id was reused); left alone",
                vm_id,
                self.desktop.name,
            )
            return
        log.info("deleted VM %s of desktop %s", vm_id, self.desktop.name)

    async def clone(self) -> None:
        """``provisioning`` or ``refreshing``: make the desktop's VM, adopting one already made.

        The VM the record names is from before this provisioning (a failed attempt, or the
        VM a rebuild replaces): it is destroyed. Any other VM tagged for the desktop was made
        by an interrupted attempt of this job: it is adopted rather than cloned again.
        """
        desktop = self.desktop
        mine, owned = await self.tagged_vms()
        for vm in mine:
            if vm.id == desktop.vm_id:
                await self.destroy(vm.id)
        if desktop.vm_id is not None and all(vm.id != desktop.vm_id for vm in mine):
            await self.destroy(desktop.vm_id)  # not listed yet, or already gone
        adopted = await self.adopt([vm for vm in mine if vm.id != desktop.vm_id])
        if adopted is not None:
            vm = adopted
        else:
            await self.still_in(desktop.state)
            vm = await self.driver.clone(
                await self.template_id(),
                name=desktop.name,
                desktop_id=str(desktop.id),
                linked=self.pool.clone_mode is CloneMode.LINKED,
                node=self.choose_node(owned),
                storage=self.pool.storage if self.pool.clone_mode is CloneMode.FULL else None,
                deadline=deadline_after(min(CLONE_TIMEOUT, max(1.0, self.context.time_left()))),
            )
            log.info("cloned VM %s for desktop %s", vm.id, desktop.name)
        event: DesktopEvent
        if desktop.state is S.REFRESHING:
            event = Refreshed(vm.id, self.pool.template)
        else:
            event = Cloned(vm.id, self.pool.template)
        await self.record(event, node=vm.node)

    async def adopt(self, candidates: list[VirtualMachine]) -> VirtualMachine | None:
        """Keep the first VM an interrupted attempt made, once its clone is done."""
        for index, vm in enumerate(candidates):
            try:
                finished = await self.finished_clone(vm)
            except VmNotFound:
                continue  # its clone failed and it vanished
            for extra in candidates[index + 1 :]:
                try:
                    await self.destroy(extra.id)
                except DriverError as error:
                    log.warning("could not delete extra VM %s: %s", extra.id, error)
            log.info(
                "adopted VM %s, cloned for desktop %s by an interrupted attempt",
                finished.id,
                self.desktop.name,
            )
            return finished
        return None

    async def finished_clone(self, vm: VirtualMachine) -> VirtualMachine:
        """``vm`` once no operation holds it (its clone finished).

        :raises VmNotFound: the VM vanished (its clone failed).
        """
        while vm.busy:
            await self.pause(BUSY_POLL_INTERVAL)
            vm = await self.driver.get_vm(vm.id)
        return vm

    async def template_id(self) -> str:
        """The driver's id of the pool's template (named by id, or else by name).

        :raises NotFound: the cluster has no such template.
        """
        templates = await self.driver.list_templates()
        for template in templates:
            if template.id == self.pool.template:
                return template.id
        for template in templates:
            if template.name == self.pool.template:
                return template.id
        raise NotFound(f"template {self.pool.template} does not exist on {self.cluster.name}")

    def choose_node(self, owned: Collection[VirtualMachine]) -> str | None:
        """The pool's target node holding the fewest deskpool VMs; ``None`` lets the driver."""
        nodes = self.pool.target_nodes
        if not nodes or not self.driver.capabilities.node_selection:
            return None
        load = dict.fromkeys(nodes, 0)
        for vm in owned:
            if vm.node in load:
                load[vm.node] += 1
        return min(nodes, key=lambda node: (load[node], nodes.index(node)))

    async def start(self) -> None:
        """``starting``: power the VM on."""
        vm_id = self.desktop.vm_id
        if vm_id is None:
            await self.fail("no VM is recorded for the desktop")
            return
        await self.driver.start(vm_id)
        await self.record(Started())

    async def wait_for_agent(self) -> None:
        """``waiting_for_agent``: poll the guest agent until it answers or the timeout ends."""
        timeout = self.settings.guest_agent_wait_timeout
        answered = await self.wait(
            self.driver.agent_ping, timeout, "the guest agent did not answer within"
        )
        if answered:
            await self.record(AgentReady())

    async def wait_for_windows(self) -> None:
        """``waiting_for_windows``: poll until Sysprep/OOBE finished or the timeout ends."""
        timeout = self.settings.windows_ready_wait_timeout
        finished = await self.wait(
            self.driver.windows_ready, timeout, "Windows did not finish Sysprep/OOBE within"
        )
        if finished:
            await self.record(WindowsReady())

    async def wait(
        self,
        probe: Callable[..., Awaitable[bool]],
        limit: timedelta,
        failure: str,
    ) -> bool:
        """Poll ``probe(vm_id)`` until it is true (``True``) or ``limit`` ran out (``False``).

        ``limit`` (the step's timeout) counts from when the desktop entered the step. A VM
        found powered off is powered on again; a driver that cannot probe counts as an answer.
        """
        step = self.desktop.state
        vm_id = self.desktop.vm_id
        if vm_id is None:
            await self.fail("no VM is recorded for the desktop")
            return False
        ends_at = self.desktop.state_changed_at + limit
        interval = poll_interval(limit)
        while True:
            try:
                if await probe(vm_id, deadline=deadline_after(max(interval * 4, 10.0))):
                    return True
            except Unsupported as error:
                log.warning("%s: %s; the step counts as done", self.desktop.name, error)
                return True
            except VmNotRunning:
                log.info("VM %s of %s is not running; powering it on", vm_id, self.desktop.name)
                await self.driver.start(vm_id)
            if _now() >= ends_at:
                await self.fail(f"{failure} {format_duration(limit.total_seconds())}")
                return False
            await self.pause(interval)
            await self.still_in(step)

    # ------------------------------------------------------------------ deletion and power

    async def delete(self) -> None:
        """Delete every VM of the desktop, then its record."""
        if self.desktop.state is not S.DELETING:
            moved = await self.record_from_any(Delete())
            if moved is None:
                return
        try:
            mine, _ = await self.tagged_vms()
            for vm in mine:
                await self.destroy(vm.id)
            recorded = self.desktop.vm_id
            if recorded is not None and all(vm.id != recorded for vm in mine):
                await self.destroy(recorded)
        except DeskpoolError as error:
            await self.settle(error)
            return
        now = _now()
        async with self.db.acquire() as connection, connection.transaction():
            await self.context.hold_lease(connection)
            if not await remove_desktop(connection, self.desktop.id):
                return
            await record_audit_event(
                connection,
                AuditEvent(
                    action="desktop.delete",
                    actor=WORKER_ACTOR,
                    resource_type=DESKTOPS,
                    resource_id=str(self.desktop.id),
                    outcome="success",
                    occurred_at=now,
                    details={
                        "pool_id": str(self.pool.id),
                        "desktop": self.desktop.name,
                        "vm_id": self.desktop.vm_id,
                        "job_id": self.context.id,
                    },
                ),
            )
        await publish_desktop(self.context.runtime, self.desktop, "deleted")
        log.info("desktop %s deleted", self.desktop.name)

    async def power(self, kind: str) -> None:
        """Power the VM on, off, or restart it (the desktop's state does not change)."""
        vm_id = self.desktop.vm_id
        if vm_id is None or self.desktop.state in (S.PROVISIONING, S.REFRESHING, S.DELETING):
            log.info("desktop %s is %s: nothing to power", self.desktop.name, self.desktop.state)
            return
        desktop_id = str(self.desktop.id)
        try:
            if kind in (POWER_OFF, RESTART):
                await self.driver.shutdown(
                    vm_id,
                    graceful=True,
                    guest_timeout=GUEST_SHUTDOWN_TIMEOUT,
                    desktop_id=desktop_id,
                    deadline=deadline_after(GUEST_SHUTDOWN_TIMEOUT + 120),
                )
            if kind in (POWER_ON, RESTART):
                await self.driver.start(vm_id)
        except VmNotFound:
            log.info("VM %s of %s is gone; reconciliation replaces it", vm_id, self.desktop.name)
        except DriverError as error:
            if error.retryable:
                raise
            raise PermanentJobFailure(describe_failure(error)) from error


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
            if not fail_desktop or (_retryable(error) and not recorder.last_attempt):
                raise
            await recorder.fail(describe_failure(error))
            driver = None
        yield None if driver is None else DesktopWork(context, desktop, pool, cluster, driver)


def _vm_order(vm: VirtualMachine) -> tuple[int, str]:
    return (int(vm.id), vm.id) if vm.id.isdigit() else (1 << 62, vm.id)


# --------------------------------------------------------------------------- handlers


async def provision_desktop(context: JobContext) -> None:
    """``desktop.provision``: carry the desktop from where it is to ``ready``."""
    async with desktop_work(context) as work:
        if work is not None:
            await work.advance()


async def rebuild_desktop(context: JobContext) -> None:
    """``desktop.rebuild``: replace the VM by a fresh clone under the same name.

    A ready desktop is moved to ``refreshing`` first, a failed one retried; a desktop in use
    is left alone (the API refuses to rebuild it).
    """
    async with desktop_work(context) as work:
        if work is None:
            return
        state = work.desktop.state
        if state is S.READY:
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
                if vm.desktop_id is not None and await _desktop_may_own(connection, vm):
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
    try:
        desktop_id = uuid.UUID(str(vm.desktop_id))
    except ValueError:
        return False
    return bool(await connection.fetchval("SELECT true FROM desktops WHERE id = $1", desktop_id))
