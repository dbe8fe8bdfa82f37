"""Reading and deriving libvirt XML: templates, ownership metadata, clones, volumes. No I/O.

deskpool keeps everything it knows about a domain in the domain itself, in one metadata
element in its namespace (:data:`NAMESPACE`), so libvirt is the authoritative source:

- a template carries ``<deskpool:instance template="yes" os="linux"/>`` (``os``: ``linux``,
  ``windows`` or ``other``), which an operator sets with ``virsh metadata``;
- a desktop carries its ownership tags and the volumes deskpool created for it::

    <deskpool:instance>
      <deskpool:tag>deskpool</deskpool:tag>
      <deskpool:tag>deskpool-desktop-0b6f...</deskpool:tag>
      <deskpool:volume pool="default" name="desk-1-0b6f2c1a-vda.qcow2"/>
    </deskpool:instance>

A clone's XML is the template's with its own name, no UUID and no MAC addresses (libvirt
generates new ones), NVRAM of its own (the path dropped, so libvirt makes one from the
loader's template), a VNC port chosen at start, and each disk replaced by a new volume.
"""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from deskpool_driver_api import OsType

#: deskpool's XML namespace in domain metadata.
NAMESPACE = "https://deskpool.dev/xmlns/libvirt/1"
#: The prefix libvirt shows for it.
PREFIX = "deskpool"

ET.register_namespace(PREFIX, NAMESPACE)

_INSTANCE = f"{{{NAMESPACE}}}instance"
_TAG = f"{{{NAMESPACE}}}tag"
_VOLUME = f"{{{NAMESPACE}}}volume"


def _children(element: ET.Element, local: str) -> list[ET.Element]:
    """Children named ``local`` in deskpool's namespace or in none (``virsh metadata --set``)."""
    return [child for child in element if child.tag in (local, f"{{{NAMESPACE}}}{local}")]


class XmlProblem(ValueError):
    """The XML libvirt returned (or an operator wrote) is not what the driver can use."""


@dataclass(frozen=True)
class DiskSource:
    """A disk of a domain: its target device and where its data is.

    :param target: the guest device name (``vda``).
    :param kind: libvirt's disk type (``file``, ``volume``, ``block``...).
    :param path: the file or block device, for ``file`` and ``block`` disks.
    :param pool: the storage pool, for ``volume`` disks.
    :param volume: the volume's name, for ``volume`` disks.
    """

    target: str
    kind: str
    path: str | None = None
    pool: str | None = None
    volume: str | None = None


@dataclass(frozen=True)
class VolumeRef:
    """A volume deskpool created for a desktop, as its metadata records it."""

    pool: str
    name: str


@dataclass(frozen=True)
class Graphics:
    """A domain's VNC display: the listen address, the port (``None`` until it runs)."""

    listen: str | None
    port: int | None
    password: str | None = None


@dataclass(frozen=True)
class DomainFacts:
    """What the driver reads from one domain's XML.

    :param uuid: the domain's UUID (the VM id).
    :param name: its name.
    :param template: whether deskpool's metadata marks it as a template.
    :param os_type: the template's OS family (``other`` when unsaid).
    :param tags: the ownership tags in deskpool's metadata.
    :param volumes: the volumes deskpool created for it.
    :param cloning: the clone that made it has not finished (its volumes may be missing).
    :param disks: its disks (``device="disk"``).
    :param vnc: its VNC display, if it has one.
    :param description: its description.
    """

    uuid: str
    name: str
    template: bool
    os_type: OsType
    tags: tuple[str, ...]
    volumes: tuple[VolumeRef, ...]
    cloning: bool
    disks: tuple[DiskSource, ...]
    vnc: Graphics | None
    description: str


def _parse(xml: str) -> ET.Element:
    try:
        return ET.fromstring(xml)
    except ET.ParseError as error:
        raise XmlProblem(f"libvirt returned XML that does not parse: {error}") from None


