"""deskpool's libvirt/KVM hypervisor driver.

The entry point ``libvirt`` in the group ``deskpool.hypervisor_drivers`` names this module;
its hook registers :class:`LibvirtDriver`. :mod:`deskpool_driver_libvirt.driver` documents
the connection, templates, clones, ownership and desktops.
"""

from deskpool_driver_api import DriverRegistry, hookimpl
from deskpool_driver_libvirt.driver import LibvirtDriver

__all__ = ["LibvirtDriver"]


@hookimpl
def deskpool_register_hypervisor_drivers(registry: DriverRegistry) -> None:
    """Register the libvirt driver as ``libvirt``."""
    registry.add("libvirt", LibvirtDriver)
