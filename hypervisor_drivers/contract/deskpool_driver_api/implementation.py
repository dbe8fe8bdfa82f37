"""What a hypervisor driver implements: the ``do_*`` methods and the class declarations.

:class:`DriverImplementation` is the half of the contract a driver author writes against: its
class attributes (name, capabilities, connection fields) and one ``do_*`` coroutine per
operation, whose docstrings are the contract, in the manner of nova's ``virt/driver.py``. The
platform never calls them directly: :class:`~deskpool_driver_api.HypervisorDriver` (in
:mod:`deskpool_driver_api.base`) adds the public methods that check arguments, capabilities
and ownership, run each call under its deadline and then delegate here.
"""

from __future__ import annotations

import abc
from typing import ClassVar

from deskpool_driver_api.context import DriverContext
from deskpool_driver_api.errors import Unsupported
from deskpool_driver_api.fields import ConnectionField
from deskpool_driver_api.model import (
    CloneRequest,
    ClusterConnection,
    ClusterInfo,
    DesktopEndpoint,
    DesktopProtocol,
    DriverCapabilities,
    GuestInfo,
    Node,
    PowerState,
    Template,
    VirtualMachine,
)
from deskpool_driver_api.ownership import OwnershipTags

__all__ = ["DriverImplementation"]


