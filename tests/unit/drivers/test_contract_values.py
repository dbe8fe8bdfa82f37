"""The values, errors and ownership tags of the driver contract (pure, no I/O)."""

from __future__ import annotations

import dataclasses

import pytest

import deskpool.drivers as drivers
from deskpool.drivers import (
    REDACTED,
    AgentNotRunning,
    AuthenticationFailed,
    ClusterConnection,
    ClusterUnreachable,
    DesktopEndpoint,
    DesktopProtocol,
    DriverBusy,
    DriverConflict,
    DriverError,
    DriverTimeout,
    NodeUnavailable,
    NotFound,
    NotOwned,
    OwnershipTags,
    PermissionDenied,
    PowerState,
    TransientDriverError,
    Unsupported,
    VirtualMachine,
    VmNotFound,
    VmNotRunning,
)
from deskpool.errors import DeskpoolError

# ---------------------------------------------------------------------------- values


def test_connection_repr_hides_credentials() -> None:
    connection = ClusterConnection(
        "https://pve1:8006",
        {"token_id": "deskpool@pve!deskpool", "token_secret": "s3cr3t-value"},
        ca_cert="-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
        options={"task_poll_interval": 0.5},
    )
    shown = repr(connection)
    assert "s3cr3t-value" not in shown
    assert "deskpool@pve!deskpool" not in shown
    assert "'token_secret': '**********'" in shown
    assert "MIIB" not in shown
    assert "task_poll_interval" in shown
    assert str(connection) == shown


def test_connection_is_immutable_and_copies_its_mappings() -> None:
    credentials = {"token_secret": "a"}
    connection = ClusterConnection("pve1", credentials)
    credentials["token_secret"] = "b"
    assert connection.credentials["token_secret"] == "a"
    with pytest.raises(TypeError):
        connection.credentials["token_secret"] = "c"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        connection.endpoint = "other"  # type: ignore[misc]


def test_desktop_endpoint_repr_hides_credentials() -> None:
    endpoint = DesktopEndpoint(
        DesktopProtocol.VNC, "10.0.0.5", 5900, credentials={"password": "vnc-pass-123"}
    )
    assert "vnc-pass-123" not in repr(endpoint)
    assert REDACTED in repr(endpoint)
    assert endpoint.credentials["password"] == "vnc-pass-123"


def test_desktop_endpoint_checks_its_values() -> None:
    assert DesktopEndpoint("rdp", "h", 3389).protocol is DesktopProtocol.RDP  # type: ignore[arg-type]
    for protocol, host, port in (("ssh", "h", 22), ("vnc", "", 5900), ("vnc", "h", 0)):
        with pytest.raises(ValueError):
            DesktopEndpoint(protocol, host, port)  # type: ignore[arg-type]
    endpoint = DesktopEndpoint(DesktopProtocol.RDP, "h", 3389, parameters={"security": "nla"})
    with pytest.raises(TypeError):
        endpoint.parameters["security"] = "rdp"  # type: ignore[index]


def test_every_public_name_is_exported() -> None:
    for name in drivers.__all__:
        assert getattr(drivers, name) is not None
    assert drivers.hookimpl.project_name == "deskpool"


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "error",
    [ClusterUnreachable, NodeUnavailable, AgentNotRunning, DriverBusy, DriverTimeout],
)
def test_transient_errors_are_retryable(error: type[DriverError]) -> None:
    assert issubclass(error, TransientDriverError)
    assert error.retryable
    assert error("x").retryable


@pytest.mark.parametrize(
    "error",
    [VmNotFound, NotFound, AuthenticationFailed, PermissionDenied, NotOwned, Unsupported],
)
def test_permanent_errors_are_not_retryable(error: type[DriverError]) -> None:
    assert not issubclass(error, TransientDriverError)
    assert not error.retryable


def test_error_hierarchy_and_http_mapping() -> None:
    assert issubclass(DriverError, DeskpoolError)
    assert issubclass(VmNotFound, NotFound)
    assert issubclass(NotOwned, DriverConflict)
    assert issubclass(VmNotRunning, DriverConflict)
    assert issubclass(PermissionDenied, AuthenticationFailed)
    assert VmNotFound.status == 404
    assert NotOwned.status == 409
    assert TransientDriverError.status == 503
    assert DriverTimeout.status == 504
    codes = {cls.code for cls in DriverError.__subclasses__()}
    assert len(codes) == len(DriverError.__subclasses__())


def test_driver_error_carries_the_vm_id() -> None:
    error = VmNotFound("VM 105 does not exist", vm_id="105")
    assert error.vm_id == "105"
    assert error.extra == {"vm_id": "105"}
    assert error.detail == "VM 105 does not exist"


# ---------------------------------------------------------------------------- ownership


def _vm(tags: tuple[str, ...], *, template: bool = False) -> VirtualMachine:
    return VirtualMachine("105", "desk-1", "pve1", PowerState.STOPPED, tags, template=template)


def test_tags_for_a_desktop() -> None:
    tags = OwnershipTags()
    assert tags.tags_for("3f1c0d2e-aaaa-bbbb") == (
        "deskpool",
        "deskpool-desktop-3f1c0d2e-aaaa-bbbb",
    )
    assert tags.desktop_id_of(tags.tags_for("d1")) == "d1"
    assert tags.desktop_id_of(["other"]) is None
    assert tags.desktop_id_of(["deskpool-desktop-a", "deskpool-desktop-b"]) is None


def test_owner_tag_is_configurable_and_validated() -> None:
    tags = OwnershipTags("deskpool-prod")
    assert tags.tags_for("d1") == ("deskpool-prod", "deskpool-prod-desktop-d1")
    assert not tags.is_owned(["deskpool"])
    with pytest.raises(ValueError, match="owner tag"):
        OwnershipTags("Desk Pool")


@pytest.mark.parametrize("desktop_id", ["", "UPPER", "with space", "semi;colon", "a/b"])
def test_desktop_ids_must_be_tags(desktop_id: str) -> None:
    with pytest.raises(ValueError, match="desktop id"):
        OwnershipTags().desktop_tag(desktop_id)


def test_merged_keeps_foreign_tags_and_replaces_ownership() -> None:
    tags = OwnershipTags()
    merged = tags.merged(["Ubuntu", "deskpool", "deskpool-desktop-old", ""], "new")
    assert merged == ("deskpool", "deskpool-desktop-new", "ubuntu")


def test_check_accepts_owned_vms() -> None:
    tags = OwnershipTags()
    vm = _vm(tags.tags_for("d1"))
    tags.check(vm)
    tags.check(vm, "d1")


@pytest.mark.parametrize(
    ("vm", "desktop_id"),
    [
        (_vm(()), None),
        (_vm(("ubuntu",)), None),
        (_vm(("deskpool", "deskpool-desktop-d1"), template=True), None),
        (_vm(("deskpool", "deskpool-desktop-d1")), "d2"),
        (_vm(("deskpool",)), "d1"),
    ],
)
def test_check_refuses_what_is_not_owned(vm: VirtualMachine, desktop_id: str | None) -> None:
    with pytest.raises(NotOwned) as raised:
        OwnershipTags().check(vm, desktop_id)
    assert raised.value.vm_id == "105"
