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

Clones: the new domain is *defined first*, with its ownership tags, the names of the volumes it
is about to get and a mark of an unfinished clone in its metadata; then each volume is made (a
qcow2 backed by the template's volume for a linked clone, ``virStorageVolCreateXMLFrom`` for a
full one), then the mark is removed. While the clone runs, its process keeps a heartbeat key
(``clone:<domain uuid>``, :data:`CLONE_HEARTBEAT_TTL`) in the shared state, so every process
sees the domain as busy. Whenever the clone is interrupted (a cancelled call, a failed copy),
what it made is removed; if its process died (a killed worker), what exists is a tagged domain
naming every volume deskpool made for it, marked unfinished, whose heartbeat expires: the first
call that reads it (``get_vm``, ``start``, and so every destructive call) removes it and its
volumes and answers :class:`VmNotFound`, as for a clone that failed.

Clones stay on the template's host; a full clone goes to the storage pool the pool names
(``storage``) or the ``default_storage_pool`` option.

Power: ``shutdown`` asks the guest agent (``guest-shutdown``), then presses the ACPI power
button when the agent does not answer or after half the guest's time, then destroys the domain
when ``guest_timeout`` has passed. ``delete`` destroys, deletes the volumes deskpool made, and
undefines the domain with its NVRAM, managed save and snapshot metadata.

Readiness: the guest agent (``guest-ping``; ``guest-get-osinfo`` tells Windows, ``id``
``mswindows``). Windows is ready when the agent reads ``ImageState=IMAGE_STATE_COMPLETE`` in
``State.ini`` (:data:`WINDOWS_STATE_FILE`), which Windows writes when Sysprep's specialize
and oobeSystem passes are done.

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
import base64
import contextlib
import json
import logging
import time
import uuid as uuid_module
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import libvirt
import libvirt_qemu

from deskpool_driver_api import (
    AgentNotRunning,
    CloneRequest,
    ClusterConnection,
    ClusterInfo,
    DesktopEndpoint,
    DesktopProtocol,
    DriverBusy,
    DriverCapabilities,
    DriverConfigurationError,
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
    connection_problems,
    remaining_time,
)
from deskpool_driver_libvirt import domain_xml
from deskpool_driver_libvirt.domain_xml import DomainFacts, VolumeRef, XmlProblem
from deskpool_driver_libvirt.fields import CONNECTION_FIELDS
from deskpool_driver_libvirt.hosts import (
    Credentials,
    Hosts,
    node_name,
    options_hosts,
    translate,
)

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Where Windows records its setup state (read through the guest agent).
WINDOWS_STATE_FILE = "C:\\Windows\\Setup\\State\\State.ini"
#: The Guacamole parameters of RDP connections unless the ``rdp_parameters`` option says.
DEFAULT_RDP_PARAMETERS = {"security": "any", "ignore-cert": "true"}
_SUPPORTED_SCHEMES = ("qemu", "qemu+ssh", "qemu+libssh", "qemu+libssh2", "qemu+tls", "qemu+tcp")
_POLL = 0.2
#: Seconds a clone's heartbeat lives; its process renews it every third of that.
CLONE_HEARTBEAT_TTL = 15.0

_EVENTS = {
    libvirt.VIR_DOMAIN_EVENT_STARTED: VmEventKind.STARTED,
    libvirt.VIR_DOMAIN_EVENT_STOPPED: VmEventKind.STOPPED,
    libvirt.VIR_DOMAIN_EVENT_UNDEFINED: VmEventKind.REMOVED,
}

_POWER = {
    libvirt.VIR_DOMAIN_RUNNING: PowerState.RUNNING,
    libvirt.VIR_DOMAIN_BLOCKED: PowerState.RUNNING,
    libvirt.VIR_DOMAIN_SHUTDOWN: PowerState.RUNNING,
    libvirt.VIR_DOMAIN_PAUSED: PowerState.PAUSED,
    libvirt.VIR_DOMAIN_PMSUSPENDED: PowerState.PAUSED,
    libvirt.VIR_DOMAIN_SHUTOFF: PowerState.STOPPED,
    libvirt.VIR_DOMAIN_CRASHED: PowerState.STOPPED,
}


