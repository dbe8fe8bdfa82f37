"""The deskpool hypervisor driver contract: the one package a driver imports.

This is the distribution ``deskpool-driver-api``. It stands alone: importing it loads neither
the platform (``deskpool``) nor Redis, aiohttp, stevedore or the configuration, so a driver
distribution depends on it alone and states which contract it implements through the version
it requires (``deskpool-driver-api>=0.4,<0.5``; :data:`CONTRACT_VERSION` is this one's).

A hypervisor driver is a separate distribution that declares an entry point in the group
``deskpool.hypervisor_drivers`` naming a module; that module implements the
``deskpool_register_hypervisor_drivers`` hook and adds a :class:`HypervisorDriver` subclass::

    from deskpool_driver_api import DriverRegistry, HypervisorDriver, hookimpl

    class AcmeDriver(HypervisorDriver):
        name = "acme"
        ...

    @hookimpl
    def deskpool_register_hypervisor_drivers(registry: DriverRegistry) -> None:
        registry.add("acme", AcmeDriver)

Everything a driver needs is exported here: the base class and its context, the declaration
of its connection fields (:class:`ConnectionField`, new in 0.3; its secret options, new in
0.4), the values that
cross the contract, the error hierarchy, ownership tags, the shared-state protocol (and an
in-memory implementation) and deadline helpers. ``docs/drivers.md`` is the guide;
:mod:`deskpool_driver_api.conformance` is the test suite every driver must pass. The platform
re-exports all of it as ``deskpool.drivers``.
"""

from deskpool_driver_api.base import HypervisorDriver
from deskpool_driver_api.context import (
    DriverCall,
    DriverCallObserver,
    DriverContext,
    VmEvent,
    VmEventKind,
    VmEventSink,
    deadline_after,
    remaining_time,
)
from deskpool_driver_api.errors import (
    AgentNotRunning,
    AuthenticationFailed,
    ClusterUnreachable,
    DeskpoolError,
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
    UnexpectedAnswer,
    Unsupported,
    VmNotFound,
    VmNotRunning,
)
from deskpool_driver_api.fields import (
    ConnectionField,
    FieldKind,
    FieldProblem,
    connection_problems,
    declaration_problems,
    merge_secret_options,
    secret_option_pointers,
    split_secret_options,
)
from deskpool_driver_api.model import (
    REDACTED,
    CloneRequest,
    ClusterConnection,
    ClusterInfo,
    DesktopEndpoint,
    DesktopProtocol,
    DriverCapabilities,
    GuestInfo,
    Node,
    OsType,
    PowerState,
    Template,
    VirtualMachine,
)
from deskpool_driver_api.ownership import DEFAULT_OWNER_TAG, OwnershipTags
from deskpool_driver_api.registration import ENTRY_POINT_GROUP, DriverRegistry, hookimpl
from deskpool_driver_api.shared_state import (
    InMemorySharedState,
    SharedState,
    SharedStateUnavailable,
)

#: The version of the contract this package defines (while 0.x, a minor version may change it).
CONTRACT_VERSION = "0.4"  # 0.3.1 added VM events (optional); 0.4 secret options

__all__ = [
    "CONTRACT_VERSION",
    "DEFAULT_OWNER_TAG",
    "ENTRY_POINT_GROUP",
    "REDACTED",
    "AgentNotRunning",
    "AuthenticationFailed",
    "CloneRequest",
    "ClusterConnection",
    "ClusterInfo",
    "ClusterUnreachable",
    "ConnectionField",
    "DeskpoolError",
    "DesktopEndpoint",
    "DesktopProtocol",
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
    "FieldKind",
    "FieldProblem",
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
    "UnexpectedAnswer",
    "Unsupported",
    "VirtualMachine",
    "VmEvent",
    "VmEventKind",
    "VmEventSink",
    "VmNotFound",
    "VmNotRunning",
    "connection_problems",
    "deadline_after",
    "declaration_problems",
    "hookimpl",
    "merge_secret_options",
    "remaining_time",
    "secret_option_pointers",
    "split_secret_options",
]
