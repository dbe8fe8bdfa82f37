"""The fake's methods on one QEMU VM: config, clone, power, destroy and the guest agent."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from deskpool_driver_proxmox.testing.cluster import FakeCluster
from deskpool_driver_proxmox.testing.model import (
    WINDOWS_STATE_FILE,
    ApiCall,
    ApiError,
    FakeVm,
    Handler,
    as_bool,
    interfaces,
    major_version,
    osinfo,
)


class FakeVmApi(FakeCluster):
    """The API methods under ``/nodes/{node}/qemu/{vmid}``, the way ``qemu-server`` answers."""

    async def _vm_list(self, call: ApiCall) -> Any:
        node = call.params["node"]
        return [
            {**self._resource(vm), "status": "running" if vm.running else "stopped"}
            for vm in self.vms.values()
            if vm.node == node
        ]

    async def _config_get(self, call: ApiCall) -> Any:
        vm = self._vm(call)
        config = {k: v for k, v in vm.config.items() if v not in ("", None)}
        digest = format(abs(hash(json.dumps(config, sort_keys=True))), "040x")[:40]
        return {**config, "digest": digest}

    def _apply_config(self, call: ApiCall, vm: FakeVm) -> None:
        if not call.params.get("skiplock"):
            self._check_lock(vm)
        for key in ("name", "description", "tags"):
            if key in call.params:
                vm.config[key] = call.params[key]
        for key in filter(None, re.split(r"[,;\s]+", call.params.get("delete", ""))):
            vm.config.pop(key, None)

    async def _config_put(self, call: ApiCall) -> Any:
        vm = self._vm(call, privilege="VM.Config.Options")
        self._apply_config(call, vm)
        return None

    async def _config_post(self, call: ApiCall) -> Any:
        vm = self._vm(call, privilege="VM.Config.Options")
        self._apply_config(call, vm)

        async def nothing() -> None:
            return None

        return self._task(call, vm.node, "qmconfig", str(vm.vmid), nothing)

    async def _clone(self, call: ApiCall) -> Any:
        source = self._vm(call, privilege="VM.Clone")
        params = call.params
        newid = int(params["newid"])
        call.need("VM.Allocate", f"/vms/{newid}")
        target = params.get("target") or source.node
        if target not in self.nodes:
            raise ApiError(500, f"no such cluster node '{target}'")
        storage = params.get("storage")
        full = as_bool(params["full"]) if "full" in params else not source.is_template
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

    async def _status_current(self, call: ApiCall) -> Any:
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

    async def _start(self, call: ApiCall) -> Any:
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

    async def _stop(self, call: ApiCall) -> Any:
        vm = self._vm(call, privilege="VM.PowerMgmt")

        async def work() -> None:
            self._check_lock(vm)
            vm.running = False
            vm.started_at = None

        return self._task(call, vm.node, "qmstop", str(vm.vmid), work)

    async def _shutdown(self, call: ApiCall) -> Any:
        vm = self._vm(call, privilege="VM.PowerMgmt")
        timeout = int(call.params.get("timeout", "60"))
        force = as_bool(call.params.get("forceStop", "0"))

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

    async def _reset(self, call: ApiCall) -> Any:
        vm = self._vm(call, privilege="VM.PowerMgmt")
        if not vm.running:
            raise ApiError(500, f"VM {vm.vmid} not running")

        async def work() -> None:
            self._check_lock(vm)
            vm.started_at = self._now()

        return self._task(call, vm.node, "qmreset", str(vm.vmid), work)

    async def _destroy(self, call: ApiCall) -> Any:
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
        return f"VM.GuestAgent.{kind}" if major_version(self.version) >= 9 else "VM.Monitor"

    def _agent_vm(self, call: ApiCall, kind: str = "Audit") -> FakeVm:
        vm = self._vm(call, privilege=self._agent_privilege(kind))
        if vm.config.get("agent") not in ("1", 1):
            raise ApiError(500, "No QEMU guest agent configured")
        if not vm.running:
            raise ApiError(500, f"VM {vm.vmid} is not running")
        if not self._agent_up(vm):
            raise ApiError(500, "QEMU guest agent is not running")
        return vm

    def _agent_command(self, command: str) -> Handler:
        async def handle(call: ApiCall) -> Any:
            vm = self._agent_vm(call)
            if command == "ping":
                return {"result": {}}
            if command == "get-host-name":
                return {"result": {"host-name": vm.config.get("name", "")}}
            if command == "get-osinfo":
                if vm.agent_lacks_osinfo:
                    raise ApiError(
                        500, "Agent error: The command guest-get-osinfo has not been found"
                    )
                return {"result": osinfo(vm)}
            return {"result": interfaces(vm)}

        return handle

    async def _file_read(self, call: ApiCall) -> Any:
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
