"""The libvirt driver: desktops as QEMU/KVM domains cloned from template domains.

Connection:
- ``endpoint``: a libvirt URI (``qemu:///system``, ``qemu+ssh://root@kvm1/system``,
  ``qemu+tls://kvm1/system``, ``qemu+tcp://kvm1/system``); the ``hosts`` option lists the
  other hosts of the cluster. Each host is a node, named after the URI's host part (with the
  port when the URI gives one; ``localhost`` for a local URI).
- ``credentials`` (sealed): ``username``/``password`` for SASL, ``ssh_private_key`` for SSH,
  ``tls_client_cert``/``tls_client_key`` for TLS (with the connection's ``ca_cert``; TLS is
  verified unless ``tls_verify`` is off). See :mod:`deskpool_driver_libvirt.fields`.

Templates are domains carrying deskpool's metadata element with ``template="yes"``
(:mod:`deskpool_driver_libvirt.domain_xml`), their disks volumes of a libvirt storage pool.
A template's id is its domain's UUID, and so is a desktop's: libvirt never reuses one.

Clones (:mod:`deskpool_driver_libvirt.clones`): the new domain is defined first, tagged and
marked unfinished, then its volumes are made, then the mark is removed. While the clone runs,
its process keeps a heartbeat key (``clone:<domain uuid>``, :data:`CLONE_HEARTBEAT_TTL`) in the
shared state, so every process sees the domain as busy. An interrupted clone removes what it
made; one whose process died is removed by the first call that reads it (``get_vm``,
``start``, and so every destructive call), which answers :class:`VmNotFound`. Clones stay on
the template's host; a full clone goes to the pool's ``storage`` or ``default_storage_pool``.

Power: ``shutdown`` asks the guest agent (``guest-shutdown``), then presses the ACPI power
button when the agent does not answer or after half the guest's time, then destroys the domain
when ``guest_timeout`` has passed. ``delete`` destroys, deletes the volumes deskpool made, and
undefines the domain with its NVRAM, managed save and snapshot metadata.

Readiness: the guest agent (:mod:`deskpool_driver_libvirt.guest`); Windows is ready when
Sysprep's specialize and oobeSystem passes are done.

Desktops: VNC is the domain's own display: the listen address and port of its ``<graphics
type="vnc">`` (autoport), with its ``passwd`` as the password; a display listening on every
address is reached at the ``vnc_host`` option or the URI's host. RDP (a Windows guest always,
other guests when the pool prefers it) goes to the guest's first address from the agent
(``guest-network-get-interfaces``) at ``rdp_port``.

Hosts that are down: ``list_nodes`` shows them offline and ``list_templates`` leaves their
templates out, but ``list_owned_vms`` and a VM not found on the hosts that answer raise
:class:`NodeUnavailable`: a desktop on a host that is down has not vanished.

Events: each connection registers for domain lifecycle events; a domain that stops or is
undefined is reported at once to the platform through ``context.events`` (contract 0.3.1's
:class:`~deskpool_driver_api.VmEvent`) once the platform called ``watch_events``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid as uuid_module
from collections.abc import Callable
from typing import Any, TypeVar

import libvirt

from deskpool_driver_api import (
    AgentNotRunning,
    CloneRequest,
    ClusterConnection,
    ClusterInfo,
    DesktopEndpoint,
    DesktopProtocol,
    DriverBusy,
    DriverCapabilities,
    DriverContext,
    DriverError,
    GuestInfo,
    HypervisorDriver,
    Node,
    NodeUnavailable,
    NotFound,
    OperationFailed,
    OsType,
    PowerState,
    Template,
    VirtualMachine,
    VmEvent,
    VmEventKind,
    VmNotFound,
    VmNotRunning,
    remaining_time,
)
from deskpool_driver_libvirt import clones
from deskpool_driver_libvirt.domain_xml import DomainFacts, XmlProblem
from deskpool_driver_libvirt.fields import CONNECTION_FIELDS
from deskpool_driver_libvirt.guest import GuestAgent, Located, domain_power_state, power_state_of
from deskpool_driver_libvirt.hosts import Hosts, translate
from deskpool_driver_libvirt.settings import LibvirtSettings

T = TypeVar("T")

log = logging.getLogger(__name__)

_POLL = 0.2
#: Seconds a clone's heartbeat lives; its process renews it every third of that.
CLONE_HEARTBEAT_TTL = 15.0

_EVENTS = {
    libvirt.VIR_DOMAIN_EVENT_STARTED: VmEventKind.STARTED,
    libvirt.VIR_DOMAIN_EVENT_STOPPED: VmEventKind.STOPPED,
    libvirt.VIR_DOMAIN_EVENT_UNDEFINED: VmEventKind.REMOVED,
}


class LibvirtDriver(HypervisorDriver):
    """Desktops on libvirt hosts running QEMU/KVM (libvirt 8.0 or newer).

    :param connection: see the module documentation for endpoint, credentials and options.
    :param context: the shared state is not needed by this driver.
    :raises DriverConfigurationError: an endpoint that is not a QEMU URI, or invalid options.
    """

    name = "libvirt"
    title = "libvirt / KVM"
    endpoint_help = (
        "A libvirt URI: qemu:///system, qemu+ssh://root@kvm1/system or qemu+tls://kvm1/system."
    )
    connection_fields = CONNECTION_FIELDS
    capabilities = DriverCapabilities(
        linked_clone=True,
        full_clone=True,
        windows_readiness=True,
        guest_agent=True,
        desktop_protocols=(DesktopProtocol.VNC, DesktopProtocol.RDP),
        node_selection=False,
        storage_selection=True,
        vm_events=True,
    )
    default_timeout = 1800.0

    def __init__(self, connection: ClusterConnection, context: DriverContext) -> None:
        super().__init__(connection, context)
        settings = LibvirtSettings.of(connection)
        self.rdp_parameters = settings.rdp_parameters
        self.rdp_port = settings.rdp_port
        self.agent = GuestAgent(settings.agent_timeout)
        self.vnc_host = settings.vnc_host
        self.default_storage_pool = settings.default_storage_pool
        self.hosts = Hosts(settings.uris, settings.credentials, listener=self._lifecycle_event)
        self._loop: asyncio.AbstractEventLoop | None = None

    async def close(self) -> None:
        """Close the hosts' connections and remove the credentials' files."""
        await self.hosts.close()

    # ------------------------------------------------------------------ plumbing

    async def _run(self, call: Callable[[], T]) -> T:
        """Run a blocking libvirt ``call`` in a thread, remembering the event loop for events."""
        self._loop = asyncio.get_running_loop()
        return await self.hosts.run(call)

    def _lifecycle_event(self, node: str, vm_id: str, event: int, detail: int) -> None:
        """A domain lifecycle event (in libvirt's event thread): pass it to the platform."""
        sink = self.context.events
        loop = self._loop
        if sink is None or loop is None or loop.is_closed():
            return
        kind = _EVENTS.get(event)
        if kind is None:
            return
        happened = VmEvent(cluster_id=self.context.cluster_id, vm_id=vm_id, node=node, kind=kind)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(sink.vm_event, happened)

    def _guard(self, call: Callable[[], T], what: str, vm_id: str | None = None) -> T:
        """Run ``call`` (in a thread) with libvirt's errors translated."""
        try:
            return call()
        except libvirt.libvirtError as error:
            raise translate(error, what, vm_id=vm_id) from None
        except XmlProblem as error:
            raise OperationFailed(f"{what}: {error}", vm_id=vm_id) from None

    def _each_host(self, *, every: bool = False) -> list[tuple[str, str, Any]]:
        """``(uri, node, connection)`` of every reachable host (in a thread).

        :param every: raise unless every host is reached (an answer about all domains must
            not leave out those of a host that is down).
        :raises DriverError: when no host can be reached (the first host's error).
        :raises NodeUnavailable: ``every`` and a host cannot be reached.
        """
        reached = []
        first: DriverError | None = None
        down = []
        for node, uri in self.hosts.nodes.items():
            try:
                reached.append((uri, node, self.hosts.connection(uri)))
            except DriverError as error:
                first = first or error
                down.append(node)
        if not reached and first is not None:
            raise first
        if every and down:
            raise NodeUnavailable(f"libvirt host(s) {', '.join(down)} cannot be reached")
        return reached

    def _find(self, vm_id: str) -> Located:
        """The domain ``vm_id`` on whichever host has it (in a thread)."""
        try:
            uuid_module.UUID(vm_id)
        except ValueError:
            raise VmNotFound(f"no domain has the id {vm_id!r}", vm_id=vm_id) from None
        for uri, node, connection in self._each_host():
            try:
                return Located(uri, node, connection.lookupByUUIDString(vm_id))
            except libvirt.libvirtError as error:
                if error.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                    continue
                self._forget_if_broken(uri, error)
                raise translate(error, f"looking up domain {vm_id}", vm_id=vm_id) from None
        self._each_host(every=True)  # a host that is down may have it: not "not found"
        raise VmNotFound(f"no domain {vm_id} on any host", vm_id=vm_id)

    def _forget_if_broken(self, uri: str, error: libvirt.libvirtError) -> None:
        if error.get_error_code() in (
            libvirt.VIR_ERR_INVALID_CONN,
            libvirt.VIR_ERR_NO_CONNECT,
            libvirt.VIR_ERR_RPC,
            libvirt.VIR_ERR_SYSTEM_ERROR,
        ):
            self.hosts.forget(uri)

    def _vm(self, located: Located) -> tuple[VirtualMachine, bool]:
        """The VM of a domain, and whether its clone is unfinished."""
        facts = clones.domain_facts(located.domain)
        state, _reason = located.domain.state()
        vm = VirtualMachine(
            id=facts.uuid,
            name=facts.name,
            node=located.node,
            power_state=power_state_of(state),
            tags=facts.tags,
            busy=facts.cloning,
            template=facts.template,
        )
        return vm, facts.cloning

    @staticmethod
    def _heartbeat_key(vm_id: str) -> str:
        return f"clone:{vm_id}"

    async def _clone_alive(self, vm_id: str) -> bool:
        """Whether the process cloning ``vm_id`` still beats."""
        return await self.context.shared_state.get(self._heartbeat_key(vm_id)) is not None

    async def _settled(self, located: Located, vm: VirtualMachine, cloning: bool) -> VirtualMachine:
        """``vm``, unless its clone was abandoned: then it is removed (:class:`VmNotFound`)."""
        if not cloning or await self._clone_alive(vm.id):
            return vm
        log.warning("removing domain %s, whose clone was abandoned", vm.name)
        await self._run(
            lambda: self._guard(lambda: self._remove(located), f"removing {vm.id}", vm.id)
        )
        raise VmNotFound(f"domain {vm.id} was an abandoned clone, now removed", vm_id=vm.id)

    async def do_watch_events(self) -> None:
        """Open every host's connection: each registers for lifecycle events as it opens."""
        await self._run(lambda: self._guard(self._each_host, "watching the hosts' events"))

    # ------------------------------------------------------------------ cluster

    async def do_check_connection(self) -> ClusterInfo:
        def check() -> ClusterInfo:
            hosts = self._each_host()
            _uri, node, connection = hosts[0]
            library = connection.getLibVersion()
            hypervisor = connection.getVersion()
            return ClusterInfo(
                product="libvirt",
                version=f"{library // 1000000}.{library // 1000 % 1000}.{library % 1000}",
                cluster_name=node,
                details={
                    "hypervisor": connection.getType(),
                    "hypervisor_version": (
                        f"{hypervisor // 1000000}.{hypervisor // 1000 % 1000}.{hypervisor % 1000}"
                    ),
                    "hosts": str(len(self.hosts.nodes)),
                    "hosts_reached": str(len(hosts)),
                },
            )

        return await self._run(lambda: self._guard(check, "checking the connection"))

    async def do_list_nodes(self) -> list[Node]:
        def nodes() -> list[Node]:
            found = []
            reached = {node: connection for _uri, node, connection in self._each_host()}
            for node in self.hosts.nodes:
                connection = reached.get(node)
                if connection is None:
                    found.append(Node(name=node, online=False))
                    continue
                info = connection.getInfo()
                found.append(
                    Node(
                        name=node,
                        online=True,
                        cpu_count=int(info[2]),
                        memory_bytes=int(info[1]) * 1024 * 1024,
                    )
                )
            return found

        return await self._run(lambda: self._guard(nodes, "listing the hosts"))

    def _all_domains(self, *, every: bool = False) -> list[tuple[Located, DomainFacts]]:
        found = []
        for uri, node, connection in self._each_host(every=every):
            try:
                domains = connection.listAllDomains(0)
            except libvirt.libvirtError as error:
                self._forget_if_broken(uri, error)
                raise
            for domain in domains:
                try:
                    facts = clones.domain_facts(domain)
                except libvirt.libvirtError as error:
                    if error.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                        continue  # undefined meanwhile
                    raise
                found.append((Located(uri, node, domain), facts))
        return found

    async def do_list_templates(self) -> list[Template]:
        def templates() -> list[Template]:
            return [
                Template(
                    id=facts.uuid,
                    name=facts.name,
                    node=located.node,
                    os_type=facts.os_type,
                    description=facts.description,
                )
                for located, facts in self._all_domains()
                if facts.template
            ]

        return await self._run(lambda: self._guard(templates, "listing templates"))

    async def do_list_owned_vms(self) -> list[VirtualMachine]:
        def owned() -> list[VirtualMachine]:
            found = []
            for located, facts in self._all_domains(every=True):
                if facts.template or not self.ownership.is_owned(facts.tags):
                    continue
                try:
                    state, _reason = located.domain.state()
                except libvirt.libvirtError as error:
                    if error.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                        continue
                    raise
                found.append(
                    VirtualMachine(
                        id=facts.uuid,
                        name=facts.name,
                        node=located.node,
                        power_state=power_state_of(state),
                        tags=facts.tags,
                        busy=facts.cloning,
                    )
                )
            return found

        return await self._run(lambda: self._guard(owned, "listing deskpool's domains"))

    async def do_get_vm(self, vm_id: str) -> VirtualMachine:
        def read() -> tuple[Located, VirtualMachine, bool]:
            located = self._find(vm_id)
            return (located, *self._vm(located))

        located, vm, cloning = await self._run(lambda: self._guard(read, f"reading {vm_id}", vm_id))
        return await self._settled(located, vm, cloning)

    # ------------------------------------------------------------------ clone

    def _clone(self, request: CloneRequest, domain_uuid: str) -> VirtualMachine:
        try:
            template = self._find(request.template_id)
        except VmNotFound:
            raise NotFound(f"no template {request.template_id!r}") from None
        storage = request.storage or self.default_storage_pool
        connection = self.hosts.connection(template.uri)
        made = clones.clone_domain(connection, template, request, domain_uuid, storage)
        vm, _cloning = self._vm(made)
        return vm

    async def _beat(self, key: str) -> None:
        while True:
            await asyncio.sleep(CLONE_HEARTBEAT_TTL / 3)
            await self.context.shared_state.set(key, b"1", ttl=CLONE_HEARTBEAT_TTL)

    async def do_clone(self, request: CloneRequest) -> VirtualMachine:
        domain_uuid = str(uuid_module.uuid4())
        key = self._heartbeat_key(domain_uuid)
        state = self.context.shared_state
        await state.set(key, b"1", ttl=CLONE_HEARTBEAT_TTL)
        heartbeat = asyncio.ensure_future(self._beat(key))
        work = asyncio.ensure_future(
            self._run(
                lambda: self._guard(
                    lambda: self._clone(request, domain_uuid), f"cloning {request.name}"
                )
            )
        )
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            # The thread goes on; wait for it so the caller finds a finished, tagged domain.
            await asyncio.wait([work])
            if not work.cancelled():
                work.exception()  # retrieved: the caller was cancelled, not this clone
            raise
        finally:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
            await asyncio.shield(state.delete(key))

    # ------------------------------------------------------------------ power

    async def do_start(self, vm_id: str) -> None:
        vm = await self.do_get_vm(vm_id)  # removes an abandoned clone
        if vm.busy:
            raise DriverBusy(f"the clone {vm_id} has not finished", vm_id=vm_id)

        def start() -> None:
            located = self._find(vm_id)
            if domain_power_state(located) is PowerState.RUNNING:
                return
            if domain_power_state(located) is PowerState.PAUSED:
                located.domain.resume()
                return
            try:
                located.domain.create()
            except libvirt.libvirtError as error:
                if error.get_error_code() == libvirt.VIR_ERR_OPERATION_INVALID and (
                    domain_power_state(located) is PowerState.RUNNING
                ):
                    return  # started meanwhile
                raise

        await self._run(lambda: self._guard(start, f"starting {vm_id}", vm_id))

    async def _wait_stopped(self, located: Located, within: float) -> bool:
        give_up = time.monotonic() + within
        while True:
            state = await self._run(
                lambda: self._guard(lambda: domain_power_state(located), "state")
            )
            if state is PowerState.STOPPED:
                return True
            if time.monotonic() >= give_up:
                return False
            await asyncio.sleep(_POLL)

    async def do_shutdown(
        self, vm: VirtualMachine, *, graceful: bool, guest_timeout: float
    ) -> None:
        located = await self._run(lambda: self._guard(lambda: self._find(vm.id), "find", vm.id))
        if graceful and guest_timeout > 0:
            budget = min(guest_timeout, remaining_time())
            started = time.monotonic()

            def ask(flags: int) -> bool:
                try:
                    located.domain.shutdownFlags(flags)
                except libvirt.libvirtError as error:
                    if error.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                        raise
                    return False
                return True

            by_agent = await self._run(
                lambda: self._guard(
                    lambda: ask(libvirt.VIR_DOMAIN_SHUTDOWN_GUEST_AGENT), "shutdown", vm.id
                )
            )
            if by_agent and await self._wait_stopped(located, budget / 2):
                return
            await self._run(
                lambda: self._guard(
                    lambda: ask(libvirt.VIR_DOMAIN_SHUTDOWN_ACPI_POWER_BTN), "shutdown", vm.id
                )
            )
            left = budget - (time.monotonic() - started)
            if left > 0 and await self._wait_stopped(located, left):
                return
        await self._run(
            lambda: self._guard(lambda: clones.destroy_domain(located), "power off", vm.id)
        )

    async def do_stop(self, vm: VirtualMachine) -> None:
        def stop() -> None:
            clones.destroy_domain(self._find(vm.id))

        await self._run(lambda: self._guard(stop, f"powering off {vm.id}", vm.id))

    async def do_reset(self, vm: VirtualMachine) -> None:
        def reset() -> None:
            located = self._find(vm.id)
            if domain_power_state(located) is not PowerState.RUNNING:
                raise VmNotRunning(f"domain {vm.id} does not run", vm_id=vm.id)
            located.domain.reset(0)

        await self._run(lambda: self._guard(reset, f"resetting {vm.id}", vm.id))

    def _remove(self, located: Located) -> None:
        """Destroy, delete deskpool's volumes, undefine (in a thread; idempotent)."""
        clones.remove_domain(self.hosts.connection(located.uri), located)

    async def do_delete(self, vm: VirtualMachine) -> None:
        await self._run(
            lambda: self._guard(lambda: self._remove(self._find(vm.id)), f"deleting {vm.id}", vm.id)
        )

    async def do_power_state(self, vm_id: str) -> PowerState:
        return await self._run(
            lambda: self._guard(
                lambda: domain_power_state(self._find(vm_id)), f"state of {vm_id}", vm_id
            )
        )

    # ------------------------------------------------------------------ guest agent

    def _running(self, vm_id: str) -> Located:
        located = self._find(vm_id)
        if domain_power_state(located) is not PowerState.RUNNING:
            raise VmNotRunning(f"domain {vm_id} does not run", vm_id=vm_id)
        return located

    async def do_agent_ping(self, vm_id: str) -> bool:
        return await self._run(
            lambda: self._guard(
                lambda: self.agent.answers(self._running(vm_id)),
                f"pinging the agent of {vm_id}",
                vm_id,
            )
        )

    async def do_guest_info(self, vm_id: str) -> GuestInfo:
        return await self._run(
            lambda: self._guard(
                lambda: self.agent.info(self._running(vm_id)), f"asking {vm_id}'s agent", vm_id
            )
        )

    async def do_windows_ready(self, vm_id: str) -> bool:
        return await self._run(
            lambda: self._guard(
                lambda: self.agent.windows_ready(self._running(vm_id)),
                f"Windows readiness of {vm_id}",
                vm_id,
            )
        )

    # ------------------------------------------------------------------ desktop

    def _endpoint(self, vm_id: str, protocol: DesktopProtocol | None) -> DesktopEndpoint:
        located = self._running(vm_id)
        wanted = protocol or DesktopProtocol.VNC
        try:
            _name, os_type = self.agent.os(located)
        except AgentNotRunning:
            os_type = OsType.OTHER
        if os_type is OsType.WINDOWS or wanted is DesktopProtocol.RDP:
            addresses = self.agent.addresses(located)
            if not addresses:
                raise AgentNotRunning(f"the guest {vm_id} reports no address yet", vm_id=vm_id)
            return DesktopEndpoint(
                protocol=DesktopProtocol.RDP,
                host=addresses[0],
                port=self.rdp_port,
                parameters=self.rdp_parameters,
            )
        facts = clones.domain_facts(located.domain, secure=True)
        if facts.vnc is None or facts.vnc.port is None:
            raise OperationFailed(f"domain {vm_id} has no VNC display", vm_id=vm_id)
        host = facts.vnc.listen
        if not host or host in ("0.0.0.0", "::"):
            host = self.vnc_host or (located.node if located.node != "localhost" else "127.0.0.1")
        credentials = {"password": facts.vnc.password} if facts.vnc.password else {}
        return DesktopEndpoint(
            protocol=DesktopProtocol.VNC, host=host, port=facts.vnc.port, credentials=credentials
        )

    async def do_desktop_endpoint(
        self, vm_id: str, protocol: DesktopProtocol | None
    ) -> DesktopEndpoint:
        return await self._run(
            lambda: self._guard(
                lambda: self._endpoint(vm_id, protocol), f"the desktop of {vm_id}", vm_id
            )
        )


__all__ = ["LibvirtDriver"]
