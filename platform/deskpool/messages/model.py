"""A message from an administrator to desktop users (pure: values, rules, the live event)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any
from uuid import UUID

from deskpool.errors import FieldError, ValidationFailed
from deskpool.live.model import LiveEvent

#: The longest message, in characters.
MAX_BODY = 2000
#: How long a message stays by default, and at most.
DEFAULT_VALIDITY = timedelta(hours=1)
MAX_VALIDITY = timedelta(days=7)
MIN_VALIDITY = timedelta(minutes=1)


class Severity(StrEnum):
    """How the desktop view shows the message."""

    INFO = "info"
    WARNING = "warning"
    URGENT = "urgent"


class TargetKind(StrEnum):
    """Who a message is for: one session, every session of a user, or of a pool."""

    SESSION = "session"
    USER = "user"
    POOL = "pool"


@dataclass(frozen=True, slots=True, kw_only=True)
class SendMessage:
    """What an administrator asks to send (checked by :func:`checked`)."""

    target_kind: TargetKind
    target_id: UUID
    severity: Severity
    body: str
    valid_for: timedelta = DEFAULT_VALIDITY


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """A message as it is kept."""

    id: UUID
    target_kind: TargetKind
    target_id: UUID
    severity: Severity
    body: str
    sender: str
    sender_name: str | None
    created_at: datetime
    valid_until: datetime

    def view(self) -> dict[str, Any]:
        """The message as the API and the live events show it."""
        return {
            "id": str(self.id),
            "target_kind": str(self.target_kind),
            "target_id": str(self.target_id),
            "severity": str(self.severity),
            "body": self.body,
            "sender_name": self.sender_name,
            "created_at": self.created_at.isoformat(),
            "valid_until": self.valid_until.isoformat(),
        }


def checked(command: SendMessage) -> SendMessage:
    """``command`` with its body stripped, if it is one to send.

    :raises ValidationFailed: an empty or too long body, a validity out of bounds.
    """
    errors: list[FieldError] = []
    body = command.body.strip()
    if not body:
        errors.append(FieldError("/body", "Write the message."))
    elif len(body) > MAX_BODY:
        errors.append(
            FieldError("/body", f"A message has at most {MAX_BODY} characters ({len(body)}).")
        )
    if not MIN_VALIDITY <= command.valid_for <= MAX_VALIDITY:
        errors.append(
            FieldError(
                "/valid_for_seconds",
                f"A message is kept between {int(MIN_VALIDITY.total_seconds())} seconds and "
                f"{MAX_VALIDITY.days} days.",
            )
        )
    if errors:
        raise ValidationFailed(errors, "The message cannot be sent.")
    return SendMessage(
        target_kind=command.target_kind,
        target_id=command.target_id,
        severity=command.severity,
        body=body,
        valid_for=command.valid_for,
    )


def message_event(message: Message, recipient: UUID) -> LiveEvent:
    """``message.sent`` to one recipient: seen by him and by those who read sessions."""
    return LiveEvent("message.sent", str(message.id), message.view(), owner=str(recipient))
