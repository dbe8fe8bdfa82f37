"""Real libvirt for tests: the daemons, the tiny guest, and a namespace of one's own.

:func:`check_libvirt` fails (never skips) with how to start libvirt when ``qemu:///system``
does not answer. :class:`LibvirtLab` makes, for one test run, a directory storage pool and a
template domain booting the tiny guest (:mod:`deskpool.testing.libvirt.guest`), all named
with a prefix of that run, and an owner tag of that run, so parallel runs on one host never
see each other's desktops; :meth:`LibvirtLab.remove` deletes every domain and volume of the
run (and those of earlier runs whose process is gone). The fixtures built on it are in
:mod:`deskpool.testing.libvirt.fixtures` (``pytest_plugins = [...]`` in a conftest).

libvirt-python (the ``libvirt`` module) is imported here; it is installed with the libvirt
driver (``deskpool-driver-libvirt``).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libvirt

from deskpool.testing.libvirt.guest import GuestImage, build_guest

__all__ = [
    "LOCAL_URI",
    "TCP_URI",
    "LibvirtLab",
    "LibvirtMissing",
    "check_libvirt",
    "sasl_password",
]

#: The local system connection the suite uses.
LOCAL_URI = "qemu:///system"
#: libvirtd's TCP listener on loopback, with SASL users (``scripts/ensure-libvirt.sh``).
TCP_URI = "qemu+tcp://127.0.0.1:16509/system"
#: The SASL user of the suite, and the root-only file with its password.
SASL_USER = "deskpool-test"
SASL_SECRET = Path("/etc/libvirt/deskpool-test-sasl")
#: Where run pools keep their volumes.
LAB_ROOT = Path(os.environ.get("DESKPOOL_LIBVIRT_LAB", "/var/tmp/deskpool-libvirt"))
#: The namespace of the metadata marking templates (the driver's; the driver is not imported).
TEMPLATE_NAMESPACE = "https://deskpool.dev/xmlns/libvirt/1"

_HOW_TO_START = (
    "Run `bash scripts/ensure-libvirt.sh` as root (`make test` does): it installs QEMU and "
    "libvirt and starts `virtlogd -d` and `libvirtd -d --listen`."
)
_RUN_PREFIX = re.compile(r"^dpt(\d+)x[0-9a-f]{6}")


class LibvirtMissing(Exception):
    """libvirt is not there or does not answer; the message says how to start it."""


def _quiet(_context: object, _error: object) -> None:
    """Keep libvirt's default handler from printing errors the caller handles."""


def check_libvirt(uri: str = LOCAL_URI) -> None:
    """Open and close ``uri``, or raise :class:`LibvirtMissing` saying how to start libvirt."""
    libvirt.registerErrorHandler(_quiet, None)
    try:
        connection = libvirt.open(uri)
    except libvirt.libvirtError as error:
        raise LibvirtMissing(
            f"libvirt does not answer at {uri} ({error}). {_HOW_TO_START}"
        ) from None
    connection.close()


def sasl_password() -> str:
    """The suite's SASL user's password (``scripts/ensure-libvirt.sh`` made it)."""
    try:
        return SASL_SECRET.read_text().strip()
    except OSError as error:
        raise LibvirtMissing(f"cannot read {SASL_SECRET} ({error}). {_HOW_TO_START}") from None


def _accelerated() -> bool:
    with contextlib.suppress(OSError):
        return bool(re.search(r"\b(vmx|svm)\b", Path("/proc/cpuinfo").read_text()))
    return False


def template_xml(name: str, guest: GuestImage, pool: str, volume: str, memory_mib: int) -> str:
    """A template domain booting ``guest`` with one disk, the agent channel, VNC and a NIC."""
    domain = ET.Element("domain", {"type": "kvm" if _accelerated() else "qemu"})
    ET.SubElement(domain, "name").text = name
    ET.SubElement(domain, "memory", {"unit": "MiB"}).text = str(memory_mib)
    ET.SubElement(domain, "vcpu").text = "1"
    metadata = ET.SubElement(domain, "metadata")
    ET.SubElement(
        metadata,
        f"{{{TEMPLATE_NAMESPACE}}}instance",
        {"template": "yes", "os": "linux"},
    )
    os_element = ET.SubElement(domain, "os")
    ET.SubElement(os_element, "type", {"arch": "x86_64", "machine": "pc"}).text = "hvm"
    ET.SubElement(os_element, "kernel").text = str(guest.kernel)
    ET.SubElement(os_element, "initrd").text = str(guest.initrd)
    ET.SubElement(os_element, "cmdline").text = guest.cmdline
    features = ET.SubElement(domain, "features")
    ET.SubElement(features, "acpi")
    ET.SubElement(domain, "on_poweroff").text = "destroy"
    ET.SubElement(domain, "on_reboot").text = "restart"
    ET.SubElement(domain, "on_crash").text = "destroy"
    devices = ET.SubElement(domain, "devices")
    disk = ET.SubElement(devices, "disk", {"type": "volume", "device": "disk"})
    ET.SubElement(disk, "driver", {"name": "qemu", "type": "raw"})
    ET.SubElement(disk, "source", {"pool": pool, "volume": volume})
    ET.SubElement(disk, "target", {"dev": "vda", "bus": "virtio"})
    interface = ET.SubElement(devices, "interface", {"type": "user"})
    ET.SubElement(interface, "model", {"type": "virtio"})
    serial = ET.SubElement(devices, "serial", {"type": "pty"})
    ET.SubElement(serial, "target", {"port": "0"})
    channel = ET.SubElement(devices, "channel", {"type": "unix"})
    ET.SubElement(channel, "target", {"type": "virtio", "name": "org.qemu.guest_agent.0"})
    ET.SubElement(
        devices, "graphics", {"type": "vnc", "port": "-1", "autoport": "yes", "listen": "127.0.0.1"}
    )
    video = ET.SubElement(devices, "video")
    ET.SubElement(video, "model", {"type": "vga"})
    ET.SubElement(devices, "memballoon", {"model": "none"})
    return ET.tostring(domain, encoding="unicode")


