"""deskpool's simulator hypervisor driver: a whole cluster in shared state, for tests and demos.

The entry point ``simulator`` in the group ``deskpool.hypervisor_drivers`` names this module;
its hook registers :class:`SimulatorDriver`. See :mod:`deskpool_driver_simulator.settings` for
the connection options and :class:`SimulatorAdmin` for run-time fault injection.
"""

from deskpool_driver_api import DriverRegistry, hookimpl
from deskpool_driver_simulator.driver import SimulatorAdmin, SimulatorDriver
from deskpool_driver_simulator.settings import Faults, SimulatorSettings, Timings

__all__ = ["Faults", "SimulatorAdmin", "SimulatorDriver", "SimulatorSettings", "Timings"]


@hookimpl
def deskpool_register_hypervisor_drivers(registry: DriverRegistry) -> None:
    """Register the simulator driver as ``simulator``."""
    registry.add("simulator", SimulatorDriver)
