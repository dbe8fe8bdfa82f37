"""The conformance checks of a driver's connection fields (part of the kit since contract 0.3).

:class:`ConnectionFieldsConformance` is a base of
:class:`~deskpool_driver_api.conformance.HypervisorDriverConformance`, so every driver that
runs the kit runs these too. They check that the driver's
:attr:`~deskpool_driver_api.HypervisorDriver.connection_fields` are well-formed, that the
kit's own connection matches them, and that the driver's constructor agrees with them: it
accepts every declared default, and refuses (:class:`DriverConfigurationError`) a connection
missing a required field, an undeclared option, and values of the wrong kind or out of bounds.
The driver under test lends its class, connection and context; no cluster is reached.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from deskpool_driver_api.base import HypervisorDriver
from deskpool_driver_api.errors import DriverConfigurationError
from deskpool_driver_api.fields import (
    ConnectionField,
    FieldKind,
    connection_problems,
    declaration_problems,
    value_problem,
)
from deskpool_driver_api.model import ClusterConnection

__all__ = ["ConnectionFieldsConformance", "wrong_values"]

#: An option name no driver declares.
UNDECLARED_OPTION = "deskpool-conformance-undeclared"


def wrong_values(field: ConnectionField) -> list[Any]:
    """Values the declaration refuses for ``field`` (so the driver must refuse them too)."""
    values: list[Any] = []
    if field.kind in (FieldKind.INTEGER, FieldKind.NUMBER):
        values.append("not a number")
        if field.minimum is not None:
            values.append(field.minimum - 1)
        if field.maximum is not None:
            values.append(field.maximum + 1)
    elif field.kind is FieldKind.BOOLEAN:
        values.append("not a boolean")
    elif field.kind is FieldKind.LIST:
        values.append(42)
    elif field.kind in (FieldKind.TEXT, FieldKind.URL, FieldKind.SECRET):
        values.append(12345)
    elif field.kind is FieldKind.CHOICE:
        values.append("deskpool-conformance-not-a-choice")
    return [value for value in values if value_problem(field, value) is not None]


def _fields(driver: HypervisorDriver) -> tuple[ConnectionField, ...]:
    return type(driver).connection_fields


async def _refused(driver: HypervisorDriver, connection: ClusterConnection, why: str) -> None:
    """Fail unless the driver's class refuses ``connection`` with DriverConfigurationError."""
    try:
        built = type(driver)(connection, driver.context)
    except DriverConfigurationError:
        return
    await built.close()
    pytest.fail(f"the {driver.name} driver accepted {why}, which its declaration refuses")


def _with(
    connection: ClusterConnection,
    field: ConnectionField,
    value: Any,
    *,
    remove: bool = False,
) -> ClusterConnection:
    side: Mapping[str, Any] = connection.credentials if field.secret else connection.options
    changed = {key: item for key, item in side.items() if key != field.name}
    if not remove:
        changed[field.name] = value
    if field.secret:
        return replace(connection, credentials=changed)
    return replace(connection, options=changed)


class ConnectionFieldsConformance:
    """The checks of the connection fields; needs the ``conformance_driver`` fixture."""

    async def test_connection_fields_are_well_formed(self, conformance_driver: Any) -> None:
        driver: HypervisorDriver = conformance_driver.driver
        fields = _fields(driver)
        assert isinstance(fields, tuple), "connection_fields must be a tuple"
        assert declaration_problems(fields) == []
        assert isinstance(type(driver).title, str)
        assert isinstance(type(driver).endpoint_help, str)

    async def test_the_kits_connections_match_the_declaration(
        self, conformance_driver: Any, conformance_unauthenticated_driver: HypervisorDriver
    ) -> None:
        for driver in (conformance_driver.driver, conformance_unauthenticated_driver):
            connection = driver.connection
            problems = connection_problems(
                _fields(driver), connection.credentials, connection.options
            )
            assert problems == []

    async def test_the_driver_accepts_the_declared_defaults(self, conformance_driver: Any) -> None:
        driver: HypervisorDriver = conformance_driver.driver
        defaults = {
            field.name: field.default
            for field in _fields(driver)
            if not field.secret and field.default is not None
        }
        connection = replace(driver.connection, options={**defaults, **driver.connection.options})
        built = type(driver)(connection, driver.context)
        await built.close()

    async def test_the_driver_refuses_what_the_declaration_refuses(
        self, conformance_driver: Any
    ) -> None:
        driver: HypervisorDriver = conformance_driver.driver
        connection = driver.connection
        await _refused(
            driver,
            replace(connection, options={**connection.options, UNDECLARED_OPTION: 1}),
            f"the undeclared option {UNDECLARED_OPTION!r}",
        )
        for field in _fields(driver):
            if field.required:
                await _refused(
                    driver,
                    _with(connection, field, None, remove=True),
                    f"a connection without the required {field.location} {field.name!r}",
                )
            if field.secret:
                continue  # credentials are strings the driver may only check on connecting
            for value in wrong_values(field):
                await _refused(
                    driver,
                    _with(connection, field, value),
                    f"the {field.kind.value} option {field.name!r} set to {value!r}",
                )
