"""How a driver distribution registers its drivers: the entry point, the hook and its registry.

A driver distribution declares an entry point in :data:`ENTRY_POINT_GROUP` naming a module;
the platform loads that module as a plugin and calls its
``deskpool_register_hypervisor_drivers(registry)`` hook implementation, marked with
:data:`hookimpl`. The marker is pluggy's for the project ``deskpool``: pluggy recognises hook
implementations by the project name, so this marker is the same as the platform's own and the
contract does not import the platform's plugin host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import pluggy

if TYPE_CHECKING:
    from deskpool_driver_api.base import HypervisorDriver

#: The entry-point group a driver distribution declares its plugin module in.
ENTRY_POINT_GROUP = "deskpool.hypervisor_drivers"

#: The marker of deskpool hook implementations (``@hookimpl``).
hookimpl = pluggy.HookimplMarker("deskpool")


class DriverRegistry(Protocol):
    """What ``deskpool_register_hypervisor_drivers`` receives: ``registry.add(name, Driver)``."""

    def add(self, name: str, item: type[HypervisorDriver]) -> None:
        """Register the driver class ``item`` under ``name`` (letters, digits, ``_``, ``-``).

        :raises ValueError: the name is invalid or already registered.
        """
        ...
