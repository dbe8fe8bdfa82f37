"""The simulated cluster: its state and the rules of its phases, with no I/O.

The whole cluster is one JSON document in the driver's shared state, so every process sees
the same VMs. Nothing moves by itself: each VM stores *when* things happened (clone started,
powered on, shutdown requested) and every phase is computed from those timestamps and the
current time. A process that never saw the clone start still sees it finish, and a test can
compute any phase for any instant.

Phases of a desktop VM::

    clone_done_at ── stopped ── power on ── +boot ── OS up ── +agent ── agent answers
                                                                 └── +oobe ── Windows ready
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from deskpool_driver_api import (
    DriverBusy,
    NodeUnavailable,
    NotFound,
    OsType,
    PowerState,
    VirtualMachine,
    VmNotFound,
    VmNotRunning,
)
from deskpool_driver_simulator.settings import (
    FIRST_TEMPLATE_ID,
    FIRST_VM_ID,
    Faults,
    SimulatorSettings,
    TemplateSpec,
)

#: Bumped when the stored document changes shape; older documents are started afresh.
STATE_VERSION = 1


@dataclass
class SimulatedVm:
    """One VM of the simulated cluster, as stored."""

    id: str
    name: str
    node: str
    template_id: str
    os_type: OsType
    tags: tuple[str, ...]
    description: str
    clone_done_at: float
    clone_fails: bool = False
    powered_on_at: float | None = None
    shutdown_requested_at: float | None = None

    @property
    def address(self) -> str:
        """The guest's IPv4 address, derived from its id (10.77.x.y)."""
        number = int(self.id) if self.id.isdigit() else sum(map(ord, self.id))
        return f"10.77.{number // 250 % 250}.{number % 250 + 1}"

    def matches(self, patterns: Iterable[str]) -> bool:
        """Whether the VM's name or id matches one of ``patterns``."""
        return any(fnmatchcase(self.name, p) or fnmatchcase(self.id, p) for p in patterns)

    def cloning(self, now: float) -> bool:
        """Whether its clone is still copying."""
        return now < self.clone_done_at

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        data = asdict(self)
        data["os_type"] = self.os_type.value
        data["tags"] = list(self.tags)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SimulatedVm:
        """Read what :meth:`as_json` wrote."""
        return cls(**{**data, "os_type": OsType(data["os_type"]), "tags": tuple(data["tags"])})


