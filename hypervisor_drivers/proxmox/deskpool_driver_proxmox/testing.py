"""A fake Proxmox VE API for tests: an aiohttp server speaking ``/api2/json`` on 127.0.0.1.

:class:`FakeProxmox` implements the part of the Proxmox VE REST API the driver uses, the way
``pveproxy`` and ``qemu-server`` behave (checked against their sources):

- API token authentication (``Authorization: PVEAPIToken=USER@REALM!TOKENID=SECRET``):
  ``401 No ticket`` without it, ``401 invalid token value!`` with a wrong one,
  ``403 Permission check failed (/vms/ID, PRIV)`` for a token lacking a privilege;
- parameters from the query string and from form-encoded (or JSON) bodies, validated like
  the JSON schema of each method: ``400 Parameter verification failed.`` with
  ``{"errors": {"name": "why"}, "data": null}`` (a boolean is ``0`` or ``1``, nothing else);
  a body on ``GET`` is ``501``;
- every answer as ``{"data": ...}``; errors as a status whose reason phrase is the message,
  with ``{"data": null, "message": "..."}`` (the message ends with a newline);
  ``501 Method 'GET /x' not implemented`` for what does not exist;
- requests for a node that is down answer ``595`` with an empty body, as ``pveproxy`` does
  when it cannot proxy to that node;
- ``/version``, ``/nodes``, ``/cluster/status``, ``/cluster/nextid``, ``/cluster/resources``;
- QEMU VMs: ``config`` (``GET``, ``PUT``, ``POST``), ``clone`` (linked from templates by
  default, ``storage`` refused for linked clones, ``target`` only with shared storage; a
  clone to another node lives, locked, on the *source* node until its task ends and is then
  moved to the target, as ``qemu-server``'s ``clone_vm`` does),
  ``status/current``, ``status/start|stop|shutdown|reset``, ``DELETE`` (refused while
  running), with the ``lock`` a clone holds and the checks made before forking a task;
- asynchronous tasks with real UPIDs (``UPID:node:PID:PSTART:STARTTIME:type:id:user:``),
  ``/nodes/{node}/tasks/{upid}/status`` (``running`` then ``stopped`` with ``exitstatus``)
  and ``DELETE`` to stop a task;
- a guest agent per VM: ``ping``, ``network-get-interfaces``, ``get-osinfo``,
  ``get-host-name``, ``file-read`` (Windows ``State.ini``), with ``500 QEMU guest agent is
  not running`` while the guest boots and ``500 VM ID is not running`` when it is stopped.

The version reported (:data:`DEFAULT_VERSION`, or the one given) decides the privilege names
checked, as on a real cluster: ``VM.GuestAgent.*`` from 9 on, ``VM.Monitor`` before (see
:func:`privileges_for`).

Time runs for real but fast (see :class:`FakeTimings`); faults are injected through methods
(``set_node_online``, ``silence_agent``, ``stall_oobe``, ``ignore_shutdown``,
``fail_next_clone``, ``steal_next_id``). Every request is recorded in ``requests`` and every
task started is put on the ``started_tasks`` queue. The fake serves plain HTTP, or HTTPS when
given an SSL context.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import re
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

TOKEN_ID = "deskpool@pve!deskpool"
TOKEN_SECRET = "6f1a9c2e-0b7d-4c55-9e0a-3d2f8b7c1e44"

#: The Proxmox VE version the fake reports unless told another.
DEFAULT_VERSION = "9.0.10"

_COMMON_PRIVILEGES = frozenset(
    {
        "Sys.Audit",
        "VM.Audit",
        "VM.Clone",
        "VM.Allocate",
        "VM.Config.Options",
        "VM.PowerMgmt",
        "Datastore.AllocateSpace",
    }
)


def privileges_for(version: str) -> frozenset[str]:
    """Every privilege the fake checks when it reports ``version``.

    Proxmox VE 9 split the guest agent's privileges out of ``VM.Monitor`` (which it removed):
    reading the agent's information needs ``VM.GuestAgent.Audit`` and reading a file
    ``VM.GuestAgent.FileRead``; before 9, both needed ``VM.Monitor``.
    """
    if _major(version) >= 9:
        return _COMMON_PRIVILEGES | {"VM.GuestAgent.Audit", "VM.GuestAgent.FileRead"}
    return _COMMON_PRIVILEGES | {"VM.Monitor"}


def _major(version: str) -> int:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


#: Every privilege the fake checks at :data:`DEFAULT_VERSION`; a token holds all by default.
ALL_PRIVILEGES = privileges_for(DEFAULT_VERSION)

WINDOWS_STATE_FILE = r"C:\Windows\Setup\State\State.ini"

_TAG = re.compile(r"(?i)[a-z0-9_][a-z0-9_\-+.]*")
_DNS_NAME = re.compile(r"(?i)([a-z0-9]([a-z0-9\-]*[a-z0-9])?\.)*[a-z0-9]([a-z0-9\-]*[a-z0-9])?")
_NODE = re.compile(r"(?i)[a-z0-9]([a-z0-9\-]*[a-z0-9])?")
_STORAGE = re.compile(r"(?i)[a-z][a-z0-9\-_.]*[a-z0-9]")
#: The only spellings of a boolean parameter the API schema check accepts (``PVE::JSONSchema``
#: compares with ``eq '1'`` and ``eq '0'``; ``true``/``yes``/``on`` are refused).
_BOOLEANS = {"1", "0"}


class ApiError(Exception):
    """An error answer of the fake API."""

    def __init__(self, status: int, message: str, errors: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = dict(errors or {})


@dataclass
class FakeTimings:
    """How long the fake's operations take, in seconds (fast by default)."""

    clone_seconds: float = 0.02
    task_seconds: float = 0.005
    agent_seconds: float = 0.03
    oobe_seconds: float = 0.03
    shutdown_seconds: float = 0.01


