"""What the conformance kit cannot create through the contract, on real libvirt.

Lifecycle events reach ``context.events`` once ``watch_events`` was called; a clone whose
process died (its heartbeat gone) is removed by the first read; domains deskpool did not tag
are never listed as its own.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import libvirt
import pytest

from deskpool.testing.libvirt import (
    LOCAL_URI,
    TCP_URI,
    LibvirtLab,
    LibvirtMissing,
    check_libvirt,
)
from deskpool.testing.processes import until
from deskpool_driver_api import (
    ClusterConnection,
    DriverContext,
    InMemorySharedState,
    NodeUnavailable,
    VmEvent,
    VmEventKind,
    VmNotFound,
    deadline_after,
)
from deskpool_driver_api.conformance import new_desktop_id
from deskpool_driver_libvirt import LibvirtDriver
from deskpool_driver_libvirt.domain_xml import VolumeRef, clone_xml


class Sink:
    """Collects the events a driver reports."""

    def __init__(self) -> None:
        self.events: list[VmEvent] = []

    def vm_event(self, event: VmEvent) -> None:
        self.events.append(event)


@pytest.fixture
def sink() -> Sink:
    return Sink()


@pytest.fixture
async def driver(
    libvirt_lab: LibvirtLab, libvirt_credentials: dict[str, str], sink: Sink
) -> AsyncIterator[LibvirtDriver]:
    driver = LibvirtDriver(
        ClusterConnection(TCP_URI, libvirt_credentials),
        DriverContext(
            InMemorySharedState(),
            cluster_id="events",
            owner_tag=libvirt_lab.owner_tag,
            events=sink,
        ),
    )
    yield driver
    await driver.close()


@pytest.fixture
def local() -> Iterator[Any]:
    connection = libvirt.open(LOCAL_URI)
    yield connection
    connection.close()


async def template_id(driver: LibvirtDriver, lab: LibvirtLab) -> str:
    [template] = [t for t in await driver.list_templates() if t.name == lab.template]
    return template.id


async def test_lifecycle_events_reach_the_sink(
    driver: LibvirtDriver, libvirt_lab: LibvirtLab, sink: Sink, local: Any
) -> None:
    desktop_id = new_desktop_id()
    vm = await driver.clone(
        await template_id(driver, libvirt_lab),
        name=f"{libvirt_lab.prefix}-events",
        desktop_id=desktop_id,
        deadline=deadline_after(60),
    )
    try:
        await driver.watch_events()
        await driver.watch_events()  # idempotent
        await driver.start(vm.id)
        local.lookupByUUIDString(vm.id).destroy()  # behind the driver's back

        async def seen(kind: VmEventKind) -> bool:
            return any(e.vm_id == vm.id and e.kind is kind for e in sink.events)

        await until(lambda: seen(VmEventKind.STARTED), "the start is reported")
        await until(lambda: seen(VmEventKind.STOPPED), "the destroy is reported")
        await driver.delete(vm.id, desktop_id=desktop_id)
        await until(lambda: seen(VmEventKind.REMOVED), "the deletion is reported")
        assert {e.cluster_id for e in sink.events} == {"events"}
        assert {e.node for e in sink.events if e.vm_id == vm.id} == {"127.0.0.1:16509"}
    finally:
        with_vm = [v for v in await driver.list_owned_vms() if v.id == vm.id]
        for leftover in with_vm:
            await driver.delete(leftover.id)


async def test_a_clone_whose_process_died_is_removed_by_the_first_read(
    driver: LibvirtDriver, libvirt_lab: LibvirtLab, local: Any
) -> None:
    template = local.lookupByName(libvirt_lab.template)
    volume = VolumeRef(pool=libvirt_lab.pool, name=f"{libvirt_lab.prefix}-dead-vda.qcow2")
    desktop_id = new_desktop_id()
    # What a worker killed between defining the clone and finishing its volume leaves.
    domain = local.defineXML(
        clone_xml(
            template.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE),
            name=f"{libvirt_lab.prefix}-dead",
            description="an interrupted clone",
            tags=driver.ownership.tags_for(desktop_id),
            volumes={"vda": volume},
            cloning=True,
        )
    )
    pool = local.storagePoolLookupByName(libvirt_lab.pool)
    pool.createXML(
        f"<volume><name>{volume.name}</name><capacity unit='MiB'>1</capacity>"
        "<target><format type='qcow2'/></target></volume>",
        0,
    )
    vm_id = domain.UUIDString()
    [listed] = [vm for vm in await driver.list_owned_vms() if vm.id == vm_id]
    assert listed.busy  # nobody may use it while its clone may still be running
    with pytest.raises(VmNotFound):
        await driver.get_vm(vm_id)  # no heartbeat: abandoned
    assert vm_id not in {d.UUIDString() for d in local.listAllDomains(0)}
    assert volume.name not in libvirt_lab.volumes(local)


async def test_a_host_that_is_down_is_an_offline_node_and_hides_no_desktop(
    libvirt_lab: LibvirtLab, libvirt_credentials: dict[str, str]
) -> None:
    driver = LibvirtDriver(
        ClusterConnection(
            TCP_URI,
            libvirt_credentials,
            options={"hosts": ["qemu+tcp://127.0.0.1:1/system"]},  # nothing listens there
        ),
        DriverContext(InMemorySharedState(), owner_tag=libvirt_lab.owner_tag),
    )
    try:
        nodes = {node.name: node.online for node in await driver.list_nodes()}
        assert nodes == {"127.0.0.1:16509": True, "127.0.0.1:1": False}
        assert libvirt_lab.template in {t.name for t in await driver.list_templates()}
        with pytest.raises(NodeUnavailable):
            await driver.list_owned_vms()  # the desktops of the host that is down are not gone
        with pytest.raises(NodeUnavailable):
            await driver.get_vm(str(uuid.uuid4()))
    finally:
        await driver.close()


async def test_domains_deskpool_did_not_tag_are_not_its_own(
    driver: LibvirtDriver, libvirt_lab: LibvirtLab, local: Any
) -> None:
    template = local.lookupByName(libvirt_lab.template)
    xml = template.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    foreign = local.defineXML(
        clone_xml(
            xml,
            name=f"{libvirt_lab.prefix}-foreign",
            description="someone else's",
            tags=("someone-else",),
            volumes={"vda": VolumeRef(libvirt_lab.pool, libvirt_lab.base_volume)},
            cloning=False,
        )
    )
    try:
        assert foreign.UUIDString() not in {vm.id for vm in await driver.list_owned_vms()}
        vm = await driver.get_vm(foreign.UUIDString())
        assert vm.desktop_id is None
        assert not driver.ownership.is_owned(vm.tags)
    finally:
        foreign.undefine()


def test_libvirt_that_does_not_answer_says_how_to_start_it() -> None:
    with pytest.raises(LibvirtMissing, match=r"scripts/ensure-libvirt\.sh"):
        check_libvirt("qemu+tcp://127.0.0.1:1/system")
