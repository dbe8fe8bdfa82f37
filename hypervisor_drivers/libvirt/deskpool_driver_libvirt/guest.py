"""A libvirt domain's guest: its power state, its guest agent and Windows' setup state.

A domain found on a host is a :class:`Located`. Everything here is blocking libvirt calls,
made in the driver's thread (:meth:`~deskpool_driver_libvirt.hosts.Hosts.run`).

The guest agent (qemu-guest-agent) is asked through ``virDomainQemuAgentCommand``
(:class:`GuestAgent`): an agent that does not answer is :class:`AgentNotRunning`, a domain that
does not run is :class:`VmNotRunning`. Windows is ready when the agent reads
``ImageState=IMAGE_STATE_COMPLETE`` in ``State.ini`` (:data:`WINDOWS_STATE_FILE`), which
Windows writes when Sysprep's specialize and oobeSystem passes are done.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import libvirt
import libvirt_qemu

from deskpool_driver_api import AgentNotRunning, GuestInfo, OsType, PowerState, VmNotRunning

#: Where Windows records its setup state (read through the guest agent).
WINDOWS_STATE_FILE = "C:\\Windows\\Setup\\State\\State.ini"

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


def domain_power_state(located: Located) -> PowerState:
    """The power state of a located domain (in a thread)."""
    state, _reason = located.domain.state()
    return power_state_of(state)


class GuestAgent:
    """The guest agents of a driver's domains, each command answered within ``timeout`` s."""

    def __init__(self, timeout: int) -> None:
        self.timeout = timeout

    def command(self, located: Located, command: str, **arguments: Any) -> Any:
        """The answer of one guest agent command (in a thread)."""
        message: dict[str, Any] = {"execute": command}
        if arguments:
            message["arguments"] = arguments
        try:
            answer = libvirt_qemu.qemuAgentCommand(
                located.domain, json.dumps(message), self.timeout, 0
            )
        except libvirt.libvirtError as error:
            code = error.get_error_code()
            if code == libvirt.VIR_ERR_OPERATION_INVALID and domain_power_state(located) is not (
                PowerState.RUNNING
            ):
                raise VmNotRunning("the domain does not run") from None
            if code in (libvirt.VIR_ERR_NO_DOMAIN,):
                raise
            raise AgentNotRunning(
                f"the guest agent did not answer {command}: {error.get_error_message()}"
            ) from None
        return json.loads(answer).get("return")

    def answers(self, located: Located) -> bool:
        """Whether the agent answers ``guest-ping``."""
        try:
            self.command(located, "guest-ping")
        except AgentNotRunning:
            return False
        return True

    def os(self, located: Located) -> tuple[str | None, OsType]:
        """The guest's operating system: its name and type."""
        info = self.command(located, "guest-get-osinfo") or {}
        os_id = str(info.get("id", "")).lower()
        name = info.get("pretty-name") or info.get("name")
        if os_id == "mswindows":
            return name, OsType.WINDOWS
        return name, OsType.LINUX if os_id or info.get("kernel-release") else OsType.OTHER

    def addresses(self, located: Located) -> tuple[str, ...]:
        """The guest's addresses, IPv4 first."""
        return guest_addresses(self.command(located, "guest-network-get-interfaces") or [])

    def info(self, located: Located) -> GuestInfo:
        """What the guest says of itself: addresses, host name, operating system."""
        addresses = self.addresses(located)
        os_name, os_type = self.os(located)
        try:
            hostname = (self.command(located, "guest-get-host-name") or {}).get("host-name")
        except AgentNotRunning:
            hostname = None
        return GuestInfo(addresses=addresses, hostname=hostname, os_name=os_name, os_type=os_type)

    def read_file(self, located: Located, path: str) -> str:
        """A text file of the guest, read through the agent."""
        handle = self.command(located, "guest-file-open", path=path, mode="r")
        try:
            chunks = []
            while True:
                read = self.command(located, "guest-file-read", handle=handle, count=65536)
                chunks.append(base64.b64decode(read.get("buf-b64", "")))
                if read.get("eof") or not read.get("count"):
                    break
            return b"".join(chunks).decode("utf-8", "replace").replace("\x00", "")
        finally:
            self.command(located, "guest-file-close", handle=handle)

    def windows_ready(self, located: Located) -> bool:
        """Whether the guest is ready: any guest but Windows, or Windows whose setup is done."""
        try:
            _name, os_type = self.os(located)
            if os_type is not OsType.WINDOWS:
                return True
            return windows_setup_complete(self.read_file(located, WINDOWS_STATE_FILE))
        except AgentNotRunning:
            return False
