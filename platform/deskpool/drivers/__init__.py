"""The hypervisor driver contract: the one module a driver imports.

A hypervisor driver is a separate distribution that declares an entry point in the group
``deskpool.hypervisor_drivers`` naming a module; that module implements the
``deskpool_register_hypervisor_drivers`` hook and adds a :class:`HypervisorDriver` subclass::

    from deskpool.drivers import HypervisorDriver, hookimpl

    class AcmeDriver(HypervisorDriver):
        name = "acme"
        ...

    @hookimpl
    def deskpool_register_hypervisor_drivers(registry):
        registry.add("acme", AcmeDriver)

Everything a driver needs is re-exported here: the base class and its context, the values
that cross the contract, the error hierarchy, ownership tags, shared state and deadline
helpers. ``docs/drivers.md`` is the guide; :mod:`deskpool.testing.conformance` is the test
suite every driver must pass.
"""

from deskpool.drivers.base import (
    DriverCall,
    DriverCallObserver,
    DriverContext,
    HypervisorDriver,
    deadline_after,
    remaining_time,
)
from deskpool.drivers.errors import (
    AgentNotRunning,
    AuthenticationFailed,
    ClusterUnreachable,
    DriverBusy,
    DriverConfigurationError,
    DriverConflict,
    DriverError,
    DriverTimeout,
    NodeUnavailable,
    NotFound,
    NotOwned,
    OperationFailed,
    PermissionDenied,
    TlsVerificationFailed,
    TransientDriverError,
    Unsupported,
    VmNotFound,
    VmNotRunning,
)
from deskpool.drivers.model import (
    REDACTED,
    CloneRequest,
    ClusterConnection,
    ClusterInfo,
    ConsoleEndpoint,
    ConsoleProtocol,
    DriverCapabilities,
    GuestInfo,
    Node,
    OsType,
    PowerState,
    Template,
    VirtualMachine,
)
from deskpool.drivers.ownership import DEFAULT_OWNER_TAG, OwnershipTags
from deskpool.drivers.shared_state import (
    InMemorySharedState,
    SharedState,
    SharedStateUnavailable,
)
from deskpool.plugins import hookimpl
from deskpool.registry import Registry

#: What ``deskpool_register_hypervisor_drivers`` receives: ``registry.add(name, DriverClass)``.
DriverRegistry = Registry[type[HypervisorDriver]]

__all__ = [
    "DEFAULT_OWNER_TAG",
    "REDACTED",
    "AgentNotRunning",
    "AuthenticationFailed",
    "CloneRequest",
    "ClusterConnection",
    "ClusterInfo",
    "ClusterUnreachable",
    "ConsoleEndpoint",
    "ConsoleProtocol",
    "DriverBusy",
    "DriverCall",
    "DriverCallObserver",
    "DriverCapabilities",
    "DriverConfigurationError",
    "DriverConflict",
    "DriverContext",
    "DriverError",
    "DriverRegistry",
    "DriverTimeout",
    "GuestInfo",
    "HypervisorDriver",
    "InMemorySharedState",
    "Node",
    "NodeUnavailable",
    "NotFound",
    "NotOwned",
    "OperationFailed",
    "OsType",
    "OwnershipTags",
    "PermissionDenied",
    "PowerState",
    "SharedState",
    "SharedStateUnavailable",
    "Template",
    "TlsVerificationFailed",
    "TransientDriverError",
    "Unsupported",
    "VirtualMachine",
    "VmNotFound",
    "VmNotRunning",
    "deadline_after",
    "hookimpl",
    "remaining_time",
]
