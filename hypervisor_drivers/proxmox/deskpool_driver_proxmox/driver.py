"""The Proxmox VE driver: desktops as QEMU VMs cloned from templates, through the REST API.

Connection:
- ``endpoint``: ``pve1.example.com`` or ``https://pve1.example.com:8006`` (any node of the
  cluster; requests for other nodes are proxied by Proxmox VE itself);
- ``credentials``: ``token_id`` (``deskpool@pve!deskpool``) and ``token_secret``;
- TLS: verified by default; ``ca_cert`` (PEM) or ``fingerprint`` (SHA-256 of the node's
  certificate) for a self-signed cluster.

Options: declared with the token in :mod:`deskpool_driver_proxmox.fields` (timeouts, task
polling, desktop ports and Guacamole parameters per protocol, the abandoned clone grace).

Desktops: the desktop daemon connects to the guest's first address from the guest agent
(``network-get-interfaces``, IPv4 first). A Windows guest (the agent's ``get-osinfo`` says
``mswindows``, or the VM's ``ostype`` is a Windows one) is shown with RDP; any other guest
with the protocol the pool asks for, RDP or VNC (the guest runs that server), RDP when the pool
does not say. The user signs in on the desktop: the endpoint carries no credentials.

The API token needs, on ``/vms`` and the storages used: ``VM.Audit``, ``VM.Clone``,
``VM.Allocate``, ``VM.Config.Options``, ``VM.PowerMgmt``, the guest agent's privileges
(Proxmox VE 9: ``VM.GuestAgent.Audit``, and ``VM.GuestAgent.FileRead`` for Windows
readiness; before 9: ``VM.Monitor``, which 9 removed), ``Datastore.AllocateSpace``,
``Datastore.Audit``, and ``Sys.Audit`` on ``/`` for the cluster name.

Ownership: Proxmox VE cannot tag a clone while creating it, so the clone is made with a
description naming the desktop, then tagged (``tags``, semicolon separated) as soon as the
clone task ends. If the caller is cancelled in between (or the task cannot be followed for a
while), a background task follows the *task* (its UPID) and tags the new VM when the task has
succeeded, wherever the VM is: a clone to another node keeps its configuration on the source
node, locked, until the task ends and only then moves to the target (``qemu-server``'s
``clone_vm``), so it is looked for on both. No clone is left untagged, however long it takes
within ``abandoned_clone_grace``.

Windows readiness: the guest agent's ``get-osinfo`` tells Windows (``id: mswindows``) from
other systems; for Windows, the agent reads ``State.ini`` (:data:`WINDOWS_STATE_FILE`) and the
desktop is ready when it says ``ImageState=IMAGE_STATE_COMPLETE`` (Windows writes that state
when the specialize and oobeSystem passes are done, see Microsoft's "Windows Setup States").
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import quote

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
    DriverConflict,
    DriverContext,
    DriverError,
    GuestInfo,
    HypervisorDriver,
    Node,
    NodeUnavailable,
    NotFound,
    OperationFailed,
    OsType,
    PermissionDenied,
    PowerState,
    Template,
    VirtualMachine,
    VmNotFound,
)
from deskpool_driver_proxmox.client import (
    ProxmoxClient,
    api_base_url,
    ssl_setting,
    task_succeeded,
    token_header,
)
from deskpool_driver_proxmox.fields import CONNECTION_FIELDS
from deskpool_driver_proxmox.translate import (
    ABANDONED_CLONE_MISSES,
    CLONE_ID_ATTEMPTS,
    DEFAULT_DESKTOP_PARAMETERS,
    DEFAULT_DESKTOP_PORTS,
    KNOWN_OPTIONS,
    OTHER_OS_IDS,
    WINDOWS_STATE_FILE,
    PendingClone,
    guest_addresses,
    os_type_of,
    parse_tags,
    per_protocol,
    positive_seconds,
    power_state_of,
    windows_setup_complete,
)

T = TypeVar("T")

log = logging.getLogger(__name__)


class ProxmoxDriver(HypervisorDriver):
    """Desktops on a Proxmox VE cluster (7.3 or newer, for VM tags).

    :param connection: see the module documentation for endpoint, credentials and options.
    :param context: the shared state is not needed by this driver.
    :raises DriverConfigurationError: invalid endpoint, credentials, TLS settings or options.
    """

    name = "proxmox"
    title = "Proxmox VE"
    endpoint_help = "Any node of the cluster: pve1.example.com or https://pve1.example.com:8006."
    connection_fields = CONNECTION_FIELDS
    capabilities = DriverCapabilities(
        linked_clone=True,
        full_clone=True,
        windows_readiness=True,
        guest_agent=True,
        desktop_protocols=(DesktopProtocol.RDP, DesktopProtocol.VNC),
        node_selection=True,
        storage_selection=True,
    )
    default_timeout = 1800.0

    def __init__(self, connection: ClusterConnection, context: DriverContext) -> None:
        super().__init__(connection, context)
        options = dict(connection.options)
        unknown = sorted(set(options) - KNOWN_OPTIONS)
        if unknown:
            raise DriverConfigurationError(
                f"unknown Proxmox VE options {unknown} (known: {sorted(KNOWN_OPTIONS)})"
            )
        self.desktop_ports = dict(DEFAULT_DESKTOP_PORTS)
        for protocol, port in per_protocol(options, "desktop_ports").items():
            if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
                raise DriverConfigurationError(f"desktop_ports: {protocol} port must be 1..65535")
            self.desktop_ports[protocol] = port
        self.desktop_parameters = {
            key: dict(value) for key, value in DEFAULT_DESKTOP_PARAMETERS.items()
        }
        for protocol, parameters in per_protocol(options, "desktop_parameters").items():
            if not isinstance(parameters, dict) or not all(
                isinstance(key, str) and isinstance(value, str) for key, value in parameters.items()
            ):
                raise DriverConfigurationError(
                    f"desktop_parameters: {protocol} must map parameter names to strings"
                )
            self.desktop_parameters[protocol] = dict(parameters)
        self.abandoned_clone_grace = positive_seconds(options, "abandoned_clone_grace", 3600.0)
        self.client = ProxmoxClient(
            api_base_url(connection.endpoint),
            token_header(connection.credentials),
            ssl=ssl_setting(connection),
            request_timeout=positive_seconds(options, "request_timeout", 30.0),
            poll_interval=positive_seconds(options, "task_poll_interval", 1.0),
        )
        self._node_of: dict[str, str] = {}
        self._background: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        """Wait briefly for background clone finishers, then close the HTTP session."""
        if self._background:
            _, pending = await asyncio.wait(self._background, timeout=10.0)
            for task in pending:
                log.warning(
                    "giving up watching an abandoned clone at shutdown: %s", task.get_name()
                )
                task.cancel()
        await self.client.close()

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _vm_path(node: str, vm_id: str, rest: str = "") -> str:
        return f"/nodes/{quote(node, safe='')}/qemu/{quote(vm_id, safe='')}{rest}"

    async def _resources(self) -> list[dict[str, Any]]:
        data = await self.client.get("/cluster/resources", {"type": "vm"})
        items = [item for item in data or [] if item.get("type") == "qemu"]
        for item in items:
            self._node_of[str(item["vmid"])] = str(item["node"])
        return items

    async def _node(self, vm_id: str) -> str:
        node = self._node_of.get(vm_id)
        if node is not None:
            return node
        for item in await self._resources():
            if str(item["vmid"]) == vm_id:
                return str(item["node"])
        raise VmNotFound(f"VM {vm_id} does not exist", vm_id=vm_id)

    async def _on_vm(self, vm_id: str, call: Callable[[str], Awaitable[T]]) -> T:
        """Run ``call(node)`` for the VM's node, looking the node up again if the VM moved."""
        cached = vm_id in self._node_of
        node = await self._node(vm_id)
        try:
            return await call(node)
        except VmNotFound:
            self._node_of.pop(vm_id, None)
            if not cached:
                raise
            fresh = await self._node(vm_id)
            if fresh == node:
                raise
            return await call(fresh)

    async def _run_task(self, upid: Any, vm_id: str | None = None) -> None:
        if isinstance(upid, str) and upid.startswith("UPID:"):
            await self.client.wait_task(upid, vm_id=vm_id)

    async def _read_vm(self, node: str, vm_id: str) -> VirtualMachine:
        config, status = await asyncio.gather(
            self.client.get(self._vm_path(node, vm_id, "/config"), vm_id=vm_id),
            self.client.get(self._vm_path(node, vm_id, "/status/current"), vm_id=vm_id),
        )
        config = config or {}
        status = status or {}
        self._node_of[vm_id] = node
        return VirtualMachine(
            id=vm_id,
            name=str(config.get("name") or f"VM {vm_id}"),
            node=node,
            power_state=power_state_of(status),
            tags=parse_tags(config.get("tags")),
            busy=bool(config.get("lock")),
            template=bool(int(config.get("template") or 0)),
        )

    async def _agent(self, vm_id: str, command: str, params: dict[str, str] | None = None) -> Any:
        async def call(node: str) -> Any:
            path = self._vm_path(node, vm_id, f"/agent/{command}")
            if command == "ping":
                return await self.client.post(path, vm_id=vm_id)
            return await self.client.get(path, params, vm_id=vm_id)

        return await self._on_vm(vm_id, call)

    async def _osinfo(self, vm_id: str) -> dict[str, Any] | None:
        """The agent's ``get-osinfo`` result, or ``None`` when the agent lacks the command."""
        try:
            data = await self._agent(vm_id, "get-osinfo")
        except OperationFailed as error:
            log.debug("get-osinfo failed for VM %s: %s", vm_id, error.detail)
            return None
        result = (data or {}).get("result")
        return result if isinstance(result, dict) else None

    # ------------------------------------------------------------------ the contract

    async def do_check_connection(self) -> ClusterInfo:
        """``GET /version``, then the cluster name from ``/cluster/status`` when allowed."""
        version = await self.client.get("/version") or {}
        cluster_name = None
        try:
            for item in await self.client.get("/cluster/status") or []:
                if item.get("type") == "cluster":
                    cluster_name = str(item.get("name"))
        except PermissionDenied:
            log.info("the API token may not read /cluster/status; no cluster name")
        return ClusterInfo(
            product="Proxmox VE",
            version=str(version.get("version", "?")),
            cluster_name=cluster_name,
            details={key: str(version[key]) for key in ("release", "repoid") if key in version},
        )

    async def do_list_nodes(self) -> list[Node]:
        """``GET /nodes``."""
        return [
            Node(
                name=str(item["node"]),
                online=item.get("status") == "online",
                cpu_count=int(item["maxcpu"]) if item.get("maxcpu") is not None else None,
                memory_bytes=int(item["maxmem"]) if item.get("maxmem") is not None else None,
            )
            for item in await self.client.get("/nodes") or []
        ]

    async def do_list_templates(self) -> list[Template]:
        """Templates from ``/cluster/resources``, their ``ostype`` from each config."""
        templates = [item for item in await self._resources() if int(item.get("template") or 0)]

        async def describe(item: dict[str, Any]) -> Template | None:
            vm_id, node = str(item["vmid"]), str(item["node"])
            try:
                config = await self.client.get(self._vm_path(node, vm_id, "/config"), vm_id=vm_id)
            except (NodeUnavailable, VmNotFound) as error:
                log.warning("template %s skipped: %s", vm_id, error.detail)
                return None
            return Template(
                id=vm_id,
                name=str(config.get("name") or item.get("name") or vm_id),
                node=node,
                os_type=os_type_of(config.get("ostype")),
                description=str(config.get("description") or ""),
            )

        found = await asyncio.gather(*(describe(item) for item in templates))
        return [template for template in found if template is not None]

    async def do_list_owned_vms(self) -> list[VirtualMachine]:
        """VMs from ``/cluster/resources`` whose tags include the owner tag."""
        owned = []
        for item in await self._resources():
            tags = parse_tags(item.get("tags"))
            if int(item.get("template") or 0) or not self.ownership.is_owned(tags):
                continue
            owned.append(
                VirtualMachine(
                    id=str(item["vmid"]),
                    name=str(item.get("name") or ""),
                    node=str(item["node"]),
                    power_state=power_state_of(item),
                    tags=tags,
                    busy=bool(item.get("lock")),
                )
            )
        return sorted(owned, key=lambda vm: int(vm.id))

    async def do_get_vm(self, vm_id: str) -> VirtualMachine:
        """The VM's config (tags, lock, template flag) and current status, from its node."""
        return await self._on_vm(vm_id, lambda node: self._read_vm(node, vm_id))

    async def do_clone(self, request: CloneRequest) -> VirtualMachine:
        """``/cluster/nextid``, ``POST .../clone``, wait for the task, then set the tags."""
        template = next(
            (
                item
                for item in await self._resources()
                if str(item["vmid"]) == request.template_id and int(item.get("template") or 0)
            ),
            None,
        )
        if template is None:
            raise NotFound(f"template {request.template_id} does not exist")
        source = str(template["node"])
        target = request.node or source
        params: dict[str, str | int | bool | None] = {
            "name": request.name,
            "full": not request.linked,
            "description": request.description,
            "target": target if target != source else None,
            "storage": request.storage,
        }
        new_id = ""
        upid: Any = None
        try:
            for _ in range(CLONE_ID_ATTEMPTS):
                new_id = str(await self.client.get("/cluster/nextid"))
                try:
                    upid = await self.client.post(
                        self._vm_path(source, request.template_id, "/clone"),
                        {**params, "newid": new_id},
                    )
                except DriverConflict as error:
                    if "already exists" not in error.detail:
                        raise
                    log.info("VM id %s was taken meanwhile; asking for another", new_id)
                    continue
                break
            else:
                raise DriverBusy("could not allocate a VM id: every id offered was taken")
            # Until the task ends the new config lives on the source node (see the module
            # documentation); only then is it on the target.
            await self._run_task(upid, new_id)
            self._node_of[new_id] = target
            await self._tag(target, new_id, request.desktop_id)
        except (asyncio.CancelledError, DriverError) as error:
            # Cancelled, or the clone could not be followed for a while: it may go on, so it
            # is followed in the background (a clone whose task failed left no VM behind).
            retry = not isinstance(error, DriverError) or error.retryable
            if new_id and retry:
                task = upid if isinstance(upid, str) and upid.startswith("UPID:") else None
                self._finish_in_background(PendingClone(new_id, source, target, request, task))
            raise
        return await self._read_vm(target, new_id)

    async def _tag(self, node: str, vm_id: str, desktop_id: str) -> None:
        config = await self.client.get(self._vm_path(node, vm_id, "/config"), vm_id=vm_id)
        tags = self.ownership.merged(parse_tags((config or {}).get("tags")), desktop_id)
        await self.client.put(
            self._vm_path(node, vm_id, "/config"), {"tags": ";".join(tags)}, vm_id=vm_id
        )

    def _finish_in_background(self, clone: PendingClone) -> None:
        task = asyncio.get_running_loop().create_task(
            self._finish_abandoned_clone(clone),
            name=f"deskpool-proxmox-tag-clone-{clone.vm_id}",
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _finish_abandoned_clone(self, clone: PendingClone) -> None:
        """Tag a clone whose caller went away, once its task is done, wherever the VM is.

        With the clone's task id, the task says when the clone is over and whether it
        succeeded; without one (the caller went away before Proxmox VE answered the POST), the
        VM's configuration is watched on both nodes until it is unlocked. The VM is ours when
        its description is the one this clone set: an id reused by someone else meanwhile
        would not carry it. Transient failures (a node or the API briefly away) are retried
        until ``abandoned_clone_grace`` has passed.
        """
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.abandoned_clone_grace
        missing = 0
        while loop.time() < give_up:
            try:
                if clone.upid is not None:
                    status = await self.client.task_status(clone.upid)
                    if status.get("status") != "stopped":
                        await asyncio.sleep(self.client.poll_interval)
                        continue
                    exit_status = str(status.get("exitstatus", ""))
                    if not task_succeeded(exit_status):
                        log.info(
                            "clone of VM %s failed (%s): nothing to tag", clone.vm_id, exit_status
                        )
                        return
                found = await self._find_clone(clone)
                if found is None:
                    missing += 1
                    if clone.upid is not None or missing >= ABANDONED_CLONE_MISSES:
                        return  # never started, or failed and cleaned up, or deleted since
                else:
                    node, config = found
                    if not config.get("lock"):
                        if str(config.get("description", "")).strip() == clone.request.description:
                            await self._tag(node, clone.vm_id, clone.request.desktop_id)
                            self._node_of[clone.vm_id] = node
                            log.info(
                                "tagged VM %s on %s, cloned by a cancelled call", clone.vm_id, node
                            )
                        return
            except DriverError as error:
                if not error.retryable:
                    log.warning(
                        "could not tag VM %s after a cancelled clone: %s", clone.vm_id, error.detail
                    )
                    return
                log.info("watching the clone of VM %s: %s (retrying)", clone.vm_id, error.detail)
            await asyncio.sleep(self.client.poll_interval)
        log.warning("VM %s: clone still running after the grace period, left untagged", clone.vm_id)

    async def _find_clone(self, clone: PendingClone) -> tuple[str, dict[str, Any]] | None:
        """The node and config of a clone: on the target once done, on the source before."""
        for node in dict.fromkeys((clone.target, clone.source)):
            try:
                config = await self.client.get(
                    self._vm_path(node, clone.vm_id, "/config"), vm_id=clone.vm_id
                )
            except VmNotFound:
                continue
            return node, dict(config or {})
        return None

    async def do_start(self, vm_id: str) -> None:
        """``POST .../status/start`` unless it runs; "already running" counts as success."""

        async def start(node: str) -> None:
            status = await self.client.get(
                self._vm_path(node, vm_id, "/status/current"), vm_id=vm_id
            )
            if power_state_of(status or {}) is PowerState.RUNNING:
                return
            try:
                upid = await self.client.post(
                    self._vm_path(node, vm_id, "/status/start"), vm_id=vm_id
                )
                await self._run_task(upid, vm_id)
            except DriverConflict as error:
                if "already running" not in error.detail:
                    raise

        await self._on_vm(vm_id, start)

    async def do_shutdown(
        self, vm: VirtualMachine, *, graceful: bool, guest_timeout: float
    ) -> None:
        """``status/shutdown`` with ``timeout`` and ``forceStop=1``, or ``status/stop``."""
        if graceful:
            upid = await self.client.post(
                self._vm_path(vm.node, vm.id, "/status/shutdown"),
                {"timeout": math.ceil(guest_timeout), "forceStop": True},
                vm_id=vm.id,
            )
        else:
            upid = await self.client.post(
                self._vm_path(vm.node, vm.id, "/status/stop"), vm_id=vm.id
            )
        await self._run_task(upid, vm.id)

    async def do_stop(self, vm: VirtualMachine) -> None:
        """``POST .../status/stop``."""
        upid = await self.client.post(self._vm_path(vm.node, vm.id, "/status/stop"), vm_id=vm.id)
        await self._run_task(upid, vm.id)

    async def do_reset(self, vm: VirtualMachine) -> None:
        """``POST .../status/reset``."""
        upid = await self.client.post(self._vm_path(vm.node, vm.id, "/status/reset"), vm_id=vm.id)
        await self._run_task(upid, vm.id)

    async def do_delete(self, vm: VirtualMachine) -> None:
        """Stop it if needed, then ``DELETE`` with ``purge`` and unreferenced disks."""
        if vm.power_state in (PowerState.RUNNING, PowerState.PAUSED):
            await self.do_stop(vm)
        upid = await self.client.delete(
            self._vm_path(vm.node, vm.id),
            {"purge": True, "destroy-unreferenced-disks": True},
            vm_id=vm.id,
        )
        await self._run_task(upid, vm.id)
        self._node_of.pop(vm.id, None)

    async def do_power_state(self, vm_id: str) -> PowerState:
        """``GET .../status/current``."""

        async def read(node: str) -> PowerState:
            status = await self.client.get(
                self._vm_path(node, vm_id, "/status/current"), vm_id=vm_id
            )
            return power_state_of(status or {})

        return await self._on_vm(vm_id, read)

    async def do_agent_ping(self, vm_id: str) -> bool:
        """``POST .../agent/ping``; an agent that is not running yet is ``False``."""
        try:
            await self._agent(vm_id, "ping")
        except AgentNotRunning:
            return False
        return True

    async def do_guest_info(self, vm_id: str) -> GuestInfo:
        """``network-get-interfaces``, ``get-osinfo`` and ``get-host-name`` of the agent."""
        interfaces = await self._agent(vm_id, "network-get-interfaces")
        osinfo = await self._osinfo(vm_id)
        hostname = None
        try:
            name = await self._agent(vm_id, "get-host-name")
            hostname = ((name or {}).get("result") or {}).get("host-name")
        except OperationFailed as error:
            log.debug("get-host-name failed for VM %s: %s", vm_id, error.detail)
        os_type = OsType.OTHER
        os_name = None
        if osinfo is not None:
            os_name = osinfo.get("pretty-name") or osinfo.get("name")
            os_id = str(osinfo.get("id", "")).lower()
            if os_id == "mswindows":
                os_type = OsType.WINDOWS
            elif os_id and os_id not in OTHER_OS_IDS:
                os_type = OsType.LINUX
        return GuestInfo(
            addresses=guest_addresses((interfaces or {}).get("result")),
            hostname=hostname,
            os_name=os_name,
            os_type=os_type,
        )

    async def do_windows_ready(self, vm_id: str) -> bool:
        """Windows: ``State.ini`` says ``IMAGE_STATE_COMPLETE``; other guests: the agent answers."""
        try:
            osinfo = await self._osinfo(vm_id)
            if osinfo is None or str(osinfo.get("id", "")).lower() != "mswindows":
                await self._agent(vm_id, "ping")
                return True
            data = await self._agent(vm_id, "file-read", {"file": WINDOWS_STATE_FILE})
        except AgentNotRunning:
            return False
        except OperationFailed as error:
            log.debug("Windows readiness of VM %s not readable yet: %s", vm_id, error.detail)
            return False
        return windows_setup_complete(str((data or {}).get("content", "")))

    async def do_desktop_endpoint(
        self, vm_id: str, protocol: DesktopProtocol | None
    ) -> DesktopEndpoint:
        """The guest's first address (agent); RDP for Windows, else the pool's protocol."""
        info = await self.do_guest_info(vm_id)
        if not info.addresses:
            raise AgentNotRunning(f"VM {vm_id} reports no address yet", vm_id=vm_id)
        windows = info.os_type is OsType.WINDOWS
        if not windows and info.os_type is OsType.OTHER:
            # An agent without get-osinfo: the VM's configured OS type says.
            config = await self._on_vm(
                vm_id,
                lambda node: self.client.get(self._vm_path(node, vm_id, "/config"), vm_id=vm_id),
            )
            windows = os_type_of((config or {}).get("ostype")) is OsType.WINDOWS
        chosen = DesktopProtocol.RDP if windows else protocol or DesktopProtocol.RDP
        return DesktopEndpoint(
            protocol=chosen,
            host=info.addresses[0],
            port=self.desktop_ports[chosen],
            parameters=self.desktop_parameters[chosen],
        )
