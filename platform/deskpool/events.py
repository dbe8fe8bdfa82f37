"""Audit events: what happened, who did it, to what, and with what outcome.

An event is written in the same transaction as the change it records (see :mod:`deskpool.audit`),
so it exists exactly when the change was committed. Details never contain secrets.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Outcome = Literal["success", "denied", "failure"]
#: Every :data:`Outcome`.
OUTCOMES: tuple[Outcome, ...] = ("success", "denied", "failure")


def outcome_of(text: str) -> Outcome:
    """The :data:`Outcome` spelled ``text`` (as stored or sent).

    :raises ValueError: ``text`` is not an outcome.
    """
    for outcome in OUTCOMES:
        if outcome == text:
            return outcome
    raise ValueError(f"not an audit outcome: {text!r}")


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


# --------------------------------------------------------------------------- event types

#: The named event types an audit event may have, by its action (``None``: any action of that
#: prefix), and the outcome it needs (``None``: any). The first that matches names the event;
#: an event no rule names has the type ``audit.<action>``.
_NAMED_TYPES: tuple[tuple[str, bool, Outcome | None, str], ...] = (
    ("session.start", False, None, "session.started"),
    ("session.reopen", False, None, "session.started"),
    ("session.end", False, None, "session.ended"),
    ("session.refuse", False, None, "session.failed"),
    ("auth.denied", False, None, "session.failed"),
    ("desktop.fail", False, None, "desktop.error"),
    ("desktop.", True, "failure", "desktop.error"),
    ("pool.reconcile_error", False, None, "reconcile.error"),
    ("rollout.", True, None, "rollout.changed"),
    ("schedule.", True, None, "schedule.changed"),
    ("license.", True, None, "license.state"),
)

#: The named event types (:func:`event_type`), each with what it is, for the API and the docs.
NAMED_EVENT_TYPES: dict[str, str] = {
    "session.started": "A desktop session opened (session.start, session.reopen).",
    "session.ended": "A desktop session ended (session.end).",
    "session.failed": "A connection or a sign-in was refused (session.refuse, auth.denied).",
    "desktop.error": "A desktop failed (desktop.fail, or any desktop action that failed).",
    "reconcile.error": "A pool's reconciliation started failing (pool.reconcile_error).",
    "rollout.changed": "An image rollout was created, changed state or moved a desktop.",
    "schedule.changed": "A capacity schedule was created, replaced or deleted.",
    "license.state": "The licence was installed or removed, or its state changed.",
}


@functools.lru_cache(maxsize=1024)
def event_type(action: str, outcome: Outcome) -> str:
    """The type of the event an audit event of ``action`` and ``outcome`` is to subscribers.

    A named type (:data:`NAMED_EVENT_TYPES`) when a rule names it, else ``audit.<action>``.
    Kept per action and outcome: every audit event asks (each sign-in's statement too).
    """
    for prefix, is_prefix, needed, named in _NAMED_TYPES:
        matches = action.startswith(prefix) if is_prefix else action == prefix
        if matches and (needed is None or needed == outcome):
            return named
    return f"audit.{action}"


def _with_wildcards(name: str) -> list[str]:
    """``name`` and every prefix wildcard of it: ``a.b.c`` -> ``a.b.c``, ``a.b.*``, ``a.*``."""
    parts = name.split(".")
    return [name] + [".".join(parts[:count]) + ".*" for count in range(len(parts) - 1, 0, -1)]


def subscription_keys(action: str, outcome: Outcome) -> list[str]:
    """Every filter a subscription may list that selects this event.

    Its type and ``audit.<action>`` (an audit event by kind, whatever its type), each with its
    prefix wildcards (``session.*``, ``audit.pool.*``, ``audit.*``), and ``*``. A new list
    each time, made from the keys kept per action and outcome.
    """
    return list(_subscription_keys(action, outcome))


@functools.lru_cache(maxsize=1024)
def _subscription_keys(action: str, outcome: Outcome) -> tuple[str, ...]:
    keys = ["*", *_with_wildcards(f"audit.{action}")]
    named = event_type(action, outcome)
    if not named.startswith("audit."):
        keys += _with_wildcards(named)
    return tuple(keys)


def webhook_payload(event_id: int, event: AuditEvent) -> dict[str, Any]:
    """The body a subscriber receives for the audit event ``event_id`` (Standard Webhooks' shape).

    ``type``, ``timestamp`` (when it happened) and ``data``: the audit event as
    ``GET /api/v1/audit-events`` shows it.
    """
    return {
        "type": event_type(event.action, event.outcome),
        "timestamp": event.occurred_at.isoformat(),
        "data": {
            "id": event_id,
            "occurred_at": event.occurred_at.isoformat(),
            "actor": event.actor,
            "action": event.action,
            "resource_type": event.resource_type,
            "resource_id": event.resource_id,
            "outcome": event.outcome,
            "request_id": event.request_id,
            "source_address": event.source_address,
            "details": event.details,
        },
    }
