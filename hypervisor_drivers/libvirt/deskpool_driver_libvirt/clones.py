"""Cloning a template domain, and removing a desktop's domain, in libvirt's own calls.

Everything here blocks: the driver runs it in its thread, with libvirt's errors translated.

A clone is *defined first*, with its ownership tags, the names of the volumes it is about to get
and a mark of an unfinished clone in its metadata; then each volume is made (a qcow2 backed by
the template's volume for a linked clone, ``virStorageVolCreateXMLFrom`` for a full one), then
the mark is removed. A clone that fails removes what it made (:func:`remove_domain`); one whose
process died leaves only a tagged, marked domain naming its volumes, which the driver removes
when it next reads it.
"""

from __future__ import annotations

import logging
import uuid as uuid_module
from typing import Any

import libvirt

from deskpool_driver_api import CloneRequest, NotFound, OperationFailed
from deskpool_driver_libvirt import domain_xml
from deskpool_driver_libvirt.domain_xml import DomainFacts, VolumeRef
from deskpool_driver_libvirt.guest import Located

log = logging.getLogger(__name__)


def domain_facts(domain: Any, *, inactive: bool = False, secure: bool = False) -> DomainFacts:
    """What deskpool reads of a domain's XML (its inactive definition, its VNC password)."""
    flags = (libvirt.VIR_DOMAIN_XML_INACTIVE if inactive else 0) | (
        libvirt.VIR_DOMAIN_XML_SECURE if secure else 0
    )
    return domain_xml.read_domain(domain.XMLDesc(flags))


def template_definition(template: Located, template_id: str) -> tuple[DomainFacts, str]:
    """A template domain's facts and inactive XML; :class:`NotFound` unless it is marked one."""
    xml = template.domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    facts = domain_xml.read_domain(xml)
    if not facts.template:
        raise NotFound(f"domain {template_id} is not marked as a deskpool template")
    return facts, xml


def source_volume(connection: Any, disk: domain_xml.DiskSource) -> Any:
    """The storage volume behind a template's disk."""
    if disk.kind == "volume" and disk.pool and disk.volume:
        return connection.storagePoolLookupByName(disk.pool).storageVolLookupByName(disk.volume)
    if disk.path:
        try:
            return connection.storageVolLookupByPath(disk.path)
        except libvirt.libvirtError as error:
            if error.get_error_code() != libvirt.VIR_ERR_NO_STORAGE_VOL:
                raise
    raise OperationFailed(
        f"the template's disk {disk.target} is not a volume of a libvirt storage pool"
    )


def clone_domain(
    connection: Any,
    template: Located,
    request: CloneRequest,
    domain_uuid: str,
    storage_pool: str | None,
) -> Located:
    """Clone ``template`` on its host as ``request`` says; the new domain, located.

    :param storage_pool: where a full clone's volumes go (None: beside the template's; a
        linked clone's always do).
    """
    facts, xml = template_definition(template, request.template_id)
    suffix = uuid_module.uuid4().hex[:8]
    plan: list[tuple[domain_xml.DiskSource, Any, Any, VolumeRef]] = []
    target_pool_name = None if request.linked else storage_pool
    for disk in facts.disks:
        source = source_volume(connection, disk)
        source_pool = source.storagePoolLookupByVolume()
        if target_pool_name is not None:
            try:
                pool = connection.storagePoolLookupByName(target_pool_name)
            except libvirt.libvirtError as error:
                if error.get_error_code() == libvirt.VIR_ERR_NO_STORAGE_POOL:
                    raise NotFound(f"no storage pool {target_pool_name!r}") from None
                raise
        else:
            pool = source_pool
        name = f"{request.name}-{suffix}-{disk.target}.qcow2"
        plan.append((disk, source, pool, VolumeRef(pool=pool.name(), name=name)))
    volumes = {disk.target: ref for disk, _source, _pool, ref in plan}
    new_xml = domain_xml.clone_xml(
        xml,
        name=request.name,
        description=request.description,
        tags=request.tags,
        volumes=volumes,
        cloning=True,
        uuid=domain_uuid,
    )
    # Defined first, tagged and naming its volumes: an interrupted clone leaves only this.
    domain = connection.defineXML(new_xml)
    try:
        for _disk, source, pool, ref in plan:
            capacity = int(source.info()[1])
            if request.linked:
                volume = domain_xml.volume_xml(
                    ref.name,
                    capacity,
                    backing_path=source.path(),
                    backing_format=domain_xml.volume_format(source.XMLDesc(0)),
                )
                pool.createXML(volume, 0)
            else:
                pool.createXMLFrom(domain_xml.volume_xml(ref.name, capacity), source, 0)
        finished = domain_xml.finished_clone_xml(domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
        domain = connection.defineXML(finished)
    except BaseException:
        log.warning("clone %s of %s failed; removing what it made", request.name, facts.name)
        remove_domain(connection, Located(template.uri, template.node, domain))
        raise
    return Located(template.uri, template.node, domain)


def destroy_domain(located: Located) -> None:
    """Power a domain off at once (nothing when it does not run)."""
    try:
        located.domain.destroy()
    except libvirt.libvirtError as error:
        if error.get_error_code() == libvirt.VIR_ERR_OPERATION_INVALID:
            return  # not running
        raise


def remove_domain(connection: Any, located: Located) -> None:
    """Destroy, delete deskpool's volumes, undefine (idempotent)."""
    destroy_domain(located)
    facts = domain_facts(located.domain, inactive=True)
    for ref in facts.volumes:
        try:
            volume = connection.storagePoolLookupByName(ref.pool).storageVolLookupByName(ref.name)
            volume.delete(0)
        except libvirt.libvirtError as error:
            if error.get_error_code() not in (
                libvirt.VIR_ERR_NO_STORAGE_VOL,
                libvirt.VIR_ERR_NO_STORAGE_POOL,
            ):
                raise
    flags = (
        libvirt.VIR_DOMAIN_UNDEFINE_NVRAM
        | libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE
        | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
    )
    located.domain.undefineFlags(flags)