def _instance(root: ET.Element) -> ET.Element | None:
    metadata = root.find("metadata")
    return None if metadata is None else metadata.find(_INSTANCE)


def _os_type(value: str | None) -> OsType:
    try:
        return OsType((value or "other").lower())
    except ValueError:
        return OsType.OTHER


def _disks(root: ET.Element) -> tuple[DiskSource, ...]:
    found = []
    for disk in root.findall("devices/disk"):
        if disk.get("device", "disk") != "disk":
            continue
        target = disk.find("target")
        source = disk.find("source")
        dev = target.get("dev", "") if target is not None else ""
        attrs = source.attrib if source is not None else {}
        found.append(
            DiskSource(
                target=dev,
                kind=disk.get("type", "file"),
                path=attrs.get("file") or attrs.get("dev"),
                pool=attrs.get("pool"),
                volume=attrs.get("volume"),
            )
        )
    return tuple(found)


def _vnc(root: ET.Element) -> Graphics | None:
    for graphics in root.findall("devices/graphics"):
        if graphics.get("type") != "vnc":
            continue
        listen = graphics.get("listen")
        element = graphics.find("listen")
        if element is not None and element.get("address"):
            listen = element.get("address")
        try:
            port = int(graphics.get("port", "-1"))
        except ValueError:
            port = -1
        return Graphics(
            listen=listen, port=port if 0 < port < 65536 else None, password=graphics.get("passwd")
        )
    return None


def read_domain(xml: str) -> DomainFacts:
    """The facts of one domain's XML (``virDomainGetXMLDesc``).

    :raises XmlProblem: the XML does not parse or has no UUID.
    """
    root = _parse(xml)
    uuid = (root.findtext("uuid") or "").strip()
    if not uuid:
        raise XmlProblem("a domain's XML has no uuid")
    instance = _instance(root)
    template = instance is not None and instance.get("template", "").lower() in ("yes", "true")
    tags: tuple[str, ...] = ()
    volumes: tuple[VolumeRef, ...] = ()
    cloning = False
    if instance is not None and not template:
        tags = tuple(sorted({(t.text or "").strip() for t in _children(instance, "tag")} - {""}))
        volumes = tuple(
            VolumeRef(pool=v.get("pool", ""), name=v.get("name", ""))
            for v in _children(instance, "volume")
            if v.get("pool") and v.get("name")
        )
        cloning = instance.get("cloning", "") == "yes"
    return DomainFacts(
        uuid=uuid,
        name=(root.findtext("name") or "").strip(),
        template=template,
        os_type=_os_type(instance.get("os") if instance is not None else None),
        tags=tags,
        volumes=volumes,
        cloning=cloning,
        disks=_disks(root),
        vnc=_vnc(root),
        description=(root.findtext("description") or "").strip(),
    )


def template_metadata(os_type: OsType) -> str:
    """The metadata element that marks a domain as a template (for ``virsh metadata``)."""
    element = ET.Element(_INSTANCE, {"template": "yes", "os": os_type.value})
    return ET.tostring(element, encoding="unicode")


def _desktop_instance(
    tags: Iterable[str], volumes: Iterable[VolumeRef], *, cloning: bool
) -> ET.Element:
    element = ET.Element(_INSTANCE, {"cloning": "yes"} if cloning else {})
    for tag in sorted(tags):
        ET.SubElement(element, _TAG).text = tag
    for volume in volumes:
        ET.SubElement(element, _VOLUME, {"pool": volume.pool, "name": volume.name})
    return element


