"""The libvirt driver's XML: templates and ownership read from metadata, clones derived."""

from __future__ import annotations

import pytest

from deskpool_driver_api import OsType, PowerState
from deskpool_driver_libvirt import domain_xml
from deskpool_driver_libvirt.domain_xml import VolumeRef, XmlProblem
from deskpool_driver_libvirt.guest import guest_addresses, power_state_of, windows_setup_complete

NS = domain_xml.NAMESPACE

TEMPLATE = f"""<domain type='qemu' id='3'>
  <name>win-template</name>
  <uuid>6f1c2a8e-8b1e-4c55-9a55-0f6c1c1b2a01</uuid>
  <metadata>
    <deskpool:instance xmlns:deskpool="{NS}" template="yes" os="windows"/>
    <other:thing xmlns:other="https://example.com/other">kept?</other:thing>
  </metadata>
  <memory unit='MiB'>2048</memory>
  <os>
    <type arch='x86_64' machine='q35'>hvm</type>
    <loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE.fd</loader>
    <nvram template='/usr/share/OVMF/OVMF_VARS.fd'>/var/lib/libvirt/qemu/nvram/win_VARS.fd</nvram>
  </os>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='/var/lib/libvirt/images/win.img'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='cdrom'>
      <source file='/isos/virtio.iso'/>
      <target dev='sda' bus='sata'/>
    </disk>
    <interface type='network'>
      <mac address='52:54:00:aa:bb:cc'/>
      <source network='default'/>
      <target dev='vnet3'/>
    </interface>
    <graphics type='vnc' port='5907' autoport='no' listen='0.0.0.0' passwd='s3cret'/>
  </devices>
</domain>"""


def test_a_template_is_read_from_deskpools_metadata() -> None:
    facts = domain_xml.read_domain(TEMPLATE)
    assert facts.template
    assert facts.os_type is OsType.WINDOWS
    assert facts.tags == ()
    assert [d.target for d in facts.disks] == ["vda"]  # the CD-ROM is not cloned
    assert facts.disks[0].path == "/var/lib/libvirt/images/win.img"
    assert facts.vnc == domain_xml.Graphics(listen="0.0.0.0", port=5907, password="s3cret")


def test_a_domain_without_deskpools_metadata_is_neither_template_nor_owned() -> None:
    facts = domain_xml.read_domain(
        "<domain><name>db</name><uuid>6f1c2a8e-8b1e-4c55-9a55-0f6c1c1b2a02</uuid></domain>"
    )
    assert not facts.template
    assert facts.tags == ()
    assert facts.vnc is None
    with pytest.raises(XmlProblem):
        domain_xml.read_domain("<domain><name>no uuid</name></domain>")
    with pytest.raises(XmlProblem):
        domain_xml.read_domain("<domain")


def test_a_clone_gets_its_own_identity_tags_and_volumes() -> None:
    volume = VolumeRef(pool="default", name="desk-1-abcd-vda.qcow2")
    xml = domain_xml.clone_xml(
        TEMPLATE,
        name="desk-1",
        description="deskpool desktop d1",
        tags=("deskpool-desktop-d1", "deskpool"),
        volumes={"vda": volume},
        cloning=True,
    )
    facts = domain_xml.read_domain(xml.replace("<name>", "<uuid>1-2</uuid><name>", 1))
    assert facts.name == "desk-1"
    assert not facts.template
    assert facts.tags == ("deskpool", "deskpool-desktop-d1")
    assert facts.volumes == (volume,)
    assert facts.cloning
    assert facts.description == "deskpool desktop d1"
    assert facts.disks[0] == domain_xml.DiskSource(
        target="vda", kind="volume", pool="default", volume="desk-1-abcd-vda.qcow2"
    )
    assert "6f1c2a8e" not in xml  # no UUID: libvirt makes one
    assert "52:54:00:aa:bb:cc" not in xml
    assert "vnet3" not in xml
    assert "win_VARS.fd" not in xml
    assert "OVMF_VARS.fd" in xml
    assert "5907" not in xml
    assert 'autoport="yes"' in xml
    assert "/isos/virtio.iso" in xml  # the CD-ROM is shared
    assert "https://example.com/other" not in xml
    finished = domain_xml.read_domain(
        domain_xml.finished_clone_xml(xml.replace("<name>", "<uuid>1-2</uuid><name>", 1))
    )
    assert not finished.cloning
    assert finished.tags == facts.tags
    assert finished.volumes == facts.volumes


def test_a_clone_needs_a_volume_for_every_disk() -> None:
    with pytest.raises(XmlProblem, match="vda"):
        domain_xml.clone_xml(TEMPLATE, name="x", description="", tags=(), volumes={}, cloning=False)


def test_tags_set_with_virsh_metadata_are_read_without_their_namespace() -> None:
    xml = f"""<domain><name>d</name><uuid>u-1</uuid><metadata>
      <deskpool:instance xmlns:deskpool="{NS}"><tag>deskpool</tag>
      <volume pool="p" name="v"/></deskpool:instance></metadata></domain>"""
    facts = domain_xml.read_domain(xml)
    assert facts.tags == ("deskpool",)
    assert facts.volumes == (VolumeRef("p", "v"),)


def test_volumes() -> None:
    linked = domain_xml.volume_xml(
        "c.qcow2", 1024, backing_path="/p/base.img", backing_format="raw"
    )
    assert '<backingStore><path>/p/base.img</path><format type="raw" />' in linked
    assert domain_xml.volume_format(linked) == "qcow2"
    assert domain_xml.volume_format("<volume><name>x</name></volume>") == "raw"
    assert "backingStore" not in domain_xml.volume_xml("full.qcow2", 1024)
    assert domain_xml.pool_target_path("<pool><target><path>/v</path></target></pool>") == "/v"


def test_guest_answers() -> None:
    interfaces = [
        {"name": "lo", "ip-addresses": [{"ip-address-type": "ipv4", "ip-address": "127.0.0.1"}]},
        {
            "name": "eth0",
            "ip-addresses": [
                {"ip-address-type": "ipv6", "ip-address": "fe80::1"},
                {"ip-address-type": "ipv6", "ip-address": "2001:db8::5"},
                {"ip-address-type": "ipv4", "ip-address": "169.254.1.1"},
                {"ip-address-type": "ipv4", "ip-address": "10.0.2.15"},
            ],
        },
    ]
    assert guest_addresses(interfaces) == ("10.0.2.15", "2001:db8::5")
    assert windows_setup_complete("[State]\r\nImageState=IMAGE_STATE_COMPLETE\r\n")
    assert not windows_setup_complete("[State]\nImageState=IMAGE_STATE_SPECIALIZE_RESEAL_TO_OOBE")
    assert power_state_of(1) is PowerState.RUNNING
    assert power_state_of(5) is PowerState.STOPPED
    assert power_state_of(3) is PowerState.PAUSED
    assert power_state_of(0) is PowerState.UNKNOWN
