"""The errors a hypervisor driver raises, typed so callers can decide what to do.

Everything derives from :class:`DriverError`, itself a :class:`DeskpoolError`: the root of every
error deskpool raises on purpose, defined here so that the contract stands alone and re-exported
by the platform as ``deskpool.errors.DeskpoolError`` (an error that reaches the API becomes a
problem+json answer with the class's status and stable code). The one
question a caller asks most, "may I retry?", is answered by the class:
:class:`TransientDriverError` and its subclasses are worth retrying later; the others are not.

::

    DriverError                      (502 driver_error)
    ├── TransientDriverError         (503, retryable)
    │   ├── ClusterUnreachable       the API endpoint does not answer
    │   ├── NodeUnavailable          the VM's node is down or unreachable
    │   ├── AgentNotRunning          the guest agent does not answer (yet)
    │   ├── DriverBusy               the VM or a shared lock is held by another operation
    │   └── DriverTimeout            the call's deadline passed (504)
    ├── NotFound                     (404) a node, template or storage does not exist
    │   └── VmNotFound               the VM does not exist
    ├── AuthenticationFailed         (502) the cluster rejected the credentials
    │   └── PermissionDenied         the credentials lack a privilege
    ├── TlsVerificationFailed        the server certificate failed verification or the pin
    ├── DriverConflict               (409) the VM is in the wrong state for the operation
    │   ├── VmNotRunning             the operation needs a running VM
    │   └── NotOwned                 the VM does not carry deskpool's ownership tags
    ├── Unsupported                  (422) the driver cannot do this (see its capabilities)
    ├── DriverConfigurationError     (422) the connection's endpoint, credentials or options
    └── OperationFailed              the hypervisor ran the operation and it failed
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar


class DeskpoolError(Exception):
    """Base of every error deskpool raises on purpose, the platform's and the drivers'.

    Each class carries the HTTP status and the stable ``code`` that the platform's problem+json
    middleware writes, so code raises the domain error and never builds a response for it.

    :param detail: a human-readable explanation, safe to show a client (no secrets).
    :param headers: HTTP headers the answer carries (``Retry-After``...).
    :param extra: additional members for the problem+json body.
    :param status: overrides the class's HTTP status (for errors translated from elsewhere).
    :param code: overrides the class's stable code.
    :param title: overrides the class's title.
    """

    status: int = 500
    code: str = "internal_error"
    title: str = "Internal server error"
    headers: Mapping[str, str]

    def __init__(
        self,
        detail: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
        status: int | None = None,
        code: str | None = None,
        title: str | None = None,
    ) -> None:
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code
        if title is not None:
            self.title = title
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.headers = dict(headers or {})
        self.extra: dict[str, Any] = dict(extra or {})


class DriverError(DeskpoolError):
    """Base of every error a hypervisor driver raises on purpose.

    :param detail: what went wrong, safe to show an administrator (no secrets).
    :param vm_id: the VM concerned, when there is one.
    """

    status = 502
    code = "driver_error"
    title = "The hypervisor reported an error"
    #: Whether retrying the same call later may succeed.
    retryable: ClassVar[bool] = False

    def __init__(self, detail: str | None = None, *, vm_id: str | None = None) -> None:
        super().__init__(detail, extra={"vm_id": vm_id} if vm_id is not None else None)
        self.vm_id = vm_id


class TransientDriverError(DriverError):
    """A failure that may go away by itself: retry the call later."""

    status = 503
    code = "driver_unavailable"
    title = "The hypervisor is temporarily unavailable"
    retryable = True


class ClusterUnreachable(TransientDriverError):
    """The cluster's API endpoint does not answer (connection refused, reset, DNS)."""

    code = "cluster_unreachable"
    title = "The cluster cannot be reached"


class NodeUnavailable(TransientDriverError):
    """The node holding the VM is down or unreachable from the cluster."""

    code = "node_unavailable"
    title = "The hypervisor node is unavailable"


class AgentNotRunning(TransientDriverError):
    """The guest agent does not answer (the guest is booting, or the agent is not installed)."""

    code = "guest_agent_not_running"
    title = "The guest agent is not running"


class DriverBusy(TransientDriverError):
    """Another operation holds the VM (a hypervisor lock) or a shared driver lock."""

    code = "driver_busy"
    title = "The hypervisor resource is busy"


class DriverTimeout(TransientDriverError):
    """The call did not finish before its deadline; the operation may still complete."""

    status = 504
    code = "driver_timeout"
    title = "The hypervisor did not answer in time"


class NotFound(DriverError):
    """A node, template, storage or other object named in the call does not exist."""

    status = 404
    code = "hypervisor_object_not_found"
    title = "Not found on the hypervisor"


class VmNotFound(NotFound):
    """The VM does not exist (any more)."""

    code = "vm_not_found"
    title = "The virtual machine does not exist"


class AuthenticationFailed(DriverError):
    """The cluster rejected the connection's credentials."""

    code = "driver_authentication_failed"
    title = "The cluster rejected the credentials"


class PermissionDenied(AuthenticationFailed):
    """The credentials are valid but lack a privilege the operation needs."""

    code = "driver_permission_denied"
    title = "The cluster credentials lack a privilege"


class TlsVerificationFailed(DriverError):
    """The server certificate did not verify against the trusted CAs or the pinned fingerprint."""

    code = "driver_tls_verification_failed"
    title = "The cluster's certificate could not be verified"


class DriverConflict(DriverError):
    """The VM is in a state that does not allow the operation (or the new id is taken)."""

    status = 409
    code = "driver_conflict"
    title = "The virtual machine's state does not allow this"


class VmNotRunning(DriverConflict):
    """The operation needs a running VM and this one is not running."""

    code = "vm_not_running"
    title = "The virtual machine is not running"


class NotOwned(DriverConflict):
    """The VM does not carry deskpool's ownership tags (or carries another desktop's).

    Raised before any destructive call touches a VM deskpool did not create: VM ids are
    reused on real clusters, so an id remembered from yesterday may name someone else's VM.
    """

    code = "vm_not_owned"
    title = "The virtual machine is not owned by deskpool"


class Unsupported(DriverError):
    """The driver cannot do this (its capabilities say so)."""

    status = 422
    code = "driver_unsupported"
    title = "The hypervisor driver does not support this"


class DriverConfigurationError(DriverError):
    """The connection's endpoint, credentials or options are invalid for this driver."""

    status = 422
    code = "driver_configuration_invalid"
    title = "The cluster connection settings are invalid"


class UnexpectedAnswer(DriverError):
    """The hypervisor answered in a shape the driver cannot read.

    A member missing, a list where an object was expected, a count that is no number. Raised
    for the driver by the call wrapper when reading an answer raises ``KeyError``,
    ``TypeError``, ``ValueError``, ``AttributeError`` or ``IndexError``: a 502, not a 500.
    """

    code = "driver_unexpected_answer"
    title = "The hypervisor answered in an unexpected shape"


class OperationFailed(DriverError):
    """The hypervisor accepted the operation, ran it, and it failed (a failed clone task)."""

    code = "driver_operation_failed"
    title = "The hypervisor operation failed"
