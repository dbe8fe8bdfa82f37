"""The simulator driver: a whole cluster kept in the driver's shared state.

:class:`SimulatorDriver` implements the driver contract against a :class:`SimulatedCluster`
stored as one document under the key ``cluster`` of ``context.shared_state``. Writes take the
shared lock ``cluster`` and read, change and store the document; reads just read it. Since
the platform backs shared state with Redis, an api process and a worker process driving the
same cluster see the same VMs, and since phases are computed from stored timestamps, each
sees a clone finish or a guest boot without having started it.

:class:`SimulatorAdmin` (``driver.admin``) injects faults at run time for tests and
``deskpool dev``: take a node down, silence a guest agent, keep Windows in OOBE forever, make
clones fail, add a VM deskpool does not own.
"""

from __future__ import annotations

import asyncio
import hmac
import importlib.metadata
import random
from collections.abc import Callable
from dataclasses import replace
from fnmatch import fnmatchcase
from typing import TypeVar

from deskpool_driver_api import (
    AgentNotRunning,
    AuthenticationFailed,
    CloneRequest,
    ClusterConnection,
    ClusterInfo,
    DesktopEndpoint,
    DesktopProtocol,
    DriverCapabilities,
    DriverContext,
    GuestInfo,
    HypervisorDriver,
    Node,
    NotFound,
    OperationFailed,
    OsType,
    PowerState,
    Template,
    VirtualMachine,
    VmNotFound,
)
from deskpool_driver_simulator.cluster import SimulatedCluster, SimulatedVm
from deskpool_driver_simulator.fields import CONNECTION_FIELDS
from deskpool_driver_simulator.settings import Faults, SimulatorSettings

T = TypeVar("T")

#: The shared-state key of the cluster document, and the name of the lock guarding it.
STATE_KEY = "cluster"

_OS_NAMES = {
    OsType.LINUX: "Ubuntu 22.04.4 LTS",
    OsType.WINDOWS: "Windows 11 Pro",
    OsType.OTHER: "Unknown OS",
}


def _version() -> str:
    try:
        return importlib.metadata.version("deskpool-driver-simulator")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


