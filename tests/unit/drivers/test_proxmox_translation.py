"""How the Proxmox VE driver reads endpoints, tokens, TLS settings, answers and errors."""

from __future__ import annotations

import json
import ssl

import aiohttp
import pytest

from deskpool.drivers import (
    AgentNotRunning,
    AuthenticationFailed,
    ClusterConnection,
    DesktopProtocol,
    DriverBusy,
    DriverConfigurationError,
    DriverConflict,
    DriverContext,
    DriverError,
    HypervisorDriver,
    InMemorySharedState,
    NodeUnavailable,
    NotFound,
    OperationFailed,
    OsType,
    PermissionDenied,
    PowerState,
    TransientDriverError,
    Unsupported,
    VmNotFound,
    VmNotRunning,
)
from deskpool.registry import Registry
from deskpool.testing.certificates import self_signed
from deskpool_driver_proxmox import ProxmoxDriver, deskpool_register_hypervisor_drivers
from deskpool_driver_proxmox.client import api_base_url, node_of_upid, ssl_setting, token_header
from deskpool_driver_proxmox.driver import (
    guest_addresses,
    os_type_of,
    parse_tags,
    power_state_of,
    windows_setup_complete,
)
from deskpool_driver_proxmox.errors import error_for_message, error_for_response

CREDENTIALS = {"token_id": "deskpool@pve!deskpool", "token_secret": "0b7d-4c55"}


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("pve1.example.com", "https://pve1.example.com:8006/api2/json"),
        ("pve1.example.com:443", "https://pve1.example.com:443/api2/json"),
        ("https://pve1.example.com", "https://pve1.example.com:8006/api2/json"),
        ("https://10.0.0.1:8006/api2/json", "https://10.0.0.1:8006/api2/json"),
        ("http://127.0.0.1:5000/", "http://127.0.0.1:5000/api2/json"),
        ("https://[2001:db8::1]:8006", "https://[2001:db8::1]:8006/api2/json"),
    ],
)
def test_api_base_url(endpoint: str, url: str) -> None:
    assert api_base_url(endpoint) == url


@pytest.mark.parametrize("endpoint", ["ftp://pve1", "https://", "https://pve1/other", "pve1:99999"])
def test_api_base_url_refuses_what_it_cannot_read(endpoint: str) -> None:
    with pytest.raises(DriverConfigurationError):
        api_base_url(endpoint)


def test_token_header() -> None:
    assert token_header(CREDENTIALS) == "PVEAPIToken=deskpool@pve!deskpool=0b7d-4c55"


@pytest.mark.parametrize(
    "credentials",
    [
        {},
        {"token_id": "deskpool@pve", "token_secret": "x"},
        {"token_id": "deskpool!x", "token_secret": "x"},
        {"token_id": "deskpool@pve!deskpool", "token_secret": ""},
        {"token_id": "deskpool@pve!deskpool", "token_secret": "with space"},
    ],
)
def test_token_header_refuses_bad_credentials_without_echoing_them(
    credentials: dict[str, str],
) -> None:
    with pytest.raises(DriverConfigurationError) as raised:
        token_header(credentials)
    assert "with space" not in raised.value.detail


def test_ssl_settings() -> None:
    assert ssl_setting(ClusterConnection("pve1")) is True
    assert ssl_setting(ClusterConnection("pve1", tls_verify=False)) is False
    fingerprint = ":".join(["ab"] * 32)
    pinned = ssl_setting(ClusterConnection("pve1", fingerprint=fingerprint))
    assert isinstance(pinned, aiohttp.Fingerprint)
    with pytest.raises(DriverConfigurationError, match="SHA-256"):
        ssl_setting(ClusterConnection("pve1", fingerprint="ab:cd"))
    with pytest.raises(DriverConfigurationError, match="PEM"):
        ssl_setting(ClusterConnection("pve1", ca_cert="not a certificate"))


def test_ssl_setting_with_a_ca_certificate(self_signed_pem: str) -> None:
    context = ssl_setting(ClusterConnection("pve1", ca_cert=self_signed_pem))
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED


@pytest.fixture(scope="module")
def self_signed_pem() -> str:
    return self_signed("pve-ca").pem


def test_node_of_upid() -> None:
    upid = "UPID:pve2:000B1F2A:0E8C5A1B:66A1B2C3:qmclone:9000:deskpool@pve!deskpool:"
    assert node_of_upid(upid) == "pve2"
    with pytest.raises(ValueError, match="task id"):
        node_of_upid("not-a-upid")


def _body(message: str, errors: dict[str, str] | None = None) -> str:
    document: dict[str, object] = {"data": None, "message": message + "\n"}
    if errors:
        document["errors"] = errors
    return json.dumps(document)


@pytest.mark.parametrize(
    ("status", "reason", "body", "expected"),
    [
        (401, "No ticket", "", AuthenticationFailed),
        (401, "invalid token value!", "", AuthenticationFailed),
        (403, "Permission check failed (/vms/100, VM.Allocate)", "", PermissionDenied),
        (
            595,
            "Errors during connection establishment, proxy handler::__ANON__",
            "",
            NodeUnavailable,
        ),
        (595, "No route to host", "", NodeUnavailable),
        (503, "Service Unavailable", "", TransientDriverError),
        (
            500,
            "QEMU guest agent is not running",
            _body("QEMU guest agent is not running"),
            AgentNotRunning,
        ),
        (500, "VM 105 is not running", _body("VM 105 is not running"), VmNotRunning),
        (500, "VM 105 not running", "", VmNotRunning),
        (
            500,
            "Configuration file 'nodes/pve1/qemu-server/105.conf' does not exist",
            "",
            VmNotFound,
        ),
        (
            500,
            "unable to create VM 105: config file already exists",
            "",
            DriverConflict,
        ),
        (500, "VM is locked (clone)", "", DriverBusy),
        (
            500,
            "can't lock file '/var/lock/qemu-server/lock-105.conf' - got timeout",
            "",
            DriverBusy,
        ),
        (500, "storage 'fast' does not exist", "", NotFound),
        (500, "clone failed: disk full", "", OperationFailed),
        (501, "Method 'GET /nodes/x/qemu/1/foo' not implemented", "", Unsupported),
        (
            400,
            "Parameter verification failed.",
            _body("Parameter verification failed.", {"name": "invalid format"}),
            DriverError,
        ),
    ],
)
def test_error_for_response(
    status: int, reason: str, body: str, expected: type[DriverError]
) -> None:
    error = error_for_response(status, reason, body, vm_id="105")
    assert type(error) is expected


