"""Audit events: what happened, who did it, to what, and with what outcome.

An event is written in the same transaction as the change it records (see :mod:`deskpool.audit`),
so it exists exactly when the change was committed. Details never contain secrets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Outcome = Literal["success", "denied", "failure"]


@dataclass(frozen=True)
class AuditEvent:
    """One recorded event.

    :param action: a dotted verb such as ``pool.create`` or ``auth.denied``.
    :param actor: the user id, or ``system:<component>`` for automatic actions.
    :param resource_type: ``pools``, ``desktops``... (the permission model's resource names).
    :param resource_id: the affected object's id, when there is one.
    :param outcome: ``success``, ``denied`` or ``failure``.
    :param request_id: the API request that caused it, if any.
    :param source_address: the client address, if any.
    :param details: structured, secret-free details (a reconciler's reason, changed fields).
    """

    action: str
    actor: str
    resource_type: str
    resource_id: str | None
    outcome: Outcome
    occurred_at: datetime
    request_id: str | None = None
    source_address: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
