"""The steps of the desktop jobs: clone, start, wait, delete and power, on the driver.

:class:`DesktopWork` is one attempt of a desktop job (:mod:`deskpool.desktops.jobs` lists
the kinds; :mod:`deskpool.provisioning.handlers` runs them) on one desktop, with its pool's
cluster and an open driver.

The desktop's state (:mod:`deskpool.desktops.states`) is the job's progress: a job reads the
desktop and carries it on from the step it is at, applying each step's event when the step is
done, fenced by the job's lease (:mod:`deskpool.provisioning.recorder`). So a job that runs
again (its worker died, its attempt timed out) resumes where the last attempt stopped:

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
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta

from deskpool.clusters.repository import ClusterRecord
from deskpool.config import Config, format_duration
from deskpool.desktops.jobs import POWER_OFF, POWER_ON, RESTART
from deskpool.desktops.states import (
    WAIT_TIMEOUT_SETTINGS,
    AgentReady,
    Cloned,
    Delete,
    DesktopEvent,
    PowerUp,
    Refreshed,
    Started,
    WindowsReady,
)
from deskpool.desktops.store import remove_desktop
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
from deskpool.errors import DeskpoolError
from deskpool.jobs.context import JobContext
from deskpool.jobs.model import LeaseLost, PermanentJobFailure
from deskpool.live.publishers import publish_desktop
from deskpool.pools.model import CloneMode, Desktop, DesktopState, Pool
from deskpool.provisioning.powered import follow_power_off
from deskpool.provisioning.recorder import (
    DesktopRecorder,
    StepStopped,
    describe_failure,
    utc_now,
)
from deskpool.rollouts import store as rollout_store
from deskpool.sessions import store_policies
from deskpool.sessions.store_addresses import forget_address
from deskpool.sessions.tokens import ask_target
from deskpool.values import ascii_int

log = logging.getLogger(__name__)

S = DesktopState

#: Bounds of the pause between two polls of a guest (a twentieth of the wait's timeout).
MIN_POLL_INTERVAL = 0.05
MAX_POLL_INTERVAL = 2.0
#: Seconds between two looks at a VM whose clone is still running.
BUSY_POLL_INTERVAL = 0.5
#: How long a clone may take, at most, before the attempt gives up on it.
CLONE_TIMEOUT = 3600.0
#: How long a guest gets to shut down before it is powered off.
GUEST_SHUTDOWN_TIMEOUT = 60.0


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
            except StepStopped:
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
        template = await self.build_template()
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
                await self.template_id(template),
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
            event = Refreshed(vm.id, template)
        else:
            event = Cloned(vm.id, template)
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

    async def build_template(self) -> str:
        """The template this build clones: the pool's, or an active rollout's new one.

        A rollout rebuilding the desktop says so (:func:`deskpool.rollouts.store.build_template`).
        """
        chosen = await rollout_store.build_template(self.db, self.desktop.id)
        return chosen or self.pool.template

    async def template_id(self, wanted: str) -> str:
        """The driver's id of the template ``wanted`` (named by id, or else by name).

        :raises NotFound: the cluster has no such template.
        """
        templates = await self.driver.list_templates()
        for template in templates:
            if template.id == wanted:
                return template.id
        for template in templates:
            if template.name == wanted:
                return template.id
        raise NotFound(f"template {wanted} does not exist on {self.cluster.name}")

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
        await forget_address(self.db, self.desktop.id)  # it may come back elsewhere
        await self.driver.start(vm_id)
        await self.record(Started())

    async def wait_for_agent(self) -> None:
        """``waiting_for_agent``: poll the guest agent until it answers or the timeout ends."""
        limit = self.settings.guest_agent_wait_timeout
        failure = "the guest agent did not answer within"
        await self.wait(self.driver.agent_ping, limit, failure, AgentReady())

    async def wait_for_windows(self) -> None:
        """``waiting_for_windows``: poll until Sysprep/OOBE finished or the timeout ends."""
        limit = self.settings.windows_ready_wait_timeout
        failure = "Windows did not finish Sysprep/OOBE within"
        await self.wait(self.driver.windows_ready, limit, failure, WindowsReady())

    async def wait(
        self,
        probe: Callable[..., Awaitable[bool]],
        limit: timedelta,
        failure: str,
        done: DesktopEvent,
    ) -> None:
        """Poll ``probe(vm_id)`` until it is true, then record ``done``; or fail the step.

        ``limit`` (the step's timeout) counts from when the desktop entered the step; once it
        ran out, the step fails with ``failure`` and the limit. A VM found powered off is
        powered on again; a driver that cannot probe counts as an answer.
        """
        step = self.desktop.state
        vm_id = self.desktop.vm_id
        if vm_id is None:
            await self.fail("no VM is recorded for the desktop")
            return
        ends_at = self.desktop.state_changed_at + limit
        interval = poll_interval(limit)
        while True:
            try:
                if await probe(vm_id, deadline=deadline_after(max(interval * 4, 10.0))):
                    break
            except Unsupported as error:
                log.warning("%s: %s; the step counts as done", self.desktop.name, error)
                break
            except VmNotRunning:
                log.info("VM %s of %s is not running; powering it on", vm_id, self.desktop.name)
                await self.driver.start(vm_id)
            if utc_now() >= ends_at:
                await self.fail(f"{failure} {format_duration(limit.total_seconds())}")
                return
            await self.pause(interval)
            await self.still_in(step)
        if await self.record(done) is not None:
            await self.record_address()

    async def record_address(self) -> None:
        """Record where the desktop, ready now, is shown: no opening asks the driver again.

        A driver that cannot say yet is not a failure of the desktop: its first opening asks.
        """
        policy = await store_policies.get_policy(self.db, self.pool.id)
        try:
            await ask_target(self.context.runtime, self.desktop, policy, self.driver)
        except DeskpoolError as error:
            log.info("%s: no address recorded (%s)", self.desktop.name, error.detail)

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
        now = utc_now()
        async with self.db.acquire() as connection, connection.transaction():
            await self.context.hold_lease(connection)
            if not await remove_desktop(connection, self.desktop.id):
                return
            await self.audit(connection, "desktop.delete", now, "success", vm_id=self.desktop.vm_id)
        await publish_desktop(self.context.runtime, self.desktop, "deleted")
        log.info("desktop %s deleted", self.desktop.name)

    async def power(self, kind: str) -> None:
        """Power the VM on, off, or restart it.

        Once a power-off is done, the desktop's state follows the VM (:func:`follow_power_off`:
        its user is logged off, a ready desktop is recorded ``powered_off``).
        """
        vm_id = self.desktop.vm_id
        if vm_id is None or self.desktop.state in (S.PROVISIONING, S.REFRESHING, S.DELETING):
            log.info("desktop %s is %s: nothing to power", self.desktop.name, self.desktop.state)
            return
        if kind in (POWER_ON, RESTART) and self.desktop.state is S.POWERED_OFF:
            # Powered on as the schedule or a user's open powers it on: it is ready once its
            # guest answers again.
            if await self.record(PowerUp()) is not None:
                await self.advance()
            return
        if kind == POWER_OFF and self.desktop.state in _BEING_STARTED:
            # Powered on again since the power-off was asked for (a schedule's phase, a user).
            log.info("desktop %s is %s: not powered off", self.desktop.name, self.desktop.state)
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
        else:
            if kind == POWER_OFF:
                await follow_power_off(self)


#: States in which provisioning is bringing the VM up: a late power-off leaves it alone.
_BEING_STARTED = frozenset({S.STARTING, S.WAITING_FOR_AGENT, S.WAITING_FOR_WINDOWS})


def _vm_order(vm: VirtualMachine) -> tuple[int, str]:
    number = ascii_int(vm.id)
    return (number, vm.id) if number is not None and number >= 0 else (1 << 62, vm.id)
