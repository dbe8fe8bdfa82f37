"""The state of the fake Proxmox VE cluster, its test controls and its cluster-wide methods.

:class:`FakeCluster` holds nodes, storages, tokens, VMs and tasks, runs tasks the way
``pveproxy``'s workers do (a UPID, ``running`` then ``stopped`` with an exit status), and
answers ``/version``, ``/nodes``, ``/cluster/*`` and the task endpoints. The VM methods are in
:mod:`.vms`, the HTTP server in :mod:`.server`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from deskpool_driver_proxmox.testing.model import (
    DEFAULT_VERSION,
    TOKEN_ID,
    TOKEN_SECRET,
    ApiCall,
    ApiError,
    FakeNode,
    FakeStorage,
    FakeTask,
    FakeTimings,
    FakeToken,
    FakeVm,
    privileges_for,
)


class FakeCluster:
    """The fake cluster's state and the API methods that are not about one VM.

    :param nodes: node names (the first is the one the API is reached through).
    :param timings: how long operations take.
    :param version: the Proxmox VE version reported; it decides the privilege names checked.
    """

    def __init__(
        self,
        nodes: tuple[str, ...] = ("pve1", "pve2"),
        *,
        timings: FakeTimings | None = None,
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
        self.version = version
        self._clone_failures: list[str] = []
        self._stolen_ids = 0
        #: Every task started, in order: tests await ``started_tasks.get()`` instead of polling.
        self.started_tasks: asyncio.Queue[FakeTask] = asyncio.Queue()
        self._next_pid = 4000 + os.getpid() % 1000
        self.add_template(9000, "ubuntu-2204-tpl", ostype="l26", tags="ubuntu")
        self.add_template(9001, "win11-tpl", ostype="win11", tags="windows")

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

    def lack_osinfo(self, vmid: int, lacks: bool = True) -> None:
        """Give a VM an old guest agent that does not know ``guest-get-osinfo``."""
        self.vms[vmid].agent_lacks_osinfo = lacks

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

    def running_tasks(self) -> list[FakeTask]:
        """Tasks not finished yet."""
        return [task for task in self.tasks.values() if task.exitstatus is None]

    # ------------------------------------------------------------------ helpers of the methods

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    def _vm(self, call: ApiCall, *, privilege: str = "VM.Audit") -> FakeVm:
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
        call: ApiCall,
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

    # ------------------------------------------------------------------ cluster-wide methods

    async def _version(self, call: ApiCall) -> Any:
        major_minor = ".".join(self.version.split(".")[:2])
        return {"version": self.version, "release": major_minor, "repoid": "faa83925c9641325"}

    async def _nodes(self, call: ApiCall) -> Any:
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

    async def _cluster_status(self, call: ApiCall) -> Any:
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

    async def _nextid(self, call: ApiCall) -> Any:
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

    async def _resources(self, call: ApiCall) -> Any:
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

    async def _task_status(self, call: ApiCall) -> Any:
        task = self.tasks.get(call.params["upid"])
        if task is None or task.node != call.params["node"]:
            raise ApiError(500, "no such task")
        return task.status

    async def _task_stop(self, call: ApiCall) -> Any:
        task = self.tasks.get(call.params["upid"])
        if task is None or task.node != call.params["node"]:
            raise ApiError(500, "no such task")
        if task.runner is not None and not task.runner.done():
            task.runner.cancel()
        return None
