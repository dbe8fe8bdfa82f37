"""deskpool's Proxmox VE hypervisor driver.

The entry point ``proxmox`` in the group ``deskpool.hypervisor_drivers`` names this module;
its hook registers :class:`ProxmoxDriver`. :mod:`deskpool_driver_proxmox.testing` holds a
faithful fake of the Proxmox VE API for tests.
"""

from deskpool_driver_api import DriverRegistry, hookimpl
from deskpool_driver_proxmox.driver import ProxmoxDriver

__all__ = ["ProxmoxDriver"]


@hookimpl
def deskpool_register_hypervisor_drivers(registry: DriverRegistry) -> None:
    """Register the Proxmox VE driver as ``proxmox``."""
    registry.add("proxmox", ProxmoxDriver)