def _pool_xml(name: str, path: Path) -> str:
    pool = ET.Element("pool", {"type": "dir"})
    ET.SubElement(pool, "name").text = name
    target = ET.SubElement(pool, "target")
    ET.SubElement(target, "path").text = str(path)
    return ET.tostring(pool, encoding="unicode")


def _volume_xml(name: str, mib: int) -> str:
    volume = ET.Element("volume")
    ET.SubElement(volume, "name").text = name
    ET.SubElement(volume, "capacity", {"unit": "MiB"}).text = str(mib)
    ET.SubElement(volume, "allocation", {"unit": "MiB"}).text = str(mib)
    target = ET.SubElement(volume, "target")
    ET.SubElement(target, "format", {"type": "raw"})
    return ET.tostring(volume, encoding="unicode")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class LibvirtLab:
    """One test run's namespace on the local libvirt: a storage pool, a template, a tag.

    :param prefix: the names of the run's pool, template and clones start with it.
    :param uri: the libvirt connection the lab uses.
    :param memory_mib: the template's memory.
    :param disk_mib: the size of the template's disk, a raw volume of random data (so a full
        clone takes a moment: long enough to interrupt it).
    """

    prefix: str = field(default_factory=lambda: f"dpt{os.getpid()}x{secrets.token_hex(3)}")
    uri: str = LOCAL_URI
    memory_mib: int = 160
    disk_mib: int = 96

    @property
    def pool(self) -> str:
        """The run's storage pool."""
        return f"{self.prefix}-pool"

    @property
    def template(self) -> str:
        """The run's template domain (the tiny guest)."""
        return f"{self.prefix}-template"

    @property
    def owner_tag(self) -> str:
        """The owner tag of the run's desktops (so other runs' desktops are not ours)."""
        return f"deskpool-{self.prefix}"

    @property
    def base_volume(self) -> str:
        """The template's disk."""
        return f"{self.prefix}-base.img"

    @property
    def folder(self) -> Path:
        """Where the run's volumes are."""
        return LAB_ROOT / self.prefix

    def _connect(self) -> Any:
        check_libvirt(self.uri)
        return libvirt.open(self.uri)

    def create(self) -> LibvirtLab:
        """Build (or reuse) the guest; make the pool, its base volume and the template."""
        guest = build_guest()
        connection = self._connect()
        try:
            self._remove_abandoned(connection)
            self.folder.mkdir(parents=True, exist_ok=True)
            pool = connection.storagePoolDefineXML(_pool_xml(self.pool, self.folder), 0)
            pool.create(0)
            base = pool.createXML(_volume_xml(self.base_volume, self.disk_mib), 0)
            with open(base.path(), "r+b") as disk:
                for _ in range(self.disk_mib):
                    disk.write(os.urandom(1024 * 1024))
            pool.refresh(0)
            connection.defineXML(
                template_xml(self.template, guest, self.pool, self.base_volume, self.memory_mib)
            )
        finally:
            connection.close()
        return self

    def domains(self, connection: Any) -> list[Any]:
        """The run's domains: its template, and every domain carrying its owner tag."""
        mine = []
        for domain in connection.listAllDomains(0):
            with contextlib.suppress(libvirt.libvirtError):
                if domain.name().startswith(self.prefix) or (
                    f">{self.owner_tag}<" in domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
                ):
                    mine.append(domain)
        return mine

    def volumes(self, connection: Any) -> list[str]:
        """The names of the volumes in the run's pool."""
        pool = connection.storagePoolLookupByName(self.pool)
        with contextlib.suppress(libvirt.libvirtError):  # refused while a volume is copied
            pool.refresh(0)
        return sorted(pool.listVolumes())

    def remove(self) -> None:
        """Delete the run's domains (with their NVRAM), volumes, pool and folder."""
        connection = self._connect()
        try:
            self._remove_namespace(connection, self.prefix, self.owner_tag)
        finally:
            connection.close()

    @staticmethod
    def _remove_namespace(connection: Any, prefix: str, owner_tag: str) -> None:
        for domain in connection.listAllDomains(0):
            with contextlib.suppress(libvirt.libvirtError):
                xml = domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
                if domain.name().startswith(prefix) or f">{owner_tag}<" in xml:
                    with contextlib.suppress(libvirt.libvirtError):
                        domain.destroy()
                    domain.undefineFlags(
                        libvirt.VIR_DOMAIN_UNDEFINE_NVRAM
                        | libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE
                        | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
                    )
        with contextlib.suppress(libvirt.libvirtError):
            pool = connection.storagePoolLookupByName(f"{prefix}-pool")
            with contextlib.suppress(libvirt.libvirtError):
                pool.refresh(0)
                for volume in pool.listAllVolumes(0):
                    with contextlib.suppress(libvirt.libvirtError):
                        volume.delete(0)
            with contextlib.suppress(libvirt.libvirtError):
                pool.destroy()
            pool.undefine()
        shutil.rmtree(LAB_ROOT / prefix, ignore_errors=True)

    def _remove_abandoned(self, connection: Any) -> None:
        """Remove the namespaces of earlier runs whose process is gone."""
        for pool in connection.listAllStoragePools(0):
            match = _RUN_PREFIX.match(pool.name())
            if match and not _alive(int(match.group(1))):
                prefix = match.group(0)
                self._remove_namespace(connection, prefix, f"deskpool-{prefix}")