class SimulatorDriver(HypervisorDriver):
    """A simulated cluster with configurable phase durations and injectable faults.

    :param connection: ``endpoint`` is informational (``simulator://local``); ``options`` are
        described in :mod:`deskpool_driver_simulator.settings`; ``credentials["token"]`` is
        checked only when the ``required_token`` option is set.
    :param context: the shared state holds the cluster.
    :raises DriverConfigurationError: invalid options.
    """

    name = "simulator"
    title = "Simulator"
    endpoint_help = "Informational only: any text, such as simulator://local."
    connection_fields = CONNECTION_FIELDS
    capabilities = DriverCapabilities(
        linked_clone=True,
        full_clone=True,
        windows_readiness=True,
        guest_agent=True,
        desktop_protocols=(DesktopProtocol.VNC, DesktopProtocol.RDP),
        node_selection=True,
        storage_selection=True,
    )
    default_timeout = 120.0

    def __init__(self, connection: ClusterConnection, context: DriverContext) -> None:
        super().__init__(connection, context)
        self.settings = SimulatorSettings.from_options(connection.options)
        self._random = random.Random(self.settings.seed)
        self.admin = SimulatorAdmin(self)

    # ------------------------------------------------------------------ state access

    def _authenticate(self) -> None:
        required = self.settings.required_token
        if required is None:
            return
        given = self.connection.credentials.get("token", "")
        if not hmac.compare_digest(given.encode(), required.encode()):
            raise AuthenticationFailed("the simulator rejected the token")

    async def _read(self) -> tuple[SimulatedCluster, float]:
        self._authenticate()
        raw = await self.context.shared_state.get(STATE_KEY)
        now = self.context.clock()
        cluster = SimulatedCluster.from_bytes(raw)
        cluster.settle(self.settings, now)
        return cluster, now

    async def _change(self, change: Callable[[SimulatedCluster, float], T]) -> T:
        """Apply ``change`` to the stored cluster under the shared lock."""
        self._authenticate()
        async with self.context.shared_state.lock(STATE_KEY, ttl=30.0, wait=30.0):
            cluster = SimulatedCluster.from_bytes(await self.context.shared_state.get(STATE_KEY))
            now = self.context.clock()
            cluster.settle(self.settings, now)
            result = change(cluster, now)
            await self.context.shared_state.set(STATE_KEY, cluster.to_bytes())
            return result

    async def _sleep_until(self, moment: float) -> None:
        """Wait until the context's clock reaches ``moment`` (as the event loop measures it)."""
        left = moment - self.context.clock()
        if left > 0:
            await asyncio.sleep(left)

    # ------------------------------------------------------------------ the contract

    async def do_check_connection(self) -> ClusterInfo:
        """Describe the simulated cluster (checks the token when one is required)."""
        cluster, _ = await self._read()
        return ClusterInfo(
            product="deskpool simulator",
            version=_version(),
            cluster_name=self.settings.cluster_name,
            details={"nodes": str(len(self.settings.nodes)), "vms": str(len(cluster.vms))},
        )

    async def do_list_nodes(self) -> list[Node]:
        """Every configured node; those in ``offline_nodes`` are offline."""
        cluster, _ = await self._read()
        return [
            Node(
                name=node,
                online=cluster.node_online(node, self.settings),
                cpu_count=16,
                memory_bytes=64 * 2**30,
            )
            for node in self.settings.nodes
        ]

    async def do_list_templates(self) -> list[Template]:
        """The configured templates."""
        self._authenticate()
        return [
            Template(id=t.id, name=t.name, node=t.node, os_type=t.os_type)
            for t in self.settings.templates
        ]

    async def do_list_owned_vms(self) -> list[VirtualMachine]:
        """Every VM with the owner tag; those on a down node are ``unknown``."""
        cluster, now = await self._read()
        return [
            cluster.view(vm, self.settings, now)
            for vm in sorted(cluster.vms.values(), key=lambda vm: int(vm.id))
            if self.ownership.is_owned(vm.tags)
        ]

    async def do_get_vm(self, vm_id: str) -> VirtualMachine:
        """A VM or a template, read from the shared document."""
        template = self.settings.template(vm_id)
        if template is not None:
            self._authenticate()
            return SimulatedCluster.template_view(template)
        cluster, now = await self._read()
        return cluster.view(cluster.vm(vm_id, self.settings, now), self.settings, now)

    async def do_clone(self, request: CloneRequest) -> VirtualMachine:
        """Create the VM at once (tagged), wait ``clone_seconds``, then report it or the failure.

        A clone of a name matching ``clone_fails_for``, or picked by ``clone_failure_rate``,
        vanishes when its copy would have finished and raises :class:`OperationFailed`.
        """
        template = self.settings.template(request.template_id)
        if template is None:
            raise NotFound(f"template {request.template_id} does not exist")
        if request.storage is not None and request.storage not in self.settings.storages:
            raise NotFound(f"storage {request.storage} does not exist")

        def begin(cluster: SimulatedCluster, now: float) -> SimulatedVm:
            faults = cluster.effective_faults(self.settings)
            fails = self._random.random() < faults.clone_failure_rate or any(
                fnmatchcase(request.name, pattern) for pattern in faults.clone_fails_for
            )
            return cluster.begin_clone(
                template=template,
                name=request.name,
                node=request.node or template.node,
                tags=tuple(sorted(request.tags)),
                description=request.description,
                fails=fails,
                settings=self.settings,
                now=now,
            )

        started = await self._change(begin)
        await self._sleep_until(started.clone_done_at)
        if started.clone_fails:
            # Let it vanish for every process: the settle step of this change removes it.
            await self._change(lambda cluster, now: None)
            raise OperationFailed(
                f"clone of template {template.name} into {request.name} failed (simulated)",
                vm_id=started.id,
            )
        return await self.do_get_vm(started.id)

    async def do_start(self, vm_id: str) -> None:
        """Power on; the guest boots from now."""
        await self._change(lambda cluster, now: cluster.power_on(vm_id, self.settings, now))

    async def do_shutdown(
        self, vm: VirtualMachine, *, graceful: bool, guest_timeout: float
    ) -> None:
        """Ask the guest, wait for it (or ``guest_timeout``), then power off what still runs."""
        if graceful:
            off_at = await self._change(
                lambda cluster, now: cluster.request_shutdown(vm.id, self.settings, now)
            )
            give_up_at = self.context.clock() + guest_timeout
            await self._sleep_until(give_up_at if off_at is None else min(off_at, give_up_at))
        await self._change(lambda cluster, now: cluster.power_off(vm.id, self.settings, now))

    async def do_stop(self, vm: VirtualMachine) -> None:
        """Power off at once."""
        await self._change(lambda cluster, now: cluster.power_off(vm.id, self.settings, now))

    async def do_reset(self, vm: VirtualMachine) -> None:
        """Reboot: the agent goes silent and answers again after boot."""
        await self._change(lambda cluster, now: cluster.reset(vm.id, self.settings, now))

    async def do_delete(self, vm: VirtualMachine) -> None:
        """Remove the VM from the cluster."""
        await self._change(lambda cluster, now: cluster.delete(vm.id, self.settings, now))

    async def do_power_state(self, vm_id: str) -> PowerState:
        """Computed from the stored timestamps."""
        vm = await self.do_get_vm(vm_id)
        return vm.power_state

    async def do_agent_ping(self, vm_id: str) -> bool:
        """True from ``boot_seconds + agent_seconds`` after power-on, unless silenced."""
        cluster, now = await self._read()
        vm = cluster.running_vm(vm_id, self.settings, now)
        return cluster.agent_answers(vm, self.settings, now)

    async def do_guest_info(self, vm_id: str) -> GuestInfo:
        """The derived address, the VM name as host name and the template's OS."""
        cluster, now = await self._read()
        vm = cluster.running_vm(vm_id, self.settings, now)
        if not cluster.agent_answers(vm, self.settings, now):
            raise AgentNotRunning(f"the guest agent of VM {vm_id} does not answer", vm_id=vm_id)
        return GuestInfo(
            addresses=(vm.address,),
            hostname=vm.name,
            os_name=_OS_NAMES[vm.os_type],
            os_type=vm.os_type,
        )

    async def do_windows_ready(self, vm_id: str) -> bool:
        """True ``oobe_seconds`` after the agent answers, unless OOBE is stuck."""
        cluster, now = await self._read()
        vm = cluster.running_vm(vm_id, self.settings, now)
        return cluster.windows_ready(vm, self.settings, now)

    async def do_desktop_endpoint(
        self, vm_id: str, protocol: DesktopProtocol | None
    ) -> DesktopEndpoint:
        """The ``desktop`` option's desktop, by default VNC at the VM's name on port 5900.

        The desktop is reachable once the guest's agent answers (the OS is up), like a real
        guest's; ``protocol`` is ignored: every VM is shown the configured way.
        """
        info = await self.do_guest_info(vm_id)
        desktop = self.settings.desktop
        return DesktopEndpoint(
            protocol=desktop.protocol,
            host=desktop.host or info.hostname or info.addresses[0],
            port=desktop.port_or_default,
            credentials=desktop.credentials,
            parameters=desktop.parameters,
        )