def test_error_details_name_the_parameters() -> None:
    error = error_for_response(
        400,
        "Parameter verification failed.",
        _body("Parameter verification failed.", {"name": "invalid format - not a DNS name"}),
    )
    assert "name: invalid format - not a DNS name" in error.detail


def test_a_missing_object_without_a_vm_is_not_found() -> None:
    assert type(error_for_message("storage 'x' does not exist")) is NotFound


@pytest.mark.parametrize(
    ("text", "tags"),
    [
        ("deskpool;deskpool-desktop-d1", ("deskpool", "deskpool-desktop-d1")),
        ("b,a a", ("a", "b")),
        ("Ubuntu; deskpool", ("deskpool", "ubuntu")),
        ("", ()),
        (None, ()),
    ],
)
def test_parse_tags(text: str | None, tags: tuple[str, ...]) -> None:
    assert parse_tags(text) == tags


@pytest.mark.parametrize(
    ("ostype", "os_type"),
    [
        ("win11", OsType.WINDOWS),
        ("win10", OsType.WINDOWS),
        ("w2k8", OsType.WINDOWS),
        ("l26", OsType.LINUX),
        ("solaris", OsType.OTHER),
        (None, OsType.OTHER),
    ],
)
def test_os_type_of(ostype: str | None, os_type: OsType) -> None:
    assert os_type_of(ostype) is os_type


def test_power_state_of() -> None:
    assert power_state_of({"status": "running", "qmpstatus": "running"}) is PowerState.RUNNING
    assert power_state_of({"status": "running", "qmpstatus": "paused"}) is PowerState.PAUSED
    assert power_state_of({"status": "stopped"}) is PowerState.STOPPED
    assert power_state_of({"status": "unknown"}) is PowerState.UNKNOWN


def test_windows_setup_complete() -> None:
    assert windows_setup_complete("[State]\r\nImageState=IMAGE_STATE_COMPLETE\r\n")
    assert not windows_setup_complete("[State]\r\nImageState=IMAGE_STATE_UNDEPLOYABLE\r\n")
    assert not windows_setup_complete("[State]\nImageState=IMAGE_STATE_SPECIALIZE_RESEAL_TO_OOBE")
    assert not windows_setup_complete("")


def test_guest_addresses_prefer_ipv4_and_skip_loopback_and_link_local() -> None:
    interfaces = [
        {"name": "lo", "ip-addresses": [{"ip-address": "127.0.0.1", "ip-address-type": "ipv4"}]},
        {
            "name": "eth0",
            "ip-addresses": [
                {"ip-address": "fe80::1", "ip-address-type": "ipv6"},
                {"ip-address": "2001:db8::5", "ip-address-type": "ipv6"},
                {"ip-address": "169.254.3.3", "ip-address-type": "ipv4"},
                {"ip-address": "10.1.2.3", "ip-address-type": "ipv4"},
            ],
        },
        {"name": "no-addresses"},
    ]
    assert guest_addresses(interfaces) == ("10.1.2.3", "2001:db8::5")
    assert guest_addresses(None) == ()


def test_registers_as_proxmox() -> None:
    registry: Registry[type[HypervisorDriver]] = Registry("hypervisor driver")
    deskpool_register_hypervisor_drivers(registry)
    assert registry.get("proxmox") is ProxmoxDriver


def test_construction_validates_options_without_io() -> None:
    context = DriverContext(InMemorySharedState())
    driver = ProxmoxDriver(
        ClusterConnection(
            "pve1",
            CREDENTIALS,
            options={"desktop_ports": {"rdp": 3390}, "desktop_parameters": {"vnc": {"a": "b"}}},
        ),
        context,
    )
    assert driver.desktop_ports == {DesktopProtocol.RDP: 3390, DesktopProtocol.VNC: 5900}
    assert driver.desktop_parameters[DesktopProtocol.VNC] == {"a": "b"}
    assert driver.desktop_parameters[DesktopProtocol.RDP]["ignore-cert"] == "true"
    assert "0b7d-4c55" not in repr(driver.client)
    with pytest.raises(DriverConfigurationError, match="unknown"):
        ProxmoxDriver(ClusterConnection("pve1", CREDENTIALS, options={"pol": 1}), context)
    with pytest.raises(DriverConfigurationError, match="task_poll_interval"):
        ProxmoxDriver(
            ClusterConnection("pve1", CREDENTIALS, options={"task_poll_interval": 0}), context
        )
    for bad in (
        {"desktop_ports": {"x11": 1}},
        {"desktop_ports": {"rdp": 0}},
        {"desktop_parameters": {"rdp": {"security": 1}}},
        {"desktop_parameters": ["rdp"]},
    ):
        with pytest.raises(DriverConfigurationError, match=next(iter(bad))):
            ProxmoxDriver(ClusterConnection("pve1", CREDENTIALS, options=bad), context)