class DriverImplementation(abc.ABC):
    """Base class of every hypervisor driver.

    A driver class is registered under a short name through the
    ``deskpool_register_hypervisor_drivers`` hook and instantiated once per cluster
    connection, with the connection and a :class:`DriverContext`. Instantiation must not do
    I/O; connect lazily on the first call and release everything in :meth:`close`.

    A subclass sets :attr:`name`, :attr:`capabilities` and :attr:`connection_fields` (the
    credentials and options it reads; ``docs/drivers.md`` explains the declaration) and
    implements every ``do_*`` method. It raises only
    :class:`~deskpool_driver_api.errors.DriverError` subclasses for expected failures (mapping
    its hypervisor's errors onto them) and lets :class:`asyncio.CancelledError` through.

    :param connection: how to reach the cluster.
    :param context: shared state, owner tag, clock and observer from the platform.
    """

    #: The name the driver is registered under (``proxmox``).
    name: ClassVar[str] = ""
    #: What the driver can do.
    capabilities: ClassVar[DriverCapabilities] = DriverCapabilities()
    #: What the console calls the driver (``Proxmox VE``); :attr:`name` when empty.
    title: ClassVar[str] = ""
    #: What the endpoint is, shown under the console's endpoint input.
    endpoint_help: ClassVar[str] = ""
    #: The credentials and options the driver reads, each declared once (contract 0.3). The
    #: platform refuses a connection that does not match before the driver sees it; the
    #: driver's constructor must refuse the same (the conformance kit checks it).
    connection_fields: ClassVar[tuple[ConnectionField, ...]] = ()
    #: Seconds a call may take when the caller gives no deadline.
    default_timeout: ClassVar[float] = 600.0

    def __init__(self, connection: ClusterConnection, context: DriverContext) -> None:
        self.connection = connection
        self.context = context
        self.ownership = OwnershipTags(context.owner_tag)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} cluster={self.context.cluster_id!r}>"

    async def close(self) -> None:
        """Release what the driver holds (HTTP sessions, background tasks). Idempotent."""
        return None

    async def do_watch_events(self) -> None:
        """Subscribe to the hypervisor's VM events (``capabilities.vm_events``); idempotent.

        Report each to ``self.context.events`` (when it is not ``None``) as a
        :class:`~deskpool_driver_api.VmEvent`, calling ``vm_event`` on the event loop this
        coroutine runs on, never from another thread directly.
        """
        raise Unsupported(f"the {self.name} driver does not report VM events")

    @abc.abstractmethod
    async def do_check_connection(self) -> ClusterInfo:
        """Reach the cluster, authenticate, and describe it.

        Called when an administrator saves or tests a cluster connection, and by readiness
        checks. Must make at least one authenticated request.

        :returns: the product, its version and the cluster's name.
        :raises AuthenticationFailed: credentials rejected (401/403 or equivalent).
        :raises ClusterUnreachable: nothing answers at the endpoint.
        :raises TlsVerificationFailed: the certificate does not verify or match the pin.
        """

    @abc.abstractmethod
    async def do_list_nodes(self) -> list[Node]:
        """Return every node of the cluster, including offline ones (``online=False``)."""

    @abc.abstractmethod
    async def do_list_templates(self) -> list[Template]:
        """Return every template a desktop can be cloned from, with its OS family.

        The OS family decides whether provisioning waits for Windows readiness, so report
        :attr:`OsType.WINDOWS` for every Windows template.
        """

    @abc.abstractmethod
    async def do_list_owned_vms(self) -> list[VirtualMachine]:
        """Return every VM carrying the owner tag (``self.ownership.owner_tag``).

        Exclude templates and VMs without the owner tag. VMs on unreachable nodes are
        included with :attr:`PowerState.UNKNOWN` when the hypervisor still lists them.
        """

    @abc.abstractmethod
    async def do_get_vm(self, vm_id: str) -> VirtualMachine:
        """Read one VM, its tags from the authoritative source (not a cache).

        The base class calls this before every destructive operation to re-check
        ownership, so the tags must be current: a VM id deleted and reused a second ago must
        show the new VM's tags.

        :raises VmNotFound: no VM has this id.
        :raises NodeUnavailable: its node cannot be reached.
        """

    @abc.abstractmethod
    async def do_clone(self, request: CloneRequest) -> VirtualMachine:
        """Clone ``request.template_id`` and return the new, stopped VM once the copy is done.

        The new VM must carry every tag of ``request.tags`` (and keep the template's other
        tags or not, as the hypervisor does). If the hypervisor cannot tag at creation,
        tag right after, and make sure a cancelled or interrupted call still ends with a
        tagged VM (or none): an untagged clone is a leak nobody will clean up. Store
        ``request.description`` where administrators see it, when the hypervisor has such a
        field.

        Capabilities were checked by the caller; ``request.storage`` is only set for full
        clones, ``request.node`` only when node selection is supported.

        :raises NotFound: the template, node or storage does not exist.
        :raises NodeUnavailable: the target node is down.
        :raises OperationFailed: the clone ran and failed (no VM is left behind, or it is
            tagged).
        """

    @abc.abstractmethod
    async def do_start(self, vm_id: str) -> None:
        """Power the VM on and return when the hypervisor reports it running.

        Starting a running VM is not an error.

        :raises VmNotFound: no VM has this id.
        :raises DriverBusy: a lock (an unfinished clone) holds it.
        """

    @abc.abstractmethod
    async def do_shutdown(
        self, vm: VirtualMachine, *, graceful: bool, guest_timeout: float
    ) -> None:
        """Stop ``vm`` (owned, not stopped), gracefully within ``guest_timeout`` if ``graceful``.

        With ``graceful``, ask the guest (ACPI power button or guest agent), wait up to
        ``guest_timeout`` seconds, then power off. Without, power off at once. Return when the
        hypervisor reports the VM stopped.
        """

    @abc.abstractmethod
    async def do_stop(self, vm: VirtualMachine) -> None:
        """Power ``vm`` (owned, not stopped) off at once and return when it is stopped."""

    @abc.abstractmethod
    async def do_reset(self, vm: VirtualMachine) -> None:
        """Hard-reset ``vm`` (owned, running); return when the hypervisor accepted it."""

    @abc.abstractmethod
    async def do_delete(self, vm: VirtualMachine) -> None:
        """Delete ``vm`` (owned) and its disks; return when it is gone.

        Power it off first if it runs. Must not leave disks behind.

        :raises VmNotFound: it vanished meanwhile.
        """

    @abc.abstractmethod
    async def do_power_state(self, vm_id: str) -> PowerState:
        """Return the VM's power state.

        :raises VmNotFound: no VM has this id.
        """

    async def do_agent_ping(self, vm_id: str) -> bool:
        """Return whether the guest agent answers (needs ``capabilities.guest_agent``).

        ``False`` while the agent is silent; raise :class:`VmNotRunning` if the VM is not
        running at all.
        """
        raise Unsupported(f"the {self.name} driver does not support a guest agent")

    async def do_guest_info(self, vm_id: str) -> GuestInfo:
        """Return the guest's addresses and OS, from its agent (``capabilities.guest_agent``).

        :raises AgentNotRunning: the agent does not answer.
        :raises VmNotRunning: the VM is not running.
        """
        raise Unsupported(f"the {self.name} driver does not support a guest agent")

    async def do_windows_ready(self, vm_id: str) -> bool:
        """Return whether Windows Sysprep/OOBE has finished (``capabilities.windows_readiness``).

        ``False`` while the agent is silent or setup is still running; ``True`` for a guest
        that is not Windows once its agent answers. Document how readiness is detected.

        :raises VmNotRunning: the VM is not running.
        """
        raise Unsupported(f"the {self.name} driver cannot tell when Windows is ready")

    @abc.abstractmethod
    async def do_desktop_endpoint(
        self, vm_id: str, protocol: DesktopProtocol | None
    ) -> DesktopEndpoint:
        """Return how the desktop daemon reaches the VM's desktop.

        ``protocol`` is the pool's preference (one of ``capabilities.desktop_protocols``) or
        ``None`` for the driver's default. Answer it when the guest can be shown with it;
        otherwise answer the protocol the guest offers (Windows: RDP), which must be one of
        ``capabilities.desktop_protocols``. The host is what the desktop daemon connects to:
        usually the guest's address from its agent. Put secrets (a one-time password) in
        ``credentials``, other settings in ``parameters``, both by their Guacamole names.

        :raises VmNotFound: no VM has this id.
        :raises VmNotRunning: the VM is not running.
        :raises AgentNotRunning: the guest's address is not known yet.
        """