@dataclass
class SimulatedCluster:
    """The stored state: VMs, the next free id, and faults injected at run time."""

    next_id: int = FIRST_VM_ID
    vms: dict[str, SimulatedVm] = field(default_factory=dict)
    faults: Faults = field(default_factory=Faults)

    # ------------------------------------------------------------------ storage

    def to_bytes(self) -> bytes:
        """The document stored in shared state."""
        return json.dumps(
            {
                "version": STATE_VERSION,
                "next_id": self.next_id,
                "vms": {vm_id: vm.as_json() for vm_id, vm in self.vms.items()},
                "faults": self.faults.as_json(),
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_bytes(cls, raw: bytes | None) -> SimulatedCluster:
        """Read a stored document; ``None`` or an older version gives an empty cluster."""
        if raw is None:
            return cls()
        data = json.loads(raw)
        if data.get("version") != STATE_VERSION:
            return cls()
        return cls(
            next_id=data["next_id"],
            vms={vm_id: SimulatedVm.from_json(vm) for vm_id, vm in data["vms"].items()},
            faults=Faults.from_json(data["faults"]),
        )

    # ------------------------------------------------------------------ rules

    def effective_faults(self, settings: SimulatorSettings) -> Faults:
        """The option faults and the run-time faults together."""
        return settings.faults.union(self.faults)

    def node_online(self, node: str, settings: SimulatorSettings) -> bool:
        """Whether ``node`` is up."""
        return node not in self.effective_faults(settings).offline_nodes

    def settle(self, settings: SimulatorSettings, now: float) -> None:
        """Store what time has done: failed clones vanish, honoured shutdowns end."""
        for vm_id, vm in list(self.vms.items()):
            if vm.clone_fails and not vm.cloning(now):
                del self.vms[vm_id]
            elif self._shutdown_finished(vm, settings, now):
                vm.powered_on_at = None
                vm.shutdown_requested_at = None

    def _shutdown_finished(self, vm: SimulatedVm, settings: SimulatorSettings, now: float) -> bool:
        return (
            vm.shutdown_requested_at is not None
            and not vm.matches(self.effective_faults(settings).ignores_shutdown)
            and now >= vm.shutdown_requested_at + settings.timings.shutdown_seconds
        )

    def power_state(self, vm: SimulatedVm, settings: SimulatorSettings, now: float) -> PowerState:
        """The VM's power state at ``now`` (unknown when its node is down)."""
        if not self.node_online(vm.node, settings):
            return PowerState.UNKNOWN
        if vm.powered_on_at is None or self._shutdown_finished(vm, settings, now):
            return PowerState.STOPPED
        return PowerState.RUNNING

    def agent_answers(self, vm: SimulatedVm, settings: SimulatorSettings, now: float) -> bool:
        """Whether the guest agent answers at ``now``."""
        if self.power_state(vm, settings, now) is not PowerState.RUNNING:
            return False
        assert vm.powered_on_at is not None
        timings = settings.timings
        up_at = vm.powered_on_at + timings.boot_seconds + timings.agent_seconds
        return now >= up_at and not vm.matches(self.effective_faults(settings).agent_never_answers)

    def windows_ready(self, vm: SimulatedVm, settings: SimulatorSettings, now: float) -> bool:
        """Whether Windows finished OOBE at ``now`` (a non-Windows guest: its agent answers)."""
        if not self.agent_answers(vm, settings, now):
            return False
        if vm.os_type is not OsType.WINDOWS:
            return True
        assert vm.powered_on_at is not None
        timings = settings.timings
        ready_at = (
            vm.powered_on_at + timings.boot_seconds + timings.agent_seconds + timings.oobe_seconds
        )
        return now >= ready_at and not vm.matches(
            self.effective_faults(settings).oobe_never_finishes
        )

    # ------------------------------------------------------------------ lookups

    def vm(self, vm_id: str, settings: SimulatorSettings, now: float) -> SimulatedVm:
        """The VM ``vm_id`` (not a template), its node reachable.

        :raises VmNotFound: no such VM (or a failed clone).
        :raises NodeUnavailable: its node is down.
        """
        vm = self.vms.get(vm_id)
        if vm is None or (vm.clone_fails and not vm.cloning(now)):
            raise VmNotFound(f"VM {vm_id} does not exist", vm_id=vm_id)
        if not self.node_online(vm.node, settings):
            raise NodeUnavailable(f"node {vm.node} is unavailable", vm_id=vm_id)
        return vm

    def running_vm(self, vm_id: str, settings: SimulatorSettings, now: float) -> SimulatedVm:
        """The VM ``vm_id``, which must be running.

        :raises VmNotRunning: it is not.
        """
        vm = self.vm(vm_id, settings, now)
        if self.power_state(vm, settings, now) is not PowerState.RUNNING:
            raise VmNotRunning(f"VM {vm_id} is not running", vm_id=vm_id)
        return vm

    def view(self, vm: SimulatedVm, settings: SimulatorSettings, now: float) -> VirtualMachine:
        """The VM as the driver contract shows it."""
        return VirtualMachine(
            id=vm.id,
            name=vm.name,
            node=vm.node,
            power_state=self.power_state(vm, settings, now),
            tags=tuple(sorted(vm.tags)),
            busy=vm.cloning(now),
        )

    @staticmethod
    def template_view(template: TemplateSpec) -> VirtualMachine:
        """A template as a (stopped, untagged) VM."""
        return VirtualMachine(
            id=template.id,
            name=template.name,
            node=template.node,
            power_state=PowerState.STOPPED,
            template=True,
        )

    # ------------------------------------------------------------------ changes

    def begin_clone(
        self,
        *,
        template: TemplateSpec,
        name: str,
        node: str,
        tags: tuple[str, ...],
        description: str,
        fails: bool,
        settings: SimulatorSettings,
        now: float,
    ) -> SimulatedVm:
        """Create the VM of a clone that finishes (or fails) ``clone_seconds`` from ``now``.

        :raises NotFound: ``node`` is not a node.
        :raises NodeUnavailable: the template's node or ``node`` is down.
        """
        if node not in settings.nodes:
            raise NotFound(f"node {node} does not exist")
        for needed in {template.node, node}:
            if not self.node_online(needed, settings):
                raise NodeUnavailable(f"node {needed} is unavailable")
        vm_id = str(self.next_id)
        self.next_id += 1
        if self.next_id >= FIRST_TEMPLATE_ID:
            self.next_id = FIRST_VM_ID  # wrap, like a real cluster reusing ids
        while str(self.next_id) in self.vms:
            self.next_id += 1
        vm = SimulatedVm(
            id=vm_id,
            name=name,
            node=node,
            template_id=template.id,
            os_type=template.os_type,
            tags=tags,
            description=description,
            clone_done_at=now + settings.timings.clone_seconds,
            clone_fails=fails,
        )
        self.vms[vm_id] = vm
        return vm

    def add_foreign_vm(
        self, *, name: str, node: str, running: bool, settings: SimulatorSettings, now: float
    ) -> SimulatedVm:
        """Create a VM deskpool did not make (no tags), as another tenant of a cluster would."""
        if node not in settings.nodes:
            raise NotFound(f"node {node} does not exist")
        vm_id = str(self.next_id)
        self.next_id += 1
        vm = SimulatedVm(
            id=vm_id,
            name=name,
            node=node,
            template_id="",
            os_type=OsType.LINUX,
            tags=(),
            description="",
            clone_done_at=now,
            powered_on_at=now if running else None,
        )
        self.vms[vm_id] = vm
        return vm

    def power_on(self, vm_id: str, settings: SimulatorSettings, now: float) -> None:
        """Power the VM on (no change when it runs).

        :raises DriverBusy: its clone is not finished.
        """
        vm = self.vm(vm_id, settings, now)
        if vm.cloning(now):
            raise DriverBusy(f"VM {vm_id} is still being cloned", vm_id=vm_id)
        if vm.powered_on_at is None:
            vm.powered_on_at = now
            vm.shutdown_requested_at = None

    def request_shutdown(self, vm_id: str, settings: SimulatorSettings, now: float) -> float | None:
        """Ask the guest to shut down; return when it will be off, ``None`` if it ignores us."""
        vm = self.vm(vm_id, settings, now)
        if vm.powered_on_at is None:
            return now
        if vm.shutdown_requested_at is None:
            vm.shutdown_requested_at = now
        if vm.matches(self.effective_faults(settings).ignores_shutdown):
            return None
        return vm.shutdown_requested_at + settings.timings.shutdown_seconds

    def power_off(self, vm_id: str, settings: SimulatorSettings, now: float) -> None:
        """Power the VM off at once."""
        vm = self.vm(vm_id, settings, now)
        vm.powered_on_at = None
        vm.shutdown_requested_at = None

    def reset(self, vm_id: str, settings: SimulatorSettings, now: float) -> None:
        """Reset a running VM: it boots again from ``now``."""
        vm = self.running_vm(vm_id, settings, now)
        vm.powered_on_at = now
        vm.shutdown_requested_at = None

    def delete(self, vm_id: str, settings: SimulatorSettings, now: float) -> None:
        """Remove the VM (powered off first, implicitly)."""
        self.vm(vm_id, settings, now)
        del self.vms[vm_id]
