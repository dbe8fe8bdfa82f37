"""The libvirt driver's connection: URIs, credentials' files, libvirt's errors, refusals."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import libvirt
import pytest

from deskpool_driver_api import (
    AgentNotRunning,
    AuthenticationFailed,
    ClusterConnection,
    ClusterUnreachable,
    DriverConfigurationError,
    DriverContext,
    InMemorySharedState,
    NotFound,
    OperationFailed,
    VmNotFound,
)
from deskpool_driver_libvirt import LibvirtDriver
from deskpool_driver_libvirt.hosts import (
    Credentials,
    Hosts,
    node_name,
    options_hosts,
    translate,
)


def error(code: int, message: str = "it failed") -> libvirt.libvirtError:
    failure = libvirt.libvirtError(message)
    failure.err = (code, 0, message, 2, "", None, None, 0, 0)
    return failure


def test_libvirt_errors_become_the_contracts() -> None:
    assert isinstance(translate(error(libvirt.VIR_ERR_NO_DOMAIN), "x"), VmNotFound)
    assert isinstance(translate(error(libvirt.VIR_ERR_NO_STORAGE_POOL), "x"), NotFound)
    assert isinstance(translate(error(libvirt.VIR_ERR_AUTH_FAILED), "x"), AuthenticationFailed)
    assert isinstance(translate(error(libvirt.VIR_ERR_AGENT_UNRESPONSIVE), "x"), AgentNotRunning)
    assert isinstance(translate(error(libvirt.VIR_ERR_SYSTEM_ERROR), "x"), ClusterUnreachable)
    assert isinstance(translate(error(libvirt.VIR_ERR_INTERNAL_ERROR), "x"), OperationFailed)
    assert (
        str(translate(error(libvirt.VIR_ERR_NO_DOMAIN, "gone"), "reading v")) == "reading v: gone"
    )


def test_nodes_are_named_after_their_uris() -> None:
    assert node_name("qemu:///system") == "localhost"
    assert node_name("qemu+ssh://root@kvm2.example.com/system") == "kvm2.example.com"
    assert options_hosts("qemu+ssh://kvm1/system", {"hosts": ["qemu+ssh://kvm2/system"]}) == [
        "qemu+ssh://kvm1/system",
        "qemu+ssh://kvm2/system",
    ]
    assert options_hosts("qemu:///system", {"hosts": ["qemu:///system"]}) == ["qemu:///system"]
    assert node_name("qemu+tcp://127.0.0.1:16509/system") == "127.0.0.1:16509"


def test_ssh_and_tls_credentials_become_private_files_named_in_the_uri() -> None:
    hosts = Hosts(
        ["qemu+ssh://deskpool@kvm1/system", "qemu+tls://kvm2/system"],
        Credentials(
            ssh_private_key="-----BEGIN OPENSSH PRIVATE KEY-----\nkey\n",
            ssh_known_hosts="kvm1 ssh-ed25519 AAAA",
            tls_client_cert="CERT",
            tls_client_key="KEY",
            ca_cert="CA",
            tls_verify=False,
        ),
    )
    try:
        ssh = parse_qs(urlsplit(hosts.connection_uri("qemu+ssh://deskpool@kvm1/system")).query)
        key = Path(ssh["keyfile"][0])
        assert key.read_text().startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
        assert Path(ssh["known_hosts"][0]).read_text() == "kvm1 ssh-ed25519 AAAA\n"
        assert ssh["no_tty"] == ["1"]
        tls = parse_qs(urlsplit(hosts.connection_uri("qemu+tls://kvm2/system")).query)
        pki = Path(tls["pkipath"][0])
        assert (pki / "clientcert.pem").read_text() == "CERT"
        assert (pki / "clientkey.pem").read_text() == "KEY"
        assert stat.S_IMODE((pki / "clientkey.pem").stat().st_mode) == 0o600
        assert (pki / "cacert.pem").read_text() == "CA"
        assert tls["no_verify"] == ["1"]
        assert "CERT" not in repr(hosts._credentials)
    finally:
        asyncio.run(hosts.close())
    assert not key.exists()
    assert not pki.exists()


@pytest.mark.parametrize(
    "endpoint",
    ["https://kvm1:8006", "xen:///system", "qemu+ssh://kvm1", "lxc:///"],
)
def test_an_endpoint_that_is_not_a_qemu_uri_is_refused(endpoint: str) -> None:
    with pytest.raises(DriverConfigurationError, match="not a QEMU libvirt URI"):
        LibvirtDriver(ClusterConnection(endpoint), DriverContext(InMemorySharedState()))


def test_options_are_checked_against_the_declaration() -> None:
    context = DriverContext(InMemorySharedState())
    with pytest.raises(DriverConfigurationError, match="rdp_port"):
        LibvirtDriver(ClusterConnection("qemu:///system", options={"rdp_port": 0}), context)
    with pytest.raises(DriverConfigurationError, match="rdp_parameters"):
        LibvirtDriver(
            ClusterConnection("qemu:///system", options={"rdp_parameters": {"a": 1}}), context
        )
    driver = LibvirtDriver(
        ClusterConnection("qemu:///system", options={"hosts": ["qemu+ssh://kvm2/system"]}),
        context,
    )
    assert list(driver.hosts.nodes) == ["localhost", "kvm2"]
    with pytest.raises(DriverConfigurationError, match="same node name"):
        LibvirtDriver(
            ClusterConnection(
                "qemu+ssh://kvm2/system", options={"hosts": ["qemu+tls://kvm2/system"]}
            ),
            context,
        )
