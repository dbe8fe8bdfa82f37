"""Guacamole protocol status codes and the WebSocket close codes that carry them.

The codes are libguac's ``guac_protocol_status`` (``protocol-types.h``); the WebSocket close
code of each is the one guacamole-common's ``GuacamoleStatus`` gives it, so a tunnel closes the
way Guacamole's own WebSocket tunnel endpoint does: close code from this table, close reason the
status code in decimal (``guacamole-common-js`` reads ``parseInt(event.reason)``).
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["Status"]


class Status(IntEnum):
    """A Guacamole protocol status code."""

    SUCCESS = 0x0000
    UNSUPPORTED = 0x0100
    SERVER_ERROR = 0x0200
    SERVER_BUSY = 0x0201
    UPSTREAM_TIMEOUT = 0x0202
    UPSTREAM_ERROR = 0x0203
    RESOURCE_NOT_FOUND = 0x0204
    RESOURCE_CONFLICT = 0x0205
    RESOURCE_CLOSED = 0x0206
    UPSTREAM_NOT_FOUND = 0x0207
    UPSTREAM_UNAVAILABLE = 0x0208
    SESSION_CONFLICT = 0x0209
    SESSION_TIMEOUT = 0x020A
    SESSION_CLOSED = 0x020B
    CLIENT_BAD_REQUEST = 0x0300
    CLIENT_UNAUTHORIZED = 0x0301
    CLIENT_FORBIDDEN = 0x0303
    CLIENT_TIMEOUT = 0x0308
    CLIENT_OVERRUN = 0x030D
    CLIENT_BAD_TYPE = 0x030F
    CLIENT_TOO_MANY = 0x031D

    @property
    def websocket_code(self) -> int:
        """The WebSocket close code guacamole-common pairs with this status."""
        return _WEBSOCKET_CODES[self]

    @property
    def close_reason(self) -> str:
        """The WebSocket close reason: the status code in decimal."""
        return str(int(self))

    @classmethod
    def from_code(cls, code: int) -> Status | None:
        """The status of ``code``, or ``None`` for a code libguac does not define."""
        try:
            return cls(code)
        except ValueError:
            return None


_WEBSOCKET_CODES: dict[Status, int] = {
    Status.SUCCESS: 1000,
    Status.UNSUPPORTED: 1011,
    Status.SERVER_ERROR: 1011,
    Status.SERVER_BUSY: 1008,
    Status.UPSTREAM_TIMEOUT: 1011,
    Status.UPSTREAM_ERROR: 1011,
    Status.RESOURCE_NOT_FOUND: 1002,
    Status.RESOURCE_CONFLICT: 1008,
    Status.RESOURCE_CLOSED: 1002,
    Status.UPSTREAM_NOT_FOUND: 1011,
    Status.UPSTREAM_UNAVAILABLE: 1011,
    Status.SESSION_CONFLICT: 1008,
    Status.SESSION_TIMEOUT: 1002,
    Status.SESSION_CLOSED: 1002,
    Status.CLIENT_BAD_REQUEST: 1002,
    Status.CLIENT_UNAUTHORIZED: 1008,
    Status.CLIENT_FORBIDDEN: 1008,
    Status.CLIENT_TIMEOUT: 1002,
    Status.CLIENT_OVERRUN: 1009,
    Status.CLIENT_BAD_TYPE: 1003,
    Status.CLIENT_TOO_MANY: 1008,
}