class SimulatorAdmin:
    """Run-time fault injection for one simulated cluster (stored, so every process obeys).

    Faults given in the connection's options always apply; these add to them until
    :meth:`clear_faults`.
    """

    def __init__(self, driver: SimulatorDriver) -> None:
        self._driver = driver

    async def faults(self) -> Faults:
        """The faults injected at run time (not those from the options)."""
        cluster, _ = await self._driver._read()
        return cluster.faults

    async def _update_faults(self, change: Callable[[Faults], Faults]) -> None:
        def apply(cluster: SimulatedCluster, now: float) -> None:
            cluster.faults = change(cluster.faults)

        await self._driver._change(apply)

    async def set_node_online(self, node: str, online: bool) -> None:
        """Take ``node`` down (its VMs become unreachable) or bring it back.

        :raises NotFound: no such node.
        """
        if node not in self._driver.settings.nodes:
            raise NotFound(f"node {node} does not exist")

        def change(faults: Faults) -> Faults:
            offline = faults.offline_nodes - {node} if online else faults.offline_nodes | {node}
            return replace(faults, offline_nodes=offline)

        await self._update_faults(change)

    async def inject(
        self,
        *,
        clone_failure_rate: float | None = None,
        clone_fails_for: str | None = None,
        agent_never_answers: str | None = None,
        oobe_never_finishes: str | None = None,
        ignores_shutdown: str | None = None,
    ) -> None:
        """Add faults: each pattern matches VM names or ids (``fnmatch``).

        :param clone_failure_rate: replaces the run-time failure probability (0..1).
        :param clone_fails_for: clones with a matching name fail.
        :param agent_never_answers: matching VMs' agents stay silent.
        :param oobe_never_finishes: matching Windows VMs never finish OOBE.
        :param ignores_shutdown: matching guests ignore shutdown requests.
        """
        if clone_failure_rate is not None and not 0 <= clone_failure_rate <= 1:
            raise ValueError("clone_failure_rate must be between 0 and 1")

        def add(patterns: frozenset[str], pattern: str | None) -> frozenset[str]:
            return patterns | {pattern} if pattern else patterns

        def change(faults: Faults) -> Faults:
            return replace(
                faults,
                clone_failure_rate=(
                    faults.clone_failure_rate if clone_failure_rate is None else clone_failure_rate
                ),
                clone_fails_for=add(faults.clone_fails_for, clone_fails_for),
                agent_never_answers=add(faults.agent_never_answers, agent_never_answers),
                oobe_never_finishes=add(faults.oobe_never_finishes, oobe_never_finishes),
                ignores_shutdown=add(faults.ignores_shutdown, ignores_shutdown),
            )

        await self._update_faults(change)

    async def clear_faults(self) -> None:
        """Remove every run-time fault (option faults stay)."""
        await self._update_faults(lambda faults: Faults())

    async def add_foreign_vm(
        self, name: str, *, node: str | None = None, running: bool = True
    ) -> VirtualMachine:
        """Create a VM deskpool does not own, as another user of the cluster would."""
        driver = self._driver
        chosen = node or driver.settings.nodes[0]

        def create(cluster: SimulatedCluster, now: float) -> VirtualMachine:
            vm = cluster.add_foreign_vm(
                name=name, node=chosen, running=running, settings=driver.settings, now=now
            )
            return cluster.view(vm, driver.settings, now)

        return await driver._change(create)

    async def set_tags(self, vm_id: str, tags: tuple[str, ...]) -> None:
        """Replace a VM's tags, as an administrator editing it by hand would.

        :raises VmNotFound: no such VM.
        """
        driver = self._driver

        def retag(cluster: SimulatedCluster, now: float) -> None:
            vm = cluster.vms.get(vm_id)
            if vm is None:
                raise VmNotFound(f"VM {vm_id} does not exist", vm_id=vm_id)
            vm.tags = tuple(sorted(tags))

        await driver._change(retag)
