"""Proxmox VE's values as the driver contract's, and the driver's options: pure, no I/O.

Tags, OS types, power states, the guest agent's answers and Windows' setup state are read
here; :mod:`deskpool_driver_proxmox.driver` does the talking.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from deskpool_driver_api import (
    CloneRequest,
    DesktopProtocol,
    DriverConfigurationError,
    OsType,
    PowerState,
)

#: Where Windows records its setup state (Microsoft: "Windows Setup States").
WINDOWS_STATE_FILE = r"C:\Windows\Setup\State\State.ini"
WINDOWS_SETUP_COMPLETE = "IMAGE_STATE_COMPLETE"

DEFAULT_DESKTOP_PORTS = {DesktopProtocol.RDP: 3389, DesktopProtocol.VNC: 5900}
#: Connection parameters per protocol unless the ``desktop_parameters`` option says otherwise.
DEFAULT_DESKTOP_PARAMETERS: dict[DesktopProtocol, dict[str, str]] = {
    DesktopProtocol.RDP: {"security": "any", "ignore-cert": "true"},
    DesktopProtocol.VNC: {},
}
#: How many times a clone retries when another client took the id ``/cluster/nextid`` gave.
CLONE_ID_ATTEMPTS = 5
#: Polls without finding a clone whose task id is unknown before deciding it never started.
ABANDONED_CLONE_MISSES = 10

_TAG_SEPARATORS = re.compile(r"[;, ]+")
#: The options a connection may set.
KNOWN_OPTIONS = {
    "task_poll_interval",
    "request_timeout",
    "desktop_ports",
    "desktop_parameters",
    "abandoned_clone_grace",
}
#: ``get-osinfo`` ids of systems that are neither Windows nor Linux.
OTHER_OS_IDS = {"freebsd", "netbsd", "openbsd", "solaris", "illumos"}


def parse_tags(text: str | None) -> tuple[str, ...]:
    """Tags from a Proxmox VE ``tags`` value (separated by ``;``, ``,`` or spaces), sorted."""
    return tuple(sorted({tag.lower() for tag in _TAG_SEPARATORS.split(text or "") if tag}))


def os_type_of(ostype: str | None) -> OsType:
    """The OS family of a Proxmox VE ``ostype`` (``win11``, ``l26``, ``other``...)."""
    value = (ostype or "").lower()
    if value.startswith("win") or value in ("wxp", "w2k", "w2k3", "w2k8", "wvista"):
        return OsType.WINDOWS
    if value in ("l24", "l26"):
        return OsType.LINUX
    return OsType.OTHER


def power_state_of(status: dict[str, Any]) -> PowerState:
    """The power state from a VM status (``status``, and ``qmpstatus`` when running)."""
    value = status.get("status")
    if value == "running":
        return PowerState.PAUSED if status.get("qmpstatus") == "paused" else PowerState.RUNNING
    if value == "stopped":
        return PowerState.STOPPED
    return PowerState.UNKNOWN


def windows_setup_complete(state_ini: str) -> bool:
    """Whether ``State.ini`` says Windows setup is complete (``IMAGE_STATE_COMPLETE``)."""
    for line in state_ini.splitlines():
        key, _, value = line.partition("=")
        if key.strip().lower() == "imagestate":
            return value.strip().upper() == WINDOWS_SETUP_COMPLETE
    return False


def guest_addresses(interfaces: Any) -> tuple[str, ...]:
    """Usable addresses from ``network-get-interfaces`` (IPv4 first; no loopback, link-local)."""
    ipv4: list[str] = []
    ipv6: list[str] = []
    for interface in interfaces if isinstance(interfaces, list) else []:
        for item in interface.get("ip-addresses") or []:
            address = str(item.get("ip-address", ""))
            kind = item.get("ip-address-type")
            if not address:
                continue
            if kind == "ipv4" and not address.startswith(("127.", "169.254.")):
                ipv4.append(address)
            elif kind == "ipv6" and address != "::1" and not address.lower().startswith("fe80"):
                ipv6.append(address)
    return tuple(dict.fromkeys(ipv4 + ipv6))


def per_protocol(options: dict[str, Any], name: str) -> dict[DesktopProtocol, Any]:
    """The option ``name``, a mapping keyed by desktop protocol (``rdp``, ``vnc``)."""
    value = options.get(name) or {}
    if not isinstance(value, dict):
        raise DriverConfigurationError(f"{name} must map protocols (rdp, vnc) to settings")
    out = {}
    for key, item in value.items():
        try:
            out[DesktopProtocol(key)] = item
        except ValueError:
            raise DriverConfigurationError(f"{name}: unknown protocol {key!r}") from None
    return out


def positive_seconds(options: dict[str, Any], name: str, default: float) -> float:
    """The option ``name``, a positive number of seconds (``default`` when absent)."""
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise DriverConfigurationError(f"option {name} must be a positive number of seconds")
    return float(value)


@dataclass(frozen=True)
class PendingClone:
    """A clone whose caller went away: what the background tagger needs to finish it."""

    vm_id: str
    source: str
    target: str
    request: CloneRequest
    #: The clone task's UPID, when Proxmox VE answered the POST before the caller left.
    upid: str | None
