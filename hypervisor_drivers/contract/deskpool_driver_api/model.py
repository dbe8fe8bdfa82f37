"""The values that cross the driver contract: plain frozen dataclasses, no behaviour.

A driver receives a :class:`ClusterConnection` and returns the other values. Secrets never
appear in a ``repr``: the credentials of a connection and of a desktop endpoint are shown as
their keys with redacted values, so a value logged by mistake leaks nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

#: The value shown in place of a secret.
REDACTED = "**********"


def _frozen_mapping(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


def _redacted(credentials: Mapping[str, Any]) -> str:
    inner = ", ".join(f"{key!r}: {REDACTED!r}" for key in sorted(credentials))
    return "{" + inner + "}"


class OsType(enum.StrEnum):
    """The guest operating system family of a template or a desktop."""

    LINUX = "linux"
    WINDOWS = "windows"
    OTHER = "other"


class PowerState(enum.StrEnum):
    """The power state of a virtual machine as its hypervisor reports it."""

    RUNNING = "running"
    STOPPED = "stopped"
    PAUSED = "paused"
    #: The hypervisor cannot tell (for example, the VM's node is unreachable).
    UNKNOWN = "unknown"


class DesktopProtocol(enum.StrEnum):
    """The remote desktop protocols a desktop is shown with (the desktop daemon's ``select``)."""

    RDP = "rdp"
    VNC = "vnc"


@dataclass(frozen=True)
class DriverCapabilities:
    """What a driver can do; the platform reads it before offering an option.

    :param linked_clone: clones can share the template's disks (copy-on-write).
    :param full_clone: clones can copy the template's disks.
    :param windows_readiness: :meth:`~deskpool_driver_api.HypervisorDriver.windows_ready` can
        tell when Windows has finished Sysprep/OOBE.
    :param guest_agent: the driver talks to a guest agent (ping, addresses, OS info).
    :param desktop_protocols: the protocols
        :meth:`~deskpool_driver_api.HypervisorDriver.desktop_endpoint` may answer (and accepts
        as a preference), the driver's default first.
    :param node_selection: a clone can be placed on a chosen node.
    :param storage_selection: a full clone can be placed on a chosen storage.
    :param vm_events: the driver watches its hypervisor and reports VMs that start, stop or
        disappear to ``context.events`` as they do (contract 0.3.1), once
        :meth:`~deskpool_driver_api.HypervisorDriver.watch_events` was called.
    """

    linked_clone: bool = False
    full_clone: bool = True
    windows_readiness: bool = False
    guest_agent: bool = False
    desktop_protocols: tuple[DesktopProtocol, ...] = ()
    node_selection: bool = False
    storage_selection: bool = False
    vm_events: bool = False


@dataclass(frozen=True, repr=False)
class ClusterConnection:
    """How to reach one cluster: what a cluster record holds, decrypted.

    :param endpoint: the API address (``https://pve1.example.com:8006`` or a bare host name;
        each driver documents what it accepts).
    :param credentials: secret values (API token id and secret...); never shown in ``repr``.
    :param tls_verify: verify the server certificate (on by default).
    :param ca_cert: PEM text of a CA certificate to trust instead of the system's.
    :param fingerprint: SHA-256 fingerprint of the server certificate to pin (hex, colons
        optional); when set the chain is not verified, only the pin.
    :param options: driver-specific settings, documented by each driver.
    :param secret_options: the JSON pointers into ``options`` of the values the driver
        declares secret (``/required_token``, ``/desktop/password``; new in 0.4): never shown
        in ``repr``.
    """

    endpoint: str
    credentials: Mapping[str, str] = field(default_factory=dict)
    tls_verify: bool = True
    ca_cert: str | None = None
    fingerprint: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    secret_options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "credentials", _frozen_mapping(self.credentials))
        object.__setattr__(self, "options", _frozen_mapping(self.options))
        object.__setattr__(self, "secret_options", tuple(self.secret_options))

    def _shown_options(self) -> dict[str, Any]:
        shown = dict(self.options)
        for pointer in self.secret_options:
            name, _, key = pointer[1:].partition("/")
            name = name.replace("~1", "/").replace("~0", "~")
            key = key.replace("~1", "/").replace("~0", "~")
            if not key and name in shown:
                shown[name] = REDACTED
            elif key and isinstance(shown.get(name), Mapping) and key in shown[name]:
                shown[name] = {**shown[name], key: REDACTED}
        return shown

    def __repr__(self) -> str:
        return (
            f"ClusterConnection(endpoint={self.endpoint!r}, "
            f"credentials={_redacted(self.credentials)}, tls_verify={self.tls_verify!r}, "
            f"ca_cert={'<pem>' if self.ca_cert else None!r}, fingerprint={self.fingerprint!r}, "
            f"options={self._shown_options()!r})"
        )

    __str__ = __repr__