@dataclass
class FakeToken:
    """An API token the fake accepts."""

    secret: str
    privileges: frozenset[str] = ALL_PRIVILEGES


@dataclass
class FakeNode:
    """A node of the fake cluster."""

    name: str
    online: bool = True
    ip: str = "127.0.0.1"


@dataclass
class FakeStorage:
    """A storage of the fake cluster."""

    name: str
    shared: bool


@dataclass
class FakeVm:
    """A QEMU VM of the fake cluster: its config and what its guest is doing."""

    vmid: int
    node: str
    config: dict[str, Any]
    running: bool = False
    started_at: float | None = None
    agent_silenced: bool = False
    oobe_stalled: bool = False
    ignores_shutdown: bool = False

    @property
    def is_template(self) -> bool:
        """Whether the VM is a template."""
        return bool(int(self.config.get("template", 0)))

    @property
    def storage(self) -> str:
        """The storage of its first disk."""
        return str(self.config.get("scsi0", "local-lvm:")).split(":", 1)[0]

    @property
    def windows(self) -> bool:
        """Whether the guest is Windows (by ``ostype``)."""
        return str(self.config.get("ostype", "")).startswith("win")


@dataclass
class FakeTask:
    """A worker task and its UPID."""

    upid: str
    node: str
    type: str
    id: str
    user: str
    pid: int
    pstart: int
    starttime: int
    exitstatus: str | None = None
    runner: asyncio.Task[None] | None = None

    @property
    def status(self) -> dict[str, Any]:
        """The task status document."""
        data: dict[str, Any] = {
            "upid": self.upid,
            "node": self.node,
            "pid": self.pid,
            "pstart": self.pstart,
            "starttime": self.starttime,
            "type": self.type,
            "id": self.id,
            "user": self.user,
            "status": "running" if self.exitstatus is None else "stopped",
        }
        if "!" in self.user:
            data["tokenid"] = self.user.split("!", 1)[1]
        if self.exitstatus is not None:
            data["exitstatus"] = self.exitstatus
        return data


@dataclass
class RecordedRequest:
    """A request the fake received (for tests that check the wire format)."""

    method: str
    path: str
    content_type: str
    params: dict[str, str]


Handler = Callable[["_Call"], Awaitable[Any]]


@dataclass
class _Call:
    """One authenticated API call being answered."""

    request: web.Request
    params: dict[str, str]
    user: str
    privileges: frozenset[str]

    def need(self, privilege: str, path: str) -> None:
        if privilege not in self.privileges:
            raise ApiError(403, f"Permission check failed ({path}, {privilege})")


@dataclass
class _Method:
    """A method of the API: its parameters (name -> kind), required ones, and handler."""

    handler: Handler
    params: dict[str, str] = field(default_factory=dict)
    required: frozenset[str] = frozenset()


