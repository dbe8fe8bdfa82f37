"""The connection-field declaration of the driver contract: well-formedness and matching."""

from __future__ import annotations

from typing import Any

import pytest

from deskpool_driver_api import (
    ClusterConnection,
    ConnectionField,
    DriverConfigurationError,
    FieldKind,
    FieldProblem,
    connection_problems,
    declaration_problems,
    merge_secret_options,
    secret_option_pointers,
    split_secret_options,
)
from deskpool_driver_api.conformance_fields import wrong_values
from deskpool_driver_proxmox import ProxmoxDriver
from deskpool_driver_simulator import SimulatorDriver

FIELDS = (
    ConnectionField("token_id", "Token id", required=True, secret=True),
    ConnectionField("token_secret", "Token secret", FieldKind.SECRET, required=True, secret=True),
    ConnectionField("timeout", "Timeout", FieldKind.NUMBER, default=30.0, minimum=1, maximum=60),
    ConnectionField("retries", "Retries", FieldKind.INTEGER, minimum=0),
    ConnectionField("verify", "Verify", FieldKind.BOOLEAN, default=True),
    ConnectionField("mode", "Mode", FieldKind.CHOICE, choices=("fast", "safe")),
    ConnectionField("nodes", "Nodes", FieldKind.LIST),
    ConnectionField("proxy", "Proxy", FieldKind.URL),
    ConnectionField("extra", "Extra", FieldKind.JSON),
)
CREDENTIALS = {"token_id": "a@pve!b", "token_secret": "s3cret"}


@pytest.mark.parametrize("driver", [SimulatorDriver, ProxmoxDriver])
def test_both_drivers_declare_well_formed_fields(driver: Any) -> None:
    assert driver.connection_fields
    assert declaration_problems(driver.connection_fields) == []
    assert driver.title
    assert driver.endpoint_help


def test_proxmox_declares_its_token_as_write_only_credentials() -> None:
    declared = {field.name: field for field in ProxmoxDriver.connection_fields}
    assert declared["token_id"].secret
    assert declared["token_id"].required
    assert declared["token_secret"].kind is FieldKind.SECRET
    assert declared["token_secret"].secret
    assert declared["request_timeout"].pointer == "/options/request_timeout"


def test_a_well_formed_declaration_has_no_problems() -> None:
    assert declaration_problems(FIELDS) == []


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        (ConnectionField("bad name", "x"), "the name"),
        (ConnectionField("n", " "), "needs a label"),
        (ConnectionField("n", "N", FieldKind.INTEGER, secret=True), "a credential is a string"),
        (ConnectionField("n", "N", FieldKind.SECRET), "must be a credential"),
        (ConnectionField("n", "N", secret=True, default="x"), "a credential has no default"),
        (ConnectionField("n", "N", FieldKind.CHOICE), "non-empty choices"),
        (ConnectionField("n", "N", FieldKind.CHOICE, choices=("a", "a")), "choices repeat"),
        (ConnectionField("n", "N", choices=("a",)), "only a choice field"),
        (ConnectionField("n", "N", FieldKind.NUMBER, minimum=2, maximum=1), "above the maximum"),
        (ConnectionField("n", "N", minimum=1), "only integer and number"),
        (ConnectionField("n", "N", required=True, default="x"), "a required field"),
        (ConnectionField("n", "N", FieldKind.INTEGER, default="3"), "the default is invalid"),
    ],
)
def test_an_ill_formed_field_is_named(field: ConnectionField, expected: str) -> None:
    problems = declaration_problems([field])
    assert any(expected in problem for problem in problems), problems


def test_a_field_declared_twice_is_a_problem() -> None:
    assert declaration_problems([FIELDS[0], FIELDS[0]]) == ["field 'token_id': declared twice"]


def test_a_matching_connection_has_no_problems() -> None:
    options = {
        "timeout": 10,
        "retries": 3,
        "verify": False,
        "mode": "safe",
        "nodes": ["a"],
        "proxy": "http://proxy:3128",
        "extra": {"any": ["thing"]},
    }
    assert connection_problems(FIELDS, CREDENTIALS, options) == []


def test_problems_point_at_their_fields_and_never_repeat_a_value() -> None:
    problems = connection_problems(
        FIELDS,
        {"token_secret": "", "unknown/key": "hunter2"},
        {"timeout": 61, "retries": True, "mode": "slow", "nodes": [], "proxy": "proxy"},
    )
    assert [problem.pointer for problem in problems] == [
        "/credentials/unknown~1key",
        "/credentials/token_id",
        "/credentials/token_secret",
        "/options/timeout",
        "/options/retries",
        "/options/mode",
        "/options/nodes",
        "/options/proxy",
    ]
    assert problems[1] == FieldProblem("/credentials/token_id", "Token id is required.")
    assert all("hunter2" not in problem.message for problem in problems)


def test_none_skips_a_side() -> None:
    assert connection_problems(FIELDS, None, {"timeout": 5}) == []
    assert connection_problems(FIELDS, CREDENTIALS, None) == []