@dataclass(frozen=True)
class ClusterInfo:
    """What :meth:`~deskpool_driver_api.HypervisorDriver.check_connection` learned.

    :param product: the hypervisor product (``Proxmox VE``, ``deskpool simulator``).
    :param version: its version string.
    :param cluster_name: the cluster's own name, if it has one.
    :param details: anything else worth showing an administrator.
    """

    product: str
    version: str
    cluster_name: str | None = None
    details: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Node:
    """A hypervisor host of the cluster.

    :param name: the node's name, as clone placement takes it.
    :param online: whether the cluster currently reaches it.
    :param cpu_count: logical CPUs, when known.
    :param memory_bytes: total memory, when known.
    """

    name: str
    online: bool
    cpu_count: int | None = None
    memory_bytes: int | None = None


@dataclass(frozen=True)
class Template:
    """A VM template desktops are cloned from.

    :param id: the hypervisor's identifier, passed to ``clone``.
    :param name: the template's display name.
    :param node: the node holding it.
    :param os_type: the guest OS family (decides whether Windows readiness is awaited).
    :param description: free text from the hypervisor.
    """

    id: str
    name: str
    node: str
    os_type: OsType
    description: str = ""


@dataclass(frozen=True)
class VirtualMachine:
    """A virtual machine as the hypervisor reports it.

    :param id: the hypervisor's identifier (may be reused after deletion on real clusters).
    :param name: the VM's name.
    :param node: the node it runs on.
    :param power_state: its power state.
    :param tags: its tags, sorted; deskpool's ownership lives here.
    :param desktop_id: the desktop id named by the tags, if any; the base class fills it in
        from the tags (drivers leave it ``None``).
    :param busy: an operation (a clone, a migration) holds the VM.
    :param template: whether the VM is itself a template.
    """

    id: str
    name: str
    node: str
    power_state: PowerState
    tags: tuple[str, ...] = ()
    desktop_id: str | None = None
    busy: bool = False
    template: bool = False


@dataclass(frozen=True)
class GuestInfo:
    """What the guest agent reports.

    :param addresses: the guest's IP addresses, IPv4 first, loopback and link-local excluded.
    :param hostname: the guest's host name, when reported.
    :param os_name: the OS's pretty name (``Windows 11 Pro``, ``Ubuntu 22.04.4 LTS``).
    :param os_type: the OS family.
    """

    addresses: tuple[str, ...]
    hostname: str | None = None
    os_name: str | None = None
    os_type: OsType = OsType.OTHER


@dataclass(frozen=True, repr=False)
class DesktopEndpoint:
    """How the desktop daemon (guacd) reaches a VM's desktop.

    :param protocol: the protocol to speak.
    :param host: host name or address of the desktop, as the desktop daemon sees it.
    :param port: TCP port of the protocol's server.
    :param credentials: secrets for that connection by their Guacamole parameter names
        (``username``, ``password``, ``domain``); never shown in ``repr``. Empty when the user
        signs in on the desktop itself.
    :param parameters: non-secret protocol settings by their Guacamole parameter names
        (``security``, ``ignore-cert``, ``color-depth``...).
    :raises ValueError: an empty host or a port outside 1..65535.
    """

    protocol: DesktopProtocol
    host: str
    port: int
    credentials: Mapping[str, str] = field(default_factory=dict)
    parameters: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "protocol", DesktopProtocol(self.protocol))
        if not self.host:
            raise ValueError("a desktop endpoint needs a host")
        if isinstance(self.port, bool) or not 0 < self.port < 65536:
            raise ValueError(f"desktop endpoint port {self.port!r} is not in 1..65535")
        object.__setattr__(self, "credentials", _frozen_mapping(self.credentials))
        object.__setattr__(self, "parameters", _frozen_mapping(self.parameters))

    def __repr__(self) -> str:
        return (
            f"DesktopEndpoint(protocol={self.protocol.value!r}, host={self.host!r}, "
            f"port={self.port!r}, credentials={_redacted(self.credentials)}, "
            f"parameters={dict(self.parameters)!r})"
        )

    __str__ = __repr__


@dataclass(frozen=True)
class CloneRequest:
    """A clone as the base class hands it to :meth:`~deskpool_driver_api.HypervisorDriver.do_clone`.

    :param template_id: the template to clone.
    :param name: the new VM's name.
    :param desktop_id: the desktop the VM is for.
    :param tags: the ownership tags the new VM must carry (owner tag and desktop tag).
    :param linked: a linked clone (shares the template's disks) rather than a full copy.
    :param node: the node to place it on; ``None`` lets the driver choose.
    :param storage: the storage for a full clone's disks; ``None`` for the driver's default.
    :param description: a human-readable note to store with the VM, naming deskpool.
    """

    template_id: str
    name: str
    desktop_id: str
    tags: tuple[str, ...]
    linked: bool
    node: str | None = None
    storage: str | None = None
    description: str = ""