class FakeProxmox:
    """A running fake Proxmox VE cluster.

    :param nodes: node names (the first is the one the API is reached through).
    :param timings: how long operations take.
    :param ssl_context: serve HTTPS with it (else plain HTTP).

    Use as ``async with FakeProxmox() as fake:``; :attr:`endpoint` is then the URL to give a
    connection, and :data:`TOKEN_ID` / :data:`TOKEN_SECRET` a valid token.
    """

    def __init__(
        self,
        nodes: tuple[str, ...] = ("pve1", "pve2"),
        *,
        timings: FakeTimings | None = None,
        ssl_context: ssl.SSLContext | None = None,
        version: str = DEFAULT_VERSION,
    ) -> None:
        self.timings = timings or FakeTimings()
        self.nodes = {name: FakeNode(name) for name in nodes}
        self.storages = {
            "local-lvm": FakeStorage("local-lvm", shared=False),
            "cephpool": FakeStorage("cephpool", shared=True),
        }
        self.tokens = {TOKEN_ID: FakeToken(TOKEN_SECRET, privileges_for(version))}
        self.vms: dict[int, FakeVm] = {}
        self.tasks: dict[str, FakeTask] = {}
        self.requests: list[RecordedRequest] = []
        self.version = version
        self._ssl = ssl_context
        self._runner: web.AppRunner | None = None
        self._clone_failures: list[str] = []
        self._stolen_ids = 0
        #: Every task started, in order: tests await ``started_tasks.get()`` instead of polling.
        self.started_tasks: asyncio.Queue[FakeTask] = asyncio.Queue()
        self._request_seen = asyncio.Condition()
        self._next_pid = 4000 + os.getpid() % 1000
        self.endpoint = ""
        self.add_template(9000, "ubuntu-2204-tpl", ostype="l26", tags="ubuntu")
        self.add_template(9001, "win11-tpl", ostype="win11", tags="windows")

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> str:
        """Listen on 127.0.0.1 (a free port) and return :attr:`endpoint`."""
        app = web.Application(middlewares=[self._middleware])
        app.router.add_route("*", "/api2/json/{path:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._ssl)
        await site.start()
        port = self._runner.addresses[0][1]
        self.endpoint = f"{'https' if self._ssl else 'http'}://127.0.0.1:{port}"
        return self.endpoint

    async def close(self) -> None:
        """Stop running tasks and the server."""
        for task in self.tasks.values():
            if task.runner is not None and not task.runner.done():
                task.runner.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeProxmox:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ test controls

    def add_template(
        self,
        vmid: int,
        name: str,
        *,
        ostype: str = "l26",
        node: str | None = None,
        storage: str = "cephpool",
        tags: str = "",
    ) -> FakeVm:
        """Add a template VM (agent enabled)."""
        vm = FakeVm(
            vmid,
            node or next(iter(self.nodes)),
            {
                "name": name,
                "ostype": ostype,
                "template": 1,
                "agent": "1",
                "cores": 2,
                "memory": 4096,
                "scsi0": f"{storage}:base-{vmid}-disk-0,size=32G",
                "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0",
                "tags": tags,
            },
        )
        self.vms[vmid] = vm
        return vm

    def add_vm(
        self, vmid: int, name: str, *, node: str | None = None, tags: str = "", running: bool = True
    ) -> FakeVm:
        """Add an ordinary VM (another user's, as far as deskpool is concerned)."""
        vm = FakeVm(
            vmid,
            node or next(iter(self.nodes)),
            {
                "name": name,
                "ostype": "l26",
                "agent": "1",
                "scsi0": f"local-lvm:vm-{vmid}-disk-0,size=32G",
                "tags": tags,
            },
            running=running,
            started_at=self._now() - 3600 if running else None,
        )
        self.vms[vmid] = vm
        return vm

    def set_node_online(self, node: str, online: bool) -> None:
        """Take a node down (requests for it answer 595) or bring it back."""
        self.nodes[node].online = online

    def silence_agent(self, vmid: int, silent: bool = True) -> None:
        """Make a VM's guest agent never answer."""
        self.vms[vmid].agent_silenced = silent

    def stall_oobe(self, vmid: int, stalled: bool = True) -> None:
        """Keep a Windows VM in OOBE forever."""
        self.vms[vmid].oobe_stalled = stalled

    def ignore_shutdown(self, vmid: int, ignores: bool = True) -> None:
        """Make a guest ignore ACPI/agent shutdown requests."""
        self.vms[vmid].ignores_shutdown = ignores

    def fail_next_clone(self, message: str = "clone failed: storage error (fake)") -> None:
        """Make the next clone task fail with ``message`` (the VM is cleaned up)."""
        self._clone_failures.append(message)

    def steal_next_id(self, count: int = 1) -> None:
        """Let another client take the next ``count`` ids ``/cluster/nextid`` hands out.

        Each such id is answered and at once taken by a new foreign VM, as when two clients
        clone at the same moment; the clone that asked for it then fails with ``config file
        already exists``.
        """
        self._stolen_ids += count

    async def request_seen(self, matches: Callable[[RecordedRequest], bool]) -> RecordedRequest:
        """Wait until a request that ``matches`` has been received (at once if one has)."""
        async with self._request_seen:
            await self._request_seen.wait_for(lambda: any(map(matches, self.requests)))
        return next(request for request in self.requests if matches(request))

    def running_tasks(self) -> list[FakeTask]:
        """Tasks not finished yet."""
        return [task for task in self.tasks.values() if task.exitstatus is None]

    # ------------------------------------------------------------------ plumbing

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            response: web.StreamResponse = await handler(request)
        except ApiError as error:
            return _error_response(error)
        return response

    def _authenticate(self, request: web.Request) -> tuple[str, frozenset[str]]:
        header = request.headers.get("Authorization", "")
        match = re.fullmatch(r"PVEAPIToken\s*=?\s*([^=\s]+)=(\S+)", header.strip())
        if match is None:
            raise ApiError(401, "No ticket")
        token_id, secret = match.groups()
        token = self.tokens.get(token_id)
        if token is None or not hmac.compare_digest(token.secret.encode(), secret.encode()):
            raise ApiError(401, "invalid token value!")
        return token_id, token.privileges

    async def _dispatch(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"].rstrip("/")
        if request.method in ("GET", "DELETE") and request.content_length:
            raise ApiError(501, f"Unexpected content for method '{request.method}'")
        params = dict(request.query)
        content_type = request.content_type
        if request.method in ("POST", "PUT") and request.can_read_body:
            if content_type == "application/json":
                body = await request.json()
                params.update({k: _as_text(v) for k, v in (body or {}).items()})
            else:
                form = await request.post()
                params.update({k: str(v) for k, v in form.items()})
        self.requests.append(RecordedRequest(request.method, path, content_type, dict(params)))
        async with self._request_seen:
            self._request_seen.notify_all()
        user, privileges = self._authenticate(request)
        method, path_params = self._route(request.method, path)
        node = path_params.get("node")
        if node is not None:
            if node not in self.nodes:
                raise ApiError(500, f"hostname lookup '{node}' failed - failed to get address info")
            if not self.nodes[node].online:
                raise ApiError(
                    595,
                    "Errors during connection establishment, proxy handler::__ANON__: "
                    "Connection refused",
                )
        for name, value in path_params.items():
            params.setdefault(name, value)
        _validate(params, method)
        data = await method.handler(_Call(request, params, user, privileges))
        return web.json_response({"data": data})

    def _route(self, verb: str, path: str) -> tuple[_Method, dict[str, str]]:
        for pattern, methods in self._table():
            match = pattern.fullmatch(path)
            if match is not None:
                if verb not in methods:
                    break
                return methods[verb], {k: v for k, v in match.groupdict().items() if v}
        raise ApiError(501, f"Method '{verb} {path}' not implemented")

    def _table(self) -> list[tuple[re.Pattern[str], dict[str, _Method]]]:
        vm = r"/nodes/(?P<node>[^/]+)/qemu/(?P<vmid>[^/]+)"
        node_vmid = {"node": "node", "vmid": "vmid"}
        agent_get = {
            command: _Method(self._agent_command(command), dict(node_vmid))
            for command in ("network-get-interfaces", "get-osinfo", "get-host-name")
        }
        return [
            (re.compile(r"/version"), {"GET": _Method(self._version)}),
            (re.compile(r"/nodes"), {"GET": _Method(self._nodes)}),
            (re.compile(r"/cluster/status"), {"GET": _Method(self._cluster_status)}),
            (
                re.compile(r"/cluster/nextid"),
                {"GET": _Method(self._nextid, {"vmid": "vmid"})},
            ),
            (
                re.compile(r"/cluster/resources"),
                {"GET": _Method(self._resources, {"type": "resource-type"})},
            ),
            (
                re.compile(r"/nodes/(?P<node>[^/]+)/qemu"),
                {"GET": _Method(self._vm_list, {"node": "node", "full": "bool"})},
            ),
            (
                re.compile(vm + "/config"),
                {
                    "GET": _Method(self._config_get, {**node_vmid, "current": "bool"}),
                    "PUT": _Method(self._config_put, _CONFIG_PARAMS),
                    "POST": _Method(self._config_post, _CONFIG_PARAMS),
                },
            ),
            (
                re.compile(vm + "/clone"),
                {"POST": _Method(self._clone, _CLONE_PARAMS, frozenset({"newid"}))},
            ),
            (
                re.compile(vm + "/status/current"),
                {"GET": _Method(self._status_current, dict(node_vmid))},
            ),
            (
                re.compile(vm + "/status/start"),
                {"POST": _Method(self._start, {**node_vmid, "timeout": "int"})},
            ),
            (
                re.compile(vm + "/status/stop"),
                {"POST": _Method(self._stop, {**node_vmid, "timeout": "int"})},
            ),
            (
                re.compile(vm + "/status/shutdown"),
                {
                    "POST": _Method(
                        self._shutdown,
                        {**node_vmid, "timeout": "int", "forceStop": "bool", "keepActive": "bool"},
                    )
                },
            ),
            (re.compile(vm + "/status/reset"), {"POST": _Method(self._reset, dict(node_vmid))}),
            (
                re.compile(vm + "/agent/ping"),
                {"POST": _Method(self._agent_command("ping"), dict(node_vmid))},
            ),
            *(
                (re.compile(vm + f"/agent/{command}"), {"GET": method})
                for command, method in agent_get.items()
            ),
            (
                re.compile(vm + "/agent/file-read"),
                {
                    "GET": _Method(
                        self._file_read,
                        {**node_vmid, "file": "string", "count": "int", "decode": "bool"},
                        frozenset({"file"}),
                    )
                },
            ),
            (
                re.compile(vm),
                {
                    "DELETE": _Method(
                        self._destroy,
                        {
                            **node_vmid,
                            "purge": "bool",
                            "destroy-unreferenced-disks": "bool",
                            "skiplock": "bool",
                        },
                    )
                },
            ),
            (
                re.compile(r"/nodes/(?P<node>[^/]+)/tasks/(?P<upid>[^/]+)/status"),
                {"GET": _Method(self._task_status, {"node": "node", "upid": "string"})},
            ),
            (
                re.compile(r"/nodes/(?P<node>[^/]+)/tasks/(?P<upid>[^/]+)"),
                {"DELETE": _Method(self._task_stop, {"node": "node", "upid": "string"})},
            ),
        ]

    def _vm(self, call: _Call, *, privilege: str = "VM.Audit") -> FakeVm:
        vmid = int(call.params["vmid"])
        node = call.params["node"]
        vm = self.vms.get(vmid)
        if vm is None or vm.node != node:
            raise ApiError(
                500, f"Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"
            )
        call.need(privilege, f"/vms/{vmid}")
        return vm

    @staticmethod
    def _check_lock(vm: FakeVm) -> None:
        if vm.config.get("lock"):
            raise ApiError(500, f"VM is locked ({vm.config['lock']})")

    def _task(
        self,
        call: _Call,
        node: str,
        kind: str,
        ident: str,
        work: Callable[[], Awaitable[None]],
    ) -> str:
        """Start a worker task running ``work``; its failure message becomes the exitstatus."""
        self._next_pid += 1
        now = int(time.time())
        upid = (
            f"UPID:{node}:{self._next_pid:08X}:{int(time.monotonic() * 100) % 2**32:08X}:"
            f"{now:08X}:{kind}:{ident}:{call.user}:"
        )
        task = FakeTask(upid, node, kind, ident, call.user, self._next_pid, 0, now)
        self.tasks[upid] = task

        async def run() -> None:
            try:
                await asyncio.sleep(self.timings.task_seconds)
                await work()
            except ApiError as error:
                task.exitstatus = error.message
            except asyncio.CancelledError:
                task.exitstatus = "interrupted by signal"
                raise
            else:
                task.exitstatus = "OK"

        task.runner = asyncio.get_running_loop().create_task(run())
        self.started_tasks.put_nowait(task)
        return upid

    def _agent_up(self, vm: FakeVm) -> bool:
        return (
            vm.running
            and vm.started_at is not None
            and not vm.agent_silenced
            and self._now() >= vm.started_at + self.timings.agent_seconds
        )

    # ------------------------------------------------------------------ handlers

    async def _version(self, call: _Call) -> Any:
        major_minor = ".".join(self.version.split(".")[:2])
        return {"version": self.version, "release": major_minor, "repoid": "faa83925c9641325"}

    async def _nodes(self, call: _Call) -> Any:
        return [
            {
                "node": node.name,
                "status": "online" if node.online else "offline",
                "type": "node",
                "id": f"node/{node.name}",
                "level": "",
                "maxcpu": 32,
                "maxmem": 256 * 2**30,
                **({"cpu": 0.05, "mem": 32 * 2**30, "uptime": 864000} if node.online else {}),
            }
            for node in self.nodes.values()
        ]

    async def _cluster_status(self, call: _Call) -> Any:
        call.need("Sys.Audit", "/")
        return [
            {
                "type": "cluster",
                "id": "cluster",
                "name": "fakecluster",
                "nodes": len(self.nodes),
                "quorate": 1,
                "version": 7,
            },
            *(
                {
                    "type": "node",
                    "id": f"node/{node.name}",
                    "name": node.name,
                    "ip": node.ip,
                    "online": int(node.online),
                    "local": int(index == 0),
                    "nodeid": index + 1,
                    "level": "",
                }
                for index, node in enumerate(self.nodes.values())
            ),
        ]

    async def _nextid(self, call: _Call) -> Any:
        if "vmid" in call.params:
            vmid = int(call.params["vmid"])
            if vmid in self.vms:
                raise ApiError(
                    400, "Parameter verification failed.", {"vmid": f"VM {vmid} already exists"}
                )
            return str(vmid)
        vmid = 100
        while vmid in self.vms:
            vmid += 1
        if self._stolen_ids:
            self._stolen_ids -= 1
            self.add_vm(vmid, f"raced-{vmid}", running=False)
        return str(vmid)

    def _resource(self, vm: FakeVm) -> dict[str, Any]:
        online = self.nodes[vm.node].online
        item: dict[str, Any] = {
            "id": f"qemu/{vm.vmid}",
            "type": "qemu",
            "vmid": vm.vmid,
            "name": vm.config.get("name", ""),
            "node": vm.node,
            "status": ("running" if vm.running else "stopped") if online else "unknown",
            "template": int(vm.is_template),
            "maxcpu": int(vm.config.get("cores", 1)),
            "maxmem": int(vm.config.get("memory", 2048)) * 2**20,
            "maxdisk": 32 * 2**30,
            "uptime": self._uptime(vm),
        }
        if vm.config.get("tags"):
            item["tags"] = vm.config["tags"]
        if vm.config.get("lock"):
            item["lock"] = vm.config["lock"]
        return item

    def _uptime(self, vm: FakeVm) -> int:
        return int(self._now() - vm.started_at) if vm.running and vm.started_at else 0

    async def _resources(self, call: _Call) -> Any:
        kind = call.params.get("type")
        out: list[dict[str, Any]] = []
        if kind in (None, "vm"):
            out.extend(
                self._resource(vm)
                for vm in sorted(self.vms.values(), key=lambda vm: vm.vmid)
                if "VM.Audit" in call.privileges
            )
        if kind in (None, "node"):
            out.extend(
                {"id": f"node/{n.name}", "type": "node", "node": n.name, "status": "online"}
                for n in self.nodes.values()
            )
        if kind in (None, "storage"):
            out.extend(
                {
                    "id": f"storage/{node}/{s.name}",
                    "type": "storage",
                    "storage": s.name,
                    "node": node,
                    "shared": int(s.shared),
                    "status": "available",
                }
                for node in self.nodes
                for s in self.storages.values()
            )
        return out

    async def _vm_list(self, call: _Call) -> Any:
        node = call.params["node"]
        return [
            {**self._resource(vm), "status": "running" if vm.running else "stopped"}
            for vm in self.vms.values()
            if vm.node == node
        ]

    async def _config_get(self, call: _Call) -> Any:
        vm = self._vm(call)
        config = {k: v for k, v in vm.config.items() if v not in ("", None)}
        digest = format(abs(hash(json.dumps(config, sort_keys=True))), "040x")[:40]
        return {**config, "digest": digest}

    def _apply_config(self, call: _Call, vm: FakeVm) -> None:
        if not call.params.get("skiplock"):
            self._check_lock(vm)
        for key in ("name", "description", "tags"):
            if key in call.params:
                vm.config[key] = call.params[key]
        for key in filter(None, re.split(r"[,;\s]+", call.params.get("delete", ""))):
            vm.config.pop(key, None)

    async def _config_put(self, call: _Call) -> Any:
        vm = self._vm(call, privilege="VM.Config.Options")
        self._apply_config(call, vm)
        return None

    async def _config_post(self, call: _Call) -> Any:
        vm = self._vm(call, privilege="VM.Config.Options")
        self._apply_config(call, vm)

        async def nothing() -> None:
            return None

        return self._task(call, vm.node, "qmconfig", str(vm.vmid), nothing)

    async def _clone(self, call: _Call) -> Any:
        source = self._vm(call, privilege="VM.Clone")
        params = call.params
        newid = int(params["newid"])
        call.need("VM.Allocate", f"/vms/{newid}")
        target = params.get("target") or source.node
        if target not in self.nodes:
            raise ApiError(500, f"no such cluster node '{target}'")
        storage = params.get("storage")
        full = _bool(params["full"]) if "full" in params else not source.is_template
        if storage is not None and not full:
            raise ApiError(500, "parameter 'storage' not allowed for linked clones")
        if storage is not None:
            if storage not in self.storages:
                raise ApiError(500, f"storage '{storage}' does not exist")
            call.need("Datastore.AllocateSpace", f"/storage/{storage}")
        if not full and not source.is_template:
            raise ApiError(
                500, f"Linked clone feature is not supported for drive 'scsi0' of VM {source.vmid}"
            )
        if target != source.node and not self.storages[source.storage].shared:
            raise ApiError(500, f"can't clone VM to node '{target}' (VM uses local storage)")
        if not source.is_template:
            self._check_lock(source)
        if newid in self.vms:
            raise ApiError(500, f"unable to create VM {newid}: config file already exists")
        disk_storage = storage or source.storage
        disk = (
            f"{disk_storage}:vm-{newid}-disk-0,size=32G"
            if full
            else f"{disk_storage}:base-{source.vmid}-disk-0/vm-{newid}-disk-0,size=32G"
        )
        # qemu-server's clone_vm writes the new config on the node it runs on (the source),
        # locked, and renames it into the target node's directory only as the task's last step.
        clone = FakeVm(newid, source.node, {"lock": "clone"})
        self.vms[newid] = clone
        copied = {
            key: value
            for key, value in source.config.items()
            if key not in ("template", "lock", "scsi0", "net0", "description")
        }
        failure = self._clone_failures.pop(0) if self._clone_failures else None

        async def work() -> None:
            try:
                await asyncio.sleep(self.timings.clone_seconds)
            except asyncio.CancelledError:
                self.vms.pop(newid, None)
                raise
            if failure is not None:
                self.vms.pop(newid, None)
                raise ApiError(500, failure)
            clone.config = {
                **copied,
                "name": params.get("name", f"Copy-of-VM-{source.config.get('name', '')}"),
                "scsi0": disk,
                "net0": f"virtio=BC:24:11:{newid // 65536 % 256:02X}:"
                f"{newid // 256 % 256:02X}:{newid % 256:02X},bridge=vmbr0",
                **({"description": params["description"]} if "description" in params else {}),
            }
            clone.node = target

        return self._task(call, source.node, "qmclone", str(source.vmid), work)

    async def _status_current(self, call: _Call) -> Any:
        vm = self._vm(call)
        status: dict[str, Any] = {
            "vmid": vm.vmid,
            "name": vm.config.get("name", ""),
            "status": "running" if vm.running else "stopped",
            "cpus": int(vm.config.get("cores", 1)),
            "maxmem": int(vm.config.get("memory", 2048)) * 2**20,
            "uptime": self._uptime(vm),
            "ha": {"managed": 0},
        }
        if vm.running:
            status["qmpstatus"] = "running"
            status["pid"] = 100000 + vm.vmid
        if vm.config.get("agent") in ("1", 1):
            status["agent"] = 1
        if vm.config.get("lock"):
            status["lock"] = vm.config["lock"]
        if vm.config.get("tags"):
            status["tags"] = vm.config["tags"]
        if vm.is_template:
            status["template"] = 1
        return status

    async def _start(self, call: _Call) -> Any:
        vm = self._vm(call, privilege="VM.PowerMgmt")

        async def work() -> None:
            if vm.is_template:
                raise ApiError(500, "you can't start a vm if it's a template")
            self._check_lock(vm)
            if vm.running:
                raise ApiError(500, f"VM {vm.vmid} already running")
            vm.running = True
            vm.started_at = self._now()

        return self._task(call, vm.node, "qmstart", str(vm.vmid), work)

    async def _stop(self, call: _Call) -> Any:
        vm = self._vm(call, privilege="VM.PowerMgmt")

        async def work() -> None:
            self._check_lock(vm)
            vm.running = False
            vm.started_at = None

        return self._task(call, vm.node, "qmstop", str(vm.vmid), work)

    async def _shutdown(self, call: _Call) -> Any:
        vm = self._vm(call, privilege="VM.PowerMgmt")
        timeout = int(call.params.get("timeout", "60"))
        force = _bool(call.params.get("forceStop", "0"))

        async def work() -> None:
            if not vm.running:
                return
            self._check_lock(vm)
            if not vm.ignores_shutdown and self.timings.shutdown_seconds <= timeout:
                await asyncio.sleep(self.timings.shutdown_seconds)
            else:
                await asyncio.sleep(timeout)
                if not force:
                    raise ApiError(500, "VM quit/powerdown failed - got timeout")
            vm.running = False
            vm.started_at = None

        return self._task(call, vm.node, "qmshutdown", str(vm.vmid), work)

    async def _reset(self, call: _Call) -> Any:
        vm = self._vm(call, privilege="VM.PowerMgmt")
        if not vm.running:
            raise ApiError(500, f"VM {vm.vmid} not running")

        async def work() -> None:
            self._check_lock(vm)
            vm.started_at = self._now()

        return self._task(call, vm.node, "qmreset", str(vm.vmid), work)

    async def _destroy(self, call: _Call) -> Any:
        vm = self._vm(call, privilege="VM.Allocate")
        self._check_lock(vm)
        if vm.running:
            raise ApiError(500, f"VM {vm.vmid} is running - destroy failed")

        async def work() -> None:
            self._check_lock(vm)
            self.vms.pop(vm.vmid, None)

        return self._task(call, vm.node, "qmdestroy", str(vm.vmid), work)

    def _agent_privilege(self, kind: str) -> str:
        """The privilege an agent command needs: ``VM.GuestAgent.<kind>`` from 9 on."""
        return f"VM.GuestAgent.{kind}" if _major(self.version) >= 9 else "VM.Monitor"

    def _agent_vm(self, call: _Call, kind: str = "Audit") -> FakeVm:
        vm = self._vm(call, privilege=self._agent_privilege(kind))
        if vm.config.get("agent") not in ("1", 1):
            raise ApiError(500, "No QEMU guest agent configured")
        if not vm.running:
            raise ApiError(500, f"VM {vm.vmid} is not running")
        if not self._agent_up(vm):
            raise ApiError(500, "QEMU guest agent is not running")
        return vm

    def _agent_command(self, command: str) -> Handler:
        async def handle(call: _Call) -> Any:
            vm = self._agent_vm(call)
            if command == "ping":
                return {"result": {}}
            if command == "get-host-name":
                return {"result": {"host-name": vm.config.get("name", "")}}
            if command == "get-osinfo":
                return {"result": _osinfo(vm)}
            return {"result": _interfaces(vm)}

        return handle

    async def _file_read(self, call: _Call) -> Any:
        vm = self._agent_vm(call, "FileRead")
        path = call.params["file"]
        if not vm.windows or path.lower() != WINDOWS_STATE_FILE.lower():
            raise ApiError(500, f"Agent error: Failed to open file '{path}' (error: 2)")
        assert vm.started_at is not None
        done = (
            not vm.oobe_stalled
            and self._now()
            >= vm.started_at + self.timings.agent_seconds + self.timings.oobe_seconds
        )
        state = "IMAGE_STATE_COMPLETE" if done else "IMAGE_STATE_UNDEPLOYABLE"
        content = f"[State]\r\nImageState={state}\r\n"
        return {"content": content, "bytes-read": len(content)}

    async def _task_status(self, call: _Call) -> Any:
        task = self.tasks.get(call.params["upid"])
        if task is None or task.node != call.params["node"]:
            raise ApiError(500, "no such task")
        return task.status

    async def _task_stop(self, call: _Call) -> Any:
        task = self.tasks.get(call.params["upid"])
        if task is None or task.node != call.params["node"]:
            raise ApiError(500, "no such task")
        if task.runner is not None and not task.runner.done():
            task.runner.cancel()
        return None


_CONFIG_PARAMS = {
    "node": "node",
    "vmid": "vmid",
    "name": "dns-name",
    "description": "string",
    "tags": "tags",
    "delete": "string",
    "digest": "string",
    "skiplock": "bool",
}

_CLONE_PARAMS = {
    "node": "node",
    "vmid": "vmid",
    "newid": "vmid",
    "name": "dns-name",
    "description": "string",
    "pool": "string",
    "snapname": "string",
    "storage": "storage",
    "format": "string",
    "full": "bool",
    "target": "node",
    "bwlimit": "int",
}


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _bool(value: str) -> bool:
    return value == "1"


def _validate(params: Mapping[str, str], method: _Method) -> None:
    """Check parameters as the method's JSON schema would (400 with per-parameter errors)."""
    errors: dict[str, str] = {}
    for name in sorted(method.required - set(params)):
        errors[name] = "property is missing and it is not optional"
    for name, value in params.items():
        kind = method.params.get(name)
        if kind is None:
            errors[name] = (
                "property is not defined in schema and the schema does not allow additional "
                "properties"
            )
        elif kind == "vmid" and not (value.isdigit() and 100 <= int(value) <= 999999999):
            errors[name] = "invalid format - value does not look like a valid VM ID"
        elif kind == "bool" and value not in _BOOLEANS:
            errors[name] = f"type check ('boolean') failed - got '{value}'"
        elif kind == "int" and not re.fullmatch(r"-?\d+", value):
            errors[name] = f"type check ('integer') failed - got '{value}'"
        elif kind == "dns-name" and not _DNS_NAME.fullmatch(value):
            errors[name] = "invalid format - value does not look like a valid DNS name"
        elif kind == "node" and not _NODE.fullmatch(value):
            errors[name] = "invalid format - value does not look like a valid node name"
        elif kind == "storage" and not _STORAGE.fullmatch(value):
            errors[name] = "invalid format - storage ID '" + value + "' contains illegal characters"
        elif kind == "tags":
            bad = [t for t in re.split(r"[;, ]+", value) if t and not _TAG.fullmatch(t)]
            if bad:
                errors[name] = f"invalid format - invalid tag '{bad[0]}'"
        elif kind == "resource-type" and value not in ("vm", "storage", "node", "sdn"):
            errors[name] = f"value '{value}' does not have a value in the enumeration"
    if errors:
        raise ApiError(400, "Parameter verification failed.", errors)


def _error_response(error: ApiError) -> web.Response:
    message = error.message if error.message.endswith("\n") else error.message + "\n"
    reason = error.message.strip().splitlines()[0] if error.message.strip() else None
    if error.status >= 590:
        return web.Response(status=error.status, reason=reason, text="")
    body: dict[str, Any] = {"data": None, "message": message}
    if error.errors:
        body["errors"] = {key: value + "\n" for key, value in error.errors.items()}
    return web.json_response(body, status=error.status, reason=reason)


def _osinfo(vm: FakeVm) -> dict[str, str]:
    if vm.windows:
        return {
            "id": "mswindows",
            "name": "Microsoft Windows",
            "pretty-name": "Windows 11 Pro",
            "version": "Microsoft Windows 11",
            "version-id": "11",
            "kernel-release": "22631",
            "kernel-version": "10.0",
            "machine": "x86_64",
            "variant": "client",
            "variant-id": "client",
        }
    return {
        "id": "ubuntu",
        "name": "Ubuntu",
        "pretty-name": "Ubuntu 22.04.4 LTS",
        "version": "22.04.4 LTS (Jammy Jellyfish)",
        "version-id": "22.04",
        "kernel-release": "5.15.0-91-generic",
        "kernel-version": "#101-Ubuntu SMP",
        "machine": "x86_64",
    }


def _interfaces(vm: FakeVm) -> list[dict[str, Any]]:
    low, high = vm.vmid % 256, vm.vmid // 256 % 256
    return [
        {
            "name": "lo" if not vm.windows else "Loopback Pseudo-Interface 1",
            "hardware-address": "00:00:00:00:00:00",
            "ip-addresses": [
                {"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8},
                {"ip-address": "::1", "ip-address-type": "ipv6", "prefix": 128},
            ],
        },
        {
            "name": "eth0" if not vm.windows else "Ethernet",
            "hardware-address": f"bc:24:11:00:{high:02x}:{low:02x}",
            "ip-addresses": [
                {"ip-address": f"fe80::be24:11ff:fe00:{low:x}", "ip-address-type": "ipv6"},
                {"ip-address": f"10.20.{high}.{low}", "ip-address-type": "ipv4", "prefix": 16},
                {"ip-address": f"fd00::{high:x}:{low:x}", "ip-address-type": "ipv6", "prefix": 64},
            ],
            "statistics": {"rx-bytes": 1024, "tx-bytes": 2048},
        },
    ]
