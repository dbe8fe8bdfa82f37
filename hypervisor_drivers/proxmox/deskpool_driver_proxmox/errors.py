"""Proxmox VE errors mapped onto the driver error hierarchy.

The Proxmox VE API (``pveproxy``) reports an error with an HTTP status whose reason phrase is
the message (``500 Configuration file 'nodes/pve1/qemu-server/105.conf' does not exist``);
newer versions repeat it in the JSON body as ``message``, and parameter errors come as
``400 Parameter verification failed.`` with ``{"errors": {"param": "why"}, "data": null}``.
When a request is proxied to another node that does not answer, ``pveproxy`` answers ``595``
(``Errors during connection establishment``, ``No route to host``). A failed task ends with
``status: stopped`` and an ``exitstatus`` holding the message.

The message text decides most mappings, since Proxmox uses ``500`` for almost everything.
"""

from __future__ import annotations

import json
import re

from deskpool_driver_api import (
    AgentNotRunning,
    AuthenticationFailed,
    DriverBusy,
    DriverConflict,
    DriverError,
    NodeUnavailable,
    NotFound,
    OperationFailed,
    PermissionDenied,
    TransientDriverError,
    Unsupported,
    VmNotFound,
    VmNotRunning,
)

#: Status codes ``pveproxy`` uses when the node a request is proxied to cannot be reached
#: (AnyEvent::HTTP's 59x codes).
NODE_UNREACHABLE_STATUSES = frozenset({595, 596, 597, 599})

_VM_NOT_RUNNING = re.compile(r"\bvm \d+ (is )?not running\b|\bvm is not running\b")
_BUSY = re.compile(r"can't lock file|is locked|trying to acquire lock")


def message_of(reason: str, body: str) -> tuple[str, dict[str, str]]:
    """The error message and parameter errors from a response's reason phrase and body."""
    message = reason.strip()
    errors: dict[str, str] = {}
    try:
        document = json.loads(body) if body else None
    except ValueError:
        document = None
    if isinstance(document, dict):
        if isinstance(document.get("message"), str) and document["message"].strip():
            message = document["message"].strip()
        if isinstance(document.get("errors"), dict):
            errors = {str(key): str(value).strip() for key, value in document["errors"].items()}
    elif body and not message:
        message = body.strip()[:500]
    return message, errors


def error_for_message(
    message: str, *, vm_id: str | None = None, default: type[DriverError] = OperationFailed
) -> DriverError:
    """The driver error for a Proxmox error message (from a response or a failed task)."""
    text = message.lower()
    if "guest agent is not running" in text:
        return AgentNotRunning(message, vm_id=vm_id)
    if _VM_NOT_RUNNING.search(text):
        return VmNotRunning(message, vm_id=vm_id)
    if "does not exist" in text or "no such vm" in text:
        if vm_id is not None and ("configuration file" in text or "vm" in text):
            return VmNotFound(message, vm_id=vm_id)
        return NotFound(message, vm_id=vm_id)
    if "already exists" in text or "already running" in text:
        return DriverConflict(message, vm_id=vm_id)
    if "no qemu guest agent configured" in text:
        return DriverConflict(message, vm_id=vm_id)
    if _BUSY.search(text):
        return DriverBusy(message, vm_id=vm_id)
    if "no quorum" in text or "cluster not ready" in text:
        return TransientDriverError(message, vm_id=vm_id)
    return default(message, vm_id=vm_id)


def error_for_response(
    status: int, reason: str, body: str, *, vm_id: str | None = None
) -> DriverError:
    """The driver error for a failed API response."""
    message, errors = message_of(reason, body)
    if errors:
        details = "; ".join(f"{key}: {value}" for key, value in sorted(errors.items()))
        message = f"{message} ({details})"
    message = message or f"HTTP {status}"
    if status == 401:
        return AuthenticationFailed(f"Proxmox VE rejected the API token: {message}")
    if status == 403:
        return PermissionDenied(f"the API token lacks a privilege: {message}", vm_id=vm_id)
    if status in NODE_UNREACHABLE_STATUSES:
        return NodeUnavailable(f"the node does not answer: {message}", vm_id=vm_id)
    if status in (502, 503, 504):
        return TransientDriverError(f"Proxmox VE is unavailable: {message}", vm_id=vm_id)
    if status == 501:
        return Unsupported(f"Proxmox VE does not implement this: {message}", vm_id=vm_id)
    if status == 404:
        return error_for_message(message, vm_id=vm_id, default=NotFound)
    if status == 400:
        return error_for_message(
            f"Proxmox VE refused the request: {message}", vm_id=vm_id, default=DriverError
        )
    return error_for_message(message, vm_id=vm_id, default=OperationFailed)