def clone_xml(
    template_xml: str,
    *,
    name: str,
    description: str,
    tags: Iterable[str],
    volumes: Mapping[str, VolumeRef],
    cloning: bool,
    uuid: str | None = None,
) -> str:
    """The XML of a new domain cloned from ``template_xml`` (its inactive XML).

    :param name: the new domain's name.
    :param description: shown by ``virsh desc`` and virt-manager.
    :param tags: the ownership tags.
    :param volumes: the new volume of each disk, by target device; every disk of the
        template must have one.
    :param cloning: mark the clone as unfinished (its volumes are made after it is defined).
    :param uuid: the new domain's UUID; libvirt makes one when ``None``.
    :raises XmlProblem: a disk has no new volume.
    """
    root = copy.deepcopy(_parse(template_xml))
    root.attrib.pop("id", None)
    for tag in ("uuid", "description", "metadata", "genid"):
        for element in root.findall(tag):
            root.remove(element)
    name_element = root.find("name")
    if name_element is None:
        name_element = ET.SubElement(root, "name")
    name_element.text = name
    if uuid is not None:
        uuid_element = ET.Element("uuid")
        uuid_element.text = uuid
        root.insert(list(root).index(name_element) + 1, uuid_element)
        name_element = uuid_element
    described = ET.Element("description")
    described.text = description
    root.insert(list(root).index(name_element) + 1, described)
    metadata = ET.Element("metadata")
    metadata.append(_desktop_instance(tags, volumes.values(), cloning=cloning))
    root.insert(list(root).index(described) + 1, metadata)

    os_element = root.find("os")
    if os_element is not None:
        for nvram in os_element.findall("nvram"):
            nvram.text = None  # libvirt makes this domain's own from the loader's template
            for source in nvram.findall("source"):
                nvram.remove(source)
    devices = root.find("devices")
    if devices is not None:
        for interface in devices.findall("interface"):
            for mac in interface.findall("mac"):
                interface.remove(mac)
            for target in interface.findall("target"):
                interface.remove(target)
        for graphics in devices.findall("graphics"):
            if graphics.get("type") in ("vnc", "spice"):
                graphics.set("autoport", "yes")
                graphics.attrib.pop("port", None)
                graphics.attrib.pop("tlsPort", None)
                graphics.attrib.pop("websocket", None)
        for disk in devices.findall("disk"):
            if disk.get("device", "disk") != "disk":
                continue
            disk_target = disk.find("target")
            dev = disk_target.get("dev", "") if disk_target is not None else ""
            if dev not in volumes:
                raise XmlProblem(f"the template's disk {dev!r} has no volume for the clone")
            disk.set("type", "volume")
            for child in list(disk):
                if child.tag in ("source", "backingStore", "driver"):
                    disk.remove(child)
            driver = ET.Element("driver", {"name": "qemu", "type": "qcow2"})
            source = ET.Element("source", {"pool": volumes[dev].pool, "volume": volumes[dev].name})
            disk.insert(0, source)
            disk.insert(0, driver)
    return ET.tostring(root, encoding="unicode")


def finished_clone_xml(xml: str) -> str:
    """A cloned domain's (inactive) XML without the mark of an unfinished clone."""
    root = _parse(xml)
    instance = _instance(root)
    if instance is not None:
        instance.attrib.pop("cloning", None)
    return ET.tostring(root, encoding="unicode")


def volume_xml(
    name: str, capacity: int, *, backing_path: str | None = None, backing_format: str = "raw"
) -> str:
    """A qcow2 volume of ``capacity`` bytes, backed by ``backing_path`` for a linked clone."""
    volume = ET.Element("volume")
    ET.SubElement(volume, "name").text = name
    ET.SubElement(volume, "capacity", {"unit": "bytes"}).text = str(capacity)
    target = ET.SubElement(volume, "target")
    ET.SubElement(target, "format", {"type": "qcow2"})
    if backing_path is not None:
        backing = ET.SubElement(volume, "backingStore")
        ET.SubElement(backing, "path").text = backing_path
        ET.SubElement(backing, "format", {"type": backing_format})
    return ET.tostring(volume, encoding="unicode")


def volume_format(xml: str) -> str:
    """The format of a volume (``qcow2``, ``raw``) from its XML; ``raw`` when unsaid."""
    element = _parse(xml).find("target/format")
    return (element.get("type") if element is not None else None) or "raw"


def pool_target_path(xml: str) -> str | None:
    """A storage pool's target path, from its XML."""
    return _parse(xml).findtext("target/path")