def test_wrong_values_are_refused_by_the_declaration() -> None:
    for field in FIELDS:
        for value in wrong_values(field):
            assert connection_problems([field], None, {field.name: value}) or field.secret


def test_as_json_lists_every_attribute() -> None:
    shown = SimulatorDriver.connection_fields[2].as_json()
    assert shown["name"] == "nodes"
    assert shown["kind"] == "list"
    assert shown["default"] == ["sim-node-1", "sim-node-2"]
    assert set(shown) == {
        "name",
        "label",
        "kind",
        "required",
        "default",
        "help",
        "secret",
        "choices",
        "minimum",
        "maximum",
        "placeholder",
        "sealed",
        "sealed_keys",
    }


def test_proxmox_declares_exactly_the_options_it_reads() -> None:
    from deskpool_driver_proxmox.translate import KNOWN_OPTIONS

    declared = {field.name for field in ProxmoxDriver.connection_fields if not field.secret}
    assert declared == KNOWN_OPTIONS


def test_the_simulator_accepts_every_option_it_declares() -> None:
    from deskpool_driver_simulator import SimulatorSettings

    declared = {field.name for field in SimulatorDriver.connection_fields if not field.secret}
    # An option the settings do not know is named in their refusal; a declared one never is.
    with pytest.raises(DriverConfigurationError, match="unknown option") as refused:
        SimulatorSettings.from_options(dict.fromkeys([*declared, "not-declared"], None))
    assert all(f"unknown option {name!r}" not in str(refused.value) for name in declared)


# ------------------------------------------------------------------ secret options (0.4)

SEALED = (
    ConnectionField("required_token", "Required token", FieldKind.SECRET, sealed=True),
    ConnectionField("desktop", "Desktop", FieldKind.JSON, sealed_keys=("password", "api.key")),
    ConnectionField("nodes", "Nodes", FieldKind.LIST),
    ConnectionField("token", "Token", FieldKind.SECRET, secret=True),
)


def test_sealed_options_are_declared_well_formed() -> None:
    assert declaration_problems(SEALED) == []
    assert secret_option_pointers(SEALED) == (
        "/required_token",
        "/desktop/password",
        "/desktop/api.key",
    )
    assert SEALED[0].as_json()["sealed"] is True
    assert SEALED[1].as_json()["sealed_keys"] == ["password", "api.key"]


@pytest.mark.parametrize(
    ("field", "problem"),
    [
        (ConnectionField("x", "X", FieldKind.SECRET, secret=True, sealed=True), "sealed already"),
        (ConnectionField("x", "X", FieldKind.INTEGER, sealed=True), "a sealed option is a string"),
        (ConnectionField("x", "X", sealed=True, default="d"), "a sealed option has no default"),
        (ConnectionField("x", "X", FieldKind.LIST, sealed_keys=("k",)), "only a json option"),
        (ConnectionField("x", "X", FieldKind.JSON, sealed_keys=("k", "k")), "sealed keys repeat"),
        (ConnectionField("x", "X", FieldKind.JSON, sealed_keys=("",)), "sealed keys are 1 to"),
        (ConnectionField("x", "X", FieldKind.SECRET), "a secret input must be a credential"),
    ],
)
def test_malformed_sealed_declarations_are_named(field: ConnectionField, problem: str) -> None:
    problems = declaration_problems([field])
    assert any(problem in text for text in problems), problems


def test_split_takes_secret_values_out_and_merge_puts_them_back() -> None:
    options = {
        "required_token": "t0k3n",
        "desktop": {"host": "h", "password": "pw", "api.key": "x"},
        "nodes": ["n1"],
    }
    plain, secrets = split_secret_options(SEALED, options)
    assert plain == {"desktop": {"host": "h"}, "nodes": ["n1"]}
    assert secrets == {
        "/required_token": "t0k3n",
        "/desktop/password": "pw",
        "/desktop/api.key": "x",
    }
    assert options["desktop"]["password"] == "pw"  # the input is not changed
    assert merge_secret_options(plain, secrets) == options
    # A json option that is gone takes its secret keys with it; None values stay out.
    assert merge_secret_options({"nodes": []}, secrets) == {"nodes": [], "required_token": "t0k3n"}
    assert merge_secret_options({}, {"/required_token": None}) == {}
    # A null secret value is reported as such (the platform removes it); absent ones are not.
    assert split_secret_options(SEALED, {"required_token": None}) == ({}, {"/required_token": None})
    assert split_secret_options(SEALED, {"desktop": "not an object"}) == (
        {"desktop": "not an object"},
        {},
    )


def test_a_connections_repr_hides_secret_option_values() -> None:
    connection = ClusterConnection(
        endpoint="sim://",
        options={"required_token": "t0k3n", "desktop": {"host": "h", "password": "pw"}},
        secret_options=secret_option_pointers(SEALED),
    )
    shown = repr(connection)
    assert "t0k3n" not in shown
    assert "pw" not in shown
    assert "'host': 'h'" in shown


def test_the_simulator_declares_its_token_and_desktop_password_secret() -> None:
    pointers = secret_option_pointers(SimulatorDriver.connection_fields)
    assert pointers == ("/required_token", "/desktop/password")
