"""The values of the Proxmox VE API fake: its token, privileges, objects and parameter checks.

Everything here is plain data or a pure function; :mod:`.cluster` and :mod:`.vms` act on it and
:mod:`.server` serves it over HTTP.
"""

from __future__ import annotations

import asyncio
import re
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
    if major_version(version) >= 9:
        return _COMMON_PRIVILEGES | {"VM.GuestAgent.Audit", "VM.GuestAgent.FileRead"}
    return _COMMON_PRIVILEGES | {"VM.Monitor"}


def major_version(version: str) -> int:
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
    #: An old guest agent without ``guest-get-osinfo``.
    agent_lacks_osinfo: bool = False
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


Handler = Callable[["ApiCall"], Awaitable[Any]]


@dataclass
class ApiCall:
    """One authenticated API call being answered."""

    request: web.Request
    params: dict[str, str]
    user: str
    privileges: frozenset[str]

    def need(self, privilege: str, path: str) -> None:
        if privilege not in self.privileges:
            raise ApiError(403, f"Permission check failed ({path}, {privilege})")


@dataclass
class ApiMethod:
    """A method of the API: its parameters (name -> kind), required ones, and handler."""

    handler: Handler
    params: dict[str, str] = field(default_factory=dict)
    required: frozenset[str] = frozenset()


CONFIG_PARAMS = {
    "node": "node",
    "vmid": "vmid",
    "name": "dns-name",
    "description": "string",
    "tags": "tags",
    "delete": "string",
    "digest": "string",
    "skiplock": "bool",
}

CLONE_PARAMS = {
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


def as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def as_bool(value: str) -> bool:
    return value == "1"


def validate(params: Mapping[str, str], method: ApiMethod) -> None:
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


def error_response(error: ApiError) -> web.Response:
    message = error.message if error.message.endswith("\n") else error.message + "\n"
    reason = error.message.strip().splitlines()[0] if error.message.strip() else None
    if error.status >= 590:
        return web.Response(status=error.status, reason=reason, text="")
    body: dict[str, Any] = {"data": None, "message": message}
    if error.errors:
        body["errors"] = {key: value + "\n" for key, value in error.errors.items()}
    return web.json_response(body, status=error.status, reason=reason)


def osinfo(vm: FakeVm) -> dict[str, str]:
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


def interfaces(vm: FakeVm) -> list[dict[str, Any]]:
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
