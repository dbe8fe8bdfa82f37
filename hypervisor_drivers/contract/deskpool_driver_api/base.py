"""The hypervisor driver contract: :class:`HypervisorDriver` and what it is built with.

The platform calls the public coroutine methods of :class:`HypervisorDriver` (``clone``,
``start``, ``delete``...). Each is final: it checks arguments and capabilities, runs the call
under its deadline through :meth:`HypervisorDriver._call` (the one place every call passes,
where it is timed and reported to the :class:`DriverCallObserver`), re-checks ownership before
anything destructive, and delegates to the matching abstract ``do_*`` method that a driver
implements (:mod:`deskpool_driver_api.implementation`, whose docstrings are the contract a
driver author follows, in the manner of nova's ``virt/driver.py``).

Time: every public call takes ``deadline``, an absolute :func:`time.monotonic` value (use
:func:`deadline_after` to turn a timeout into one); ``None`` means ``default_timeout`` seconds
from now. When it passes, the call is cancelled and :class:`DriverTimeout` is raised. Every
call is also cancellable the ordinary asyncio way; a ``do_*`` method must let
:class:`asyncio.CancelledError` propagate and may use :func:`remaining_time` to size its own
waits (a guest shutdown timeout, a task poll).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from types import TracebackType
from typing import Self, TypeVar, final

from deskpool_driver_api.context import deadline_after, run_call
from deskpool_driver_api.errors import (
    DriverBusy,
    DriverError,
    Unsupported,
    VmNotRunning,
)
from deskpool_driver_api.implementation import DriverImplementation
from deskpool_driver_api.model import (
    CloneRequest,
    ClusterInfo,
    DesktopEndpoint,
    DesktopProtocol,
    GuestInfo,
    Node,
    PowerState,
    Template,
    VirtualMachine,
)

__all__ = ["HypervisorDriver"]

T = TypeVar("T")


class HypervisorDriver(DriverImplementation):
    """Base class of every hypervisor driver: the public, final methods the platform calls.

    Each checks its arguments and the driver's capabilities, runs under its deadline through
    :meth:`_call`, re-checks ownership before anything destructive, and delegates to the
    ``do_*`` method of :class:`~deskpool_driver_api.implementation.DriverImplementation` that
    the driver implements (see there for the class declarations and the ``do_*`` contract).
    A driver subclasses this class, not :class:`DriverImplementation`.
    """

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ the one call path

    @final
    async def _call(
        self, operation: str, deadline: float | None, body: Callable[[], Awaitable[T]]
    ) -> T:
        """Run ``body`` as the driver call ``operation`` under ``deadline``.

        This is the single place every public call passes (see :func:`run_call`): the deadline
        applies and is visible to :func:`remaining_time`, an expired one becomes
        :class:`DriverTimeout`, and the call's duration and outcome go to the observer.
        """
        at = deadline if deadline is not None else deadline_after(self.default_timeout)
        return await run_call(self.name, self.context, operation, at, body)

    def _require(self, capable: bool, what: str) -> None:
        if not capable:
            raise Unsupported(f"the {self.name} driver does not support {what}")

    def _with_desktop_id(self, vm: VirtualMachine) -> VirtualMachine:
        """``vm`` with :attr:`VirtualMachine.desktop_id` read from its tags."""
        desktop_id = self.ownership.desktop_id_of(vm.tags) if not vm.template else None
        return vm if vm.desktop_id == desktop_id else replace(vm, desktop_id=desktop_id)

    async def _owned_vm(self, vm_id: str, desktop_id: str | None) -> VirtualMachine:
        """Re-read the VM and refuse unless it is deskpool's (and ``desktop_id``'s)."""
        vm = await self.do_get_vm(vm_id)
        self.ownership.check(vm, desktop_id)
        if vm.busy:
            raise DriverBusy(f"VM {vm.id} is busy with another operation", vm_id=vm.id)
        return vm

    # ------------------------------------------------------------------ public operations

    @final
    async def check_connection(self, *, deadline: float | None = None) -> ClusterInfo:
        """Reach the cluster with the connection's credentials and describe it.

        :raises AuthenticationFailed: the credentials were rejected.
        :raises ClusterUnreachable: the endpoint does not answer.
        :raises TlsVerificationFailed: the certificate did not verify.
        """
        return await self._call("check_connection", deadline, self.do_check_connection)

    @final
    async def list_nodes(self, *, deadline: float | None = None) -> list[Node]:
        """Every node of the cluster, online or not."""
        return await self._call("list_nodes", deadline, self.do_list_nodes)

    @final
    async def list_templates(self, *, deadline: float | None = None) -> list[Template]:
        """Every template desktops can be cloned from."""
        return await self._call("list_templates", deadline, self.do_list_templates)

    @final
    async def list_owned_vms(self, *, deadline: float | None = None) -> list[VirtualMachine]:
        """Every VM carrying deskpool's owner tag (templates excluded).

        May lag a few seconds behind clones and deletions on hypervisors whose inventory is
        refreshed periodically (Proxmox VE's cluster resources).
        """

        async def body() -> list[VirtualMachine]:
            return [self._with_desktop_id(vm) for vm in await self.do_list_owned_vms()]

        return await self._call("list_owned_vms", deadline, body)

    @final
    async def get_vm(self, vm_id: str, *, deadline: float | None = None) -> VirtualMachine:
        """The VM ``vm_id`` as the hypervisor reports it now, tags included.

        :raises VmNotFound: it does not exist.
        """

        async def body() -> VirtualMachine:
            return self._with_desktop_id(await self.do_get_vm(vm_id))

        return await self._call("get_vm", deadline, body)

    @final
    async def clone(
        self,
        template_id: str,
        *,
        name: str,
        desktop_id: str,
        linked: bool = True,
        node: str | None = None,
        storage: str | None = None,
        deadline: float | None = None,
    ) -> VirtualMachine:
        """Clone ``template_id`` into a new, stopped VM for ``desktop_id``; return when done.

        The new VM carries deskpool's owner tag and the desktop tag from the moment the
        driver can set them. If the call is cancelled or times out, the clone may still
        complete on the hypervisor; it then still carries the tags, so the reconciler finds
        it through :meth:`list_owned_vms`.

        :param template_id: a :attr:`Template.id`.
        :param name: the VM's name (a DNS label is safest).
        :param desktop_id: the desktop it is for (lower-case letters, digits, ``_+.-``).
        :param linked: share the template's disks; ``False`` copies them.
        :param node: the node to place it on (``capabilities.node_selection``).
        :param storage: storage for a full clone's disks (``capabilities.storage_selection``);
            linked clones always stay on the template's storage, so it is ignored for them.
        :raises Unsupported: the clone kind, node or storage choice is not supported.
        :raises NotFound: the template, node or storage does not exist.
        :raises OperationFailed: the hypervisor ran the clone and it failed.
        :raises ValueError: ``name`` is empty or ``desktop_id`` cannot be a tag.
        """
        if not name:
            raise ValueError("a clone needs a name")
        tags = self.ownership.tags_for(desktop_id)
        if linked:
            self._require(self.capabilities.linked_clone, "linked clones")
        else:
            self._require(self.capabilities.full_clone, "full clones")
        if node is not None:
            self._require(self.capabilities.node_selection, "choosing the node of a clone")
        if storage is not None and not linked:
            self._require(self.capabilities.storage_selection, "choosing the storage of a clone")
        request = CloneRequest(
            template_id=template_id,
            name=name,
            desktop_id=desktop_id,
            tags=tags,
            linked=linked,
            node=node,
            storage=None if linked else storage,
            description=f"deskpool desktop {desktop_id}",
        )

        async def body() -> VirtualMachine:
            vm = await self.do_clone(request)
            if not self.ownership.is_owned(vm.tags) or (
                self.ownership.desktop_id_of(vm.tags) != desktop_id
            ):
                raise DriverError(
                    f"the {self.name} driver returned clone {vm.id} without deskpool's "
                    "ownership tags (a driver bug)",
                    vm_id=vm.id,
                )
            return self._with_desktop_id(vm)

        return await self._call("clone", deadline, body)

    @final
    async def start(self, vm_id: str, *, deadline: float | None = None) -> None:
        """Power the VM on; return once the hypervisor reports it running. Idempotent.

        :raises VmNotFound: it does not exist.
        :raises NodeUnavailable: its node is down.
        :raises DriverBusy: a clone or another operation still holds it.
        """
        await self._call("start", deadline, lambda: self.do_start(vm_id))

    @final
    async def shutdown(
        self,
        vm_id: str,
        *,
        graceful: bool = True,
        guest_timeout: float = 60.0,
        desktop_id: str | None = None,
        deadline: float | None = None,
    ) -> None:
        """Shut the VM down; return once it is stopped. Idempotent.

        With ``graceful`` the guest is asked to shut down (ACPI or guest agent) and given
        ``guest_timeout`` seconds before it is powered off; without, it is powered off at once.
        Either way the VM is stopped when this returns (so ``deadline`` must leave room for
        ``guest_timeout``).

        :param desktop_id: when given, the VM must also carry this desktop's tag.
        :raises NotOwned: the VM is not deskpool's (or not ``desktop_id``'s).
        """
        if guest_timeout < 0:
            raise ValueError("guest_timeout must not be negative")

        async def body() -> None:
            vm = await self._owned_vm(vm_id, desktop_id)
            if vm.power_state is not PowerState.STOPPED:
                await self.do_shutdown(vm, graceful=graceful, guest_timeout=guest_timeout)

        await self._call("shutdown", deadline, body)

    @final
    async def stop(
        self, vm_id: str, *, desktop_id: str | None = None, deadline: float | None = None
    ) -> None:
        """Power the VM off at once (no guest shutdown). Idempotent.

        :raises NotOwned: the VM is not deskpool's (or not ``desktop_id``'s).
        """

        async def body() -> None:
            vm = await self._owned_vm(vm_id, desktop_id)
            if vm.power_state is not PowerState.STOPPED:
                await self.do_stop(vm)

        await self._call("stop", deadline, body)

    @final
    async def reset(
        self, vm_id: str, *, desktop_id: str | None = None, deadline: float | None = None
    ) -> None:
        """Hard-reset a running VM (like pressing the reset button).

        :raises NotOwned: the VM is not deskpool's (or not ``desktop_id``'s).
        :raises VmNotRunning: it is not running.
        """

        async def body() -> None:
            vm = await self._owned_vm(vm_id, desktop_id)
            if vm.power_state is not PowerState.RUNNING:
                raise VmNotRunning(f"VM {vm.id} is {vm.power_state.value}", vm_id=vm.id)
            await self.do_reset(vm)

        await self._call("reset", deadline, body)

    @final
    async def delete(
        self, vm_id: str, *, desktop_id: str | None = None, deadline: float | None = None
    ) -> None:
        """Delete the VM and its disks; a running VM is powered off first.

        :raises NotOwned: the VM is not deskpool's (or not ``desktop_id``'s); nothing is done.
        :raises VmNotFound: it does not exist (callers cleaning up may treat this as done).
        """

        async def body() -> None:
            vm = await self._owned_vm(vm_id, desktop_id)
            await self.do_delete(vm)

        await self._call("delete", deadline, body)

    @final
    async def power_state(self, vm_id: str, *, deadline: float | None = None) -> PowerState:
        """The VM's power state now.

        :raises VmNotFound: it does not exist.
        """
        return await self._call("power_state", deadline, lambda: self.do_power_state(vm_id))

    @final
    async def agent_ping(self, vm_id: str, *, deadline: float | None = None) -> bool:
        """Whether the guest agent answers now (``False`` while the guest boots).

        :raises VmNotRunning: the VM is not running, so waiting is pointless.
        :raises Unsupported: the driver has no guest agent support.
        """
        self._require(self.capabilities.guest_agent, "a guest agent")
        return await self._call("agent_ping", deadline, lambda: self.do_agent_ping(vm_id))

    @final
    async def guest_info(self, vm_id: str, *, deadline: float | None = None) -> GuestInfo:
        """Addresses and OS of the guest, from its agent.

        :raises AgentNotRunning: the agent does not answer (yet).
        :raises VmNotRunning: the VM is not running.
        """
        self._require(self.capabilities.guest_agent, "a guest agent")
        return await self._call("guest_info", deadline, lambda: self.do_guest_info(vm_id))

    @final
    async def windows_ready(self, vm_id: str, *, deadline: float | None = None) -> bool:
        """Whether Windows in the guest has finished Sysprep/OOBE (``False`` until then).

        For a guest that is not Windows this is ``True`` as soon as its agent answers.

        :raises VmNotRunning: the VM is not running, so waiting is pointless.
        :raises Unsupported: the driver cannot tell (``capabilities.windows_readiness``).
        """
        self._require(self.capabilities.windows_readiness, "Windows readiness checks")
        return await self._call("windows_ready", deadline, lambda: self.do_windows_ready(vm_id))

    @final
    async def desktop_endpoint(
        self,
        vm_id: str,
        protocol: DesktopProtocol | str | None = None,
        *,
        deadline: float | None = None,
    ) -> DesktopEndpoint:
        """How the desktop daemon reaches the VM's desktop: protocol, address, port, settings.

        :param protocol: the protocol the pool asks for, when the guest offers a choice; the
            answer's protocol may differ when it does not (a Windows guest is shown with RDP,
            whatever a pool of Linux desktops would prefer). ``None``: the driver's default.
        :returns: an endpoint whose protocol is one of ``capabilities.desktop_protocols``.
        :raises Unsupported: ``protocol`` is not one of ``capabilities.desktop_protocols``.
        :raises VmNotRunning: the VM is not running.
        :raises AgentNotRunning: the desktop's address is not known yet (the guest boots).
        """
        chosen = None
        if protocol is not None:
            try:
                chosen = DesktopProtocol(protocol)
            except ValueError:
                raise Unsupported(f"unknown desktop protocol {protocol!r}") from None
            self._require(chosen in self.capabilities.desktop_protocols, f"{chosen.value} desktops")

        async def body() -> DesktopEndpoint:
            endpoint = await self.do_desktop_endpoint(vm_id, chosen)
            if endpoint.protocol not in self.capabilities.desktop_protocols:
                raise DriverError(
                    f"the {self.name} driver answered a {endpoint.protocol.value} desktop, which "
                    "its capabilities do not declare (a driver bug)",
                    vm_id=vm_id,
                )
            return endpoint

        return await self._call("desktop_endpoint", deadline, body)

    @final
    async def watch_events(self, *, deadline: float | None = None) -> None:
        """Start reporting VM events to ``context.events`` (``capabilities.vm_events``).

        Connects to the hypervisor if needed and returns once events flow; they keep flowing
        (the driver reconnecting as needed) until :meth:`close`. Idempotent.

        :raises Unsupported: the driver does not report events.
        :raises ClusterUnreachable: the hypervisor cannot be reached now (call again later).
        """
        self._require(self.capabilities.vm_events, "VM events")
        await self._call("watch_events", deadline, self.do_watch_events)