def power_state_of(state: int) -> PowerState:
    """The contract's power state for libvirt's domain state."""
    return _POWER.get(state, PowerState.UNKNOWN)


def guest_addresses(interfaces: list[dict[str, Any]]) -> tuple[str, ...]:
    """Addresses from ``guest-network-get-interfaces``: IPv4 first, no loopback/link-local."""
    ipv4: list[str] = []
    ipv6: list[str] = []
    for interface in interfaces:
        for address in interface.get("ip-addresses") or ():
            text = str(address.get("ip-address", ""))
            if not text:
                continue
            if address.get("ip-address-type") == "ipv4":
                if not text.startswith(("127.", "169.254.")):
                    ipv4.append(text)
            elif not (text == "::1" or text.lower().startswith("fe80")):
                ipv6.append(text)
    return tuple(dict.fromkeys([*ipv4, *ipv6]))


def windows_setup_complete(state_ini: str) -> bool:
    """Whether Windows' ``State.ini`` says setup is complete."""
    for line in state_ini.splitlines():
        key, _, value = line.partition("=")
        if key.strip().lower() == "imagestate":
            return value.strip().upper() == "IMAGE_STATE_COMPLETE"
    return False


@dataclass(frozen=True)
class Located:
    """A domain found on a host: the host's URI, its node name and the domain object."""

    uri: str
    node: str
    domain: Any


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
        problems = connection_problems(
            CONNECTION_FIELDS, connection.credentials, connection.options
        )
        if problems:
            raise DriverConfigurationError(
                "; ".join(f"{problem.pointer}: {problem.message}" for problem in problems)
            )
        options = dict(connection.options)
        uris = options_hosts(connection.endpoint, options)
        for uri in uris:
            scheme, _, rest = uri.partition("://")
            if scheme not in _SUPPORTED_SCHEMES or not rest.rstrip("/").endswith(
                ("system", "session")
            ):
                raise DriverConfigurationError(
                    f"{uri!r} is not a QEMU libvirt URI (qemu:///system, "
                    "qemu+ssh://user@host/system, qemu+tls://host/system)"
                )
        names = [node_name(uri) for uri in uris]
        if len(set(names)) < len(names):
            raise DriverConfigurationError(
                f"two hosts have the same node name ({', '.join(names)}): one URI per host"
            )
        rdp_parameters = options.get("rdp_parameters", DEFAULT_RDP_PARAMETERS)
        if not isinstance(rdp_parameters, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in rdp_parameters.items()
        ):
            raise DriverConfigurationError("rdp_parameters must map parameter names to strings")
        self.rdp_parameters: dict[str, str] = dict(rdp_parameters)
        self.rdp_port = int(options.get("rdp_port", 3389))
        self.agent_timeout = int(options.get("agent_timeout", 5))
        self.vnc_host: str | None = options.get("vnc_host")
        self.default_storage_pool: str | None = options.get("default_storage_pool")
        credentials = connection.credentials
        self.hosts = Hosts(
            uris,
            Credentials(
                username=credentials.get("username"),
                password=credentials.get("password"),
                ssh_private_key=credentials.get("ssh_private_key"),
                ssh_known_hosts=options.get("ssh_known_hosts"),
                tls_client_cert=credentials.get("tls_client_cert"),
                tls_client_key=credentials.get("tls_client_key"),
                ca_cert=connection.ca_cert,
                tls_verify=connection.tls_verify,
            ),
            listener=self._lifecycle_event,
        )
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

    @staticmethod
    def _facts(domain: Any, *, inactive: bool = False, secure: bool = False) -> DomainFacts:
        flags = (libvirt.VIR_DOMAIN_XML_INACTIVE if inactive else 0) | (
            libvirt.VIR_DOMAIN_XML_SECURE if secure else 0
        )
        return domain_xml.read_domain(domain.XMLDesc(flags))

    def _vm(self, located: Located) -> tuple[VirtualMachine, bool]:
        """The VM of a domain, and whether its clone is unfinished."""
        facts = self._facts(located.domain)
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
                    facts = self._facts(domain)
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

    def _template(self, template_id: str) -> tuple[Located, DomainFacts, str]:
        try:
            located = self._find(template_id)
        except VmNotFound:
            raise NotFound(f"no template {template_id!r}") from None
        xml = located.domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
        facts = domain_xml.read_domain(xml)
        if not facts.template:
            raise NotFound(f"domain {template_id} is not marked as a deskpool template")
        return located, facts, xml

    @staticmethod
    def _source_volume(connection: Any, disk: domain_xml.DiskSource) -> Any:
        if disk.kind == "volume" and disk.pool and disk.volume:
            return connection.storagePoolLookupByName(disk.pool).storageVolLookupByName(disk.volume)
        if disk.path:
            try:
                return connection.storageVolLookupByPath(disk.path)
            except libvirt.libvirtError as error:
                if error.get_error_code() != libvirt.VIR_ERR_NO_STORAGE_VOL:
                    raise
        raise OperationFailed(
            f"the template's disk {disk.target} is not a volume of a libvirt storage pool"
        )

    def _clone(self, request: CloneRequest, domain_uuid: str) -> VirtualMachine:
        located, facts, xml = self._template(request.template_id)
        connection = self.hosts.connection(located.uri)
        suffix = uuid_module.uuid4().hex[:8]
        plan: list[tuple[domain_xml.DiskSource, Any, Any, VolumeRef]] = []
        target_pool_name = (
            None if request.linked else (request.storage or self.default_storage_pool)
        )
        for disk in facts.disks:
            source = self._source_volume(connection, disk)
            source_pool = source.storagePoolLookupByVolume()
            if target_pool_name is not None:
                try:
                    pool = connection.storagePoolLookupByName(target_pool_name)
                except libvirt.libvirtError as error:
                    if error.get_error_code() == libvirt.VIR_ERR_NO_STORAGE_POOL:
                        raise NotFound(f"no storage pool {target_pool_name!r}") from None
                    raise
            else:
                pool = source_pool
            name = f"{request.name}-{suffix}-{disk.target}.qcow2"
            plan.append((disk, source, pool, VolumeRef(pool=pool.name(), name=name)))
        volumes = {disk.target: ref for disk, _source, _pool, ref in plan}
        new_xml = domain_xml.clone_xml(
            xml,
            name=request.name,
            description=request.description,
            tags=request.tags,
            volumes=volumes,
            cloning=True,
            uuid=domain_uuid,
        )
        # Defined first, tagged and naming its volumes: an interrupted clone leaves only this.
        domain = connection.defineXML(new_xml)
        try:
            for _disk, source, pool, ref in plan:
                capacity = int(source.info()[1])
                if request.linked:
                    volume = domain_xml.volume_xml(
                        ref.name,
                        capacity,
                        backing_path=source.path(),
                        backing_format=domain_xml.volume_format(source.XMLDesc(0)),
                    )
                    pool.createXML(volume, 0)
                else:
                    pool.createXMLFrom(domain_xml.volume_xml(ref.name, capacity), source, 0)
            finished = domain_xml.finished_clone_xml(
                domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
            )
            domain = connection.defineXML(finished)
        except BaseException:
            log.warning("clone %s of %s failed; removing what it made", request.name, facts.name)
            self._remove(Located(located.uri, located.node, domain))
            raise
        vm, _cloning = self._vm(Located(located.uri, located.node, domain))
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

    def _state(self, located: Located) -> PowerState:
        state, _reason = located.domain.state()
        return power_state_of(state)

    async def do_start(self, vm_id: str) -> None:
        vm = await self.do_get_vm(vm_id)  # removes an abandoned clone
        if vm.busy:
            raise DriverBusy(f"the clone {vm_id} has not finished", vm_id=vm_id)

        def start() -> None:
            located = self._find(vm_id)
            if self._state(located) is PowerState.RUNNING:
                return
            if self._state(located) is PowerState.PAUSED:
                located.domain.resume()
                return
            try:
                located.domain.create()
            except libvirt.libvirtError as error:
                if error.get_error_code() == libvirt.VIR_ERR_OPERATION_INVALID and (
                    self._state(located) is PowerState.RUNNING
                ):
                    return  # started meanwhile
                raise

        await self._run(lambda: self._guard(start, f"starting {vm_id}", vm_id))

    def _destroy(self, located: Located) -> None:
        try:
            located.domain.destroy()
        except libvirt.libvirtError as error:
            if error.get_error_code() == libvirt.VIR_ERR_OPERATION_INVALID:
                return  # not running
            raise

    async def _wait_stopped(self, located: Located, within: float) -> bool:
        give_up = time.monotonic() + within
        while True:
            state = await self._run(lambda: self._guard(lambda: self._state(located), "state"))
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
        await self._run(lambda: self._guard(lambda: self._destroy(located), "power off", vm.id))

    async def do_stop(self, vm: VirtualMachine) -> None:
        def stop() -> None:
            self._destroy(self._find(vm.id))

        await self._run(lambda: self._guard(stop, f"powering off {vm.id}", vm.id))

    async def do_reset(self, vm: VirtualMachine) -> None:
        def reset() -> None:
            located = self._find(vm.id)
            if self._state(located) is not PowerState.RUNNING:
                raise VmNotRunning(f"domain {vm.id} does not run", vm_id=vm.id)
            located.domain.reset(0)

        await self._run(lambda: self._guard(reset, f"resetting {vm.id}", vm.id))

    def _remove(self, located: Located) -> None:
        """Destroy, delete deskpool's volumes, undefine (in a thread; idempotent)."""
        self._destroy(located)
        facts = self._facts(located.domain, inactive=True)
        connection = self.hosts.connection(located.uri)
        for ref in facts.volumes:
            try:
                volume = connection.storagePoolLookupByName(ref.pool).storageVolLookupByName(
                    ref.name
                )
                volume.delete(0)
            except libvirt.libvirtError as error:
                if error.get_error_code() not in (
                    libvirt.VIR_ERR_NO_STORAGE_VOL,
                    libvirt.VIR_ERR_NO_STORAGE_POOL,
                ):
                    raise
        flags = (
            libvirt.VIR_DOMAIN_UNDEFINE_NVRAM
            | libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE
            | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
        )
        located.domain.undefineFlags(flags)

    async def do_delete(self, vm: VirtualMachine) -> None:
        await self._run(
            lambda: self._guard(lambda: self._remove(self._find(vm.id)), f"deleting {vm.id}", vm.id)
        )

    async def do_power_state(self, vm_id: str) -> PowerState:
        return await self._run(
            lambda: self._guard(lambda: self._state(self._find(vm_id)), f"state of {vm_id}", vm_id)
        )

    # ------------------------------------------------------------------ guest agent

    def _running(self, vm_id: str) -> Located:
        located = self._find(vm_id)
        if self._state(located) is not PowerState.RUNNING:
            raise VmNotRunning(f"domain {vm_id} does not run", vm_id=vm_id)
        return located

    def _agent(self, located: Located, command: str, **arguments: Any) -> Any:
        """The answer of one guest agent command (in a thread)."""
        message: dict[str, Any] = {"execute": command}
        if arguments:
            message["arguments"] = arguments
        try:
            answer = libvirt_qemu.qemuAgentCommand(
                located.domain, json.dumps(message), self.agent_timeout, 0
            )
        except libvirt.libvirtError as error:
            code = error.get_error_code()
            if code == libvirt.VIR_ERR_OPERATION_INVALID and self._state(located) is not (
                PowerState.RUNNING
            ):
                raise VmNotRunning("the domain does not run") from None
            if code in (libvirt.VIR_ERR_NO_DOMAIN,):
                raise
            raise AgentNotRunning(
                f"the guest agent did not answer {command}: {error.get_error_message()}"
            ) from None
        return json.loads(answer).get("return")

    async def do_agent_ping(self, vm_id: str) -> bool:
        def ping() -> bool:
            located = self._running(vm_id)
            try:
                self._agent(located, "guest-ping")
            except AgentNotRunning:
                return False
            return True

        return await self._run(lambda: self._guard(ping, f"pinging the agent of {vm_id}", vm_id))

    def _os(self, located: Located) -> tuple[str | None, OsType]:
        info = self._agent(located, "guest-get-osinfo") or {}
        os_id = str(info.get("id", "")).lower()
        name = info.get("pretty-name") or info.get("name")
        if os_id == "mswindows":
            return name, OsType.WINDOWS
        return name, OsType.LINUX if os_id or info.get("kernel-release") else OsType.OTHER

    def _guest_info(self, vm_id: str) -> GuestInfo:
        located = self._running(vm_id)
        interfaces = self._agent(located, "guest-network-get-interfaces") or []
        os_name, os_type = self._os(located)
        try:
            hostname = (self._agent(located, "guest-get-host-name") or {}).get("host-name")
        except AgentNotRunning:
            hostname = None
        return GuestInfo(
            addresses=guest_addresses(interfaces),
            hostname=hostname,
            os_name=os_name,
            os_type=os_type,
        )

    async def do_guest_info(self, vm_id: str) -> GuestInfo:
        return await self._run(
            lambda: self._guard(lambda: self._guest_info(vm_id), f"asking {vm_id}'s agent", vm_id)
        )

    def _read_guest_file(self, located: Located, path: str) -> str:
        handle = self._agent(located, "guest-file-open", path=path, mode="r")
        try:
            chunks = []
            while True:
                read = self._agent(located, "guest-file-read", handle=handle, count=65536)
                chunks.append(base64.b64decode(read.get("buf-b64", "")))
                if read.get("eof") or not read.get("count"):
                    break
            return b"".join(chunks).decode("utf-8", "replace").replace("\x00", "")
        finally:
            self._agent(located, "guest-file-close", handle=handle)

    async def do_windows_ready(self, vm_id: str) -> bool:
        def ready() -> bool:
            located = self._running(vm_id)
            try:
                _name, os_type = self._os(located)
                if os_type is not OsType.WINDOWS:
                    return True
                return windows_setup_complete(self._read_guest_file(located, WINDOWS_STATE_FILE))
            except AgentNotRunning:
                return False

        return await self._run(lambda: self._guard(ready, f"Windows readiness of {vm_id}", vm_id))

    # ------------------------------------------------------------------ desktop

    def _endpoint(self, vm_id: str, protocol: DesktopProtocol | None) -> DesktopEndpoint:
        located = self._running(vm_id)
        wanted = protocol or DesktopProtocol.VNC
        try:
            _name, os_type = self._os(located)
        except AgentNotRunning:
            os_type = OsType.OTHER
        if os_type is OsType.WINDOWS or wanted is DesktopProtocol.RDP:
            interfaces = self._agent(located, "guest-network-get-interfaces") or []
            addresses = guest_addresses(interfaces)
            if not addresses:
                raise AgentNotRunning(f"the guest {vm_id} reports no address yet", vm_id=vm_id)
            return DesktopEndpoint(
                protocol=DesktopProtocol.RDP,
                host=addresses[0],
                port=self.rdp_port,
                parameters=self.rdp_parameters,
            )
        facts = self._facts(located.domain, secure=True)
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


__all__ = ["LibvirtDriver", "guest_addresses", "power_state_of", "windows_setup_complete"]
