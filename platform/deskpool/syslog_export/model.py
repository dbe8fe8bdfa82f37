"""An audit event as an RFC 5424 syslog message, framed for TCP by octet counting (RFC 6587).

Written here rather than taken from a library: the maintained syslog packages are handlers of
Python's ``logging`` (they format this process's log records with its clock and own their
socket), and none of those that fit writes RFC 5424 structured data with RFC 6587 octet
counting; a message of a recorded event, with the event's own time, is thirty lines of rules.

Message: ``<PRI>1 TIMESTAMP HOSTNAME APP-NAME - MSGID [deskpool@32473 ...] MSG`` where MSGID is
the event's action, the structured data element ``deskpool@32473`` holds the event's fields
(32473 is the private enterprise number RFC 5612 reserves for documentation and examples) and
MSG is the event as JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC

from deskpool.events import AuditEvent

#: The facilities of RFC 5424 by name.
FACILITIES: dict[str, int] = {
    "kern": 0,
    "user": 1,
    "mail": 2,
    "daemon": 3,
    "auth": 4,
    "syslog": 5,
    "lpr": 6,
    "news": 7,
    "uucp": 8,
    "cron": 9,
    "authpriv": 10,
    "ftp": 11,
    "ntp": 12,
    "audit": 13,
    "alert": 14,
    "clock": 15,
    **{f"local{number}": 16 + number for number in range(8)},
}

#: The severity of an event by its outcome: informational, warning, error.
SEVERITIES: dict[str, int] = {"success": 6, "denied": 4, "failure": 3}

#: The structured data element's id.
SD_ID = "deskpool@32473"

_MAX_HOSTNAME = 255
_MAX_APP_NAME = 48
_MAX_MSGID = 32


@dataclass(frozen=True, slots=True)
class Origin:
    """Who sends: the HOSTNAME, APP-NAME and facility of every message."""

    hostname: str
    app_name: str = "deskpool"
    facility: int = FACILITIES["authpriv"]


def _header_field(text: str, limit: int) -> str:
    """A header field: printable US-ASCII without spaces, at most ``limit``; ``-`` if empty."""
    kept = "".join(character for character in text if 33 <= ord(character) <= 126)[:limit]
    return kept or "-"


def _param_value(value: object) -> str:
    r"""A PARAM-VALUE: UTF-8, with ``"``, ``\\`` and ``]`` escaped."""
    text = str(value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]")


def format_event(origin: Origin, event_id: int, event: AuditEvent) -> bytes:
    """The RFC 5424 message of the audit event ``event_id`` (not framed)."""
    priority = origin.facility * 8 + SEVERITIES.get(event.outcome, 5)
    at = event.occurred_at.astimezone(UTC)
    timestamp = at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond:06d}Z"
    params = {
        "id": event_id,
        "action": event.action,
        "actor": event.actor,
        "outcome": event.outcome,
        "resource_type": event.resource_type,
        "resource_id": event.resource_id,
        "request_id": event.request_id,
        "source_address": event.source_address,
    }
    data = " ".join(
        f'{name}="{_param_value(value)}"' for name, value in params.items() if value is not None
    )
    message = json.dumps(
        {
            "id": event_id,
            "occurred_at": at.isoformat(),
            **{name: value for name, value in params.items() if name != "id"},
            "details": event.details,
        },
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    )
    header = " ".join(
        [
            f"<{priority}>1",
            timestamp,
            _header_field(origin.hostname, _MAX_HOSTNAME),
            _header_field(origin.app_name, _MAX_APP_NAME),
            "-",
            _header_field(event.action, _MAX_MSGID),
        ]
    )
    return f"{header} [{SD_ID} {data}] {message}".encode()


def frame(message: bytes) -> bytes:
    """``message`` framed by octet counting (RFC 6587 §3.4.1): its length, a space, itself."""
    return f"{len(message)} ".encode() + message
