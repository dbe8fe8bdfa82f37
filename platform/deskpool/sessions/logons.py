"""Logon timing, with no I/O: the phases of opening a desktop and what a logon record says.

A logon is one attempt to open a desktop, from the user's request to the first frame the
desktop daemon draws. Each :class:`LogonPhase` is recorded once, on the database's clock, when
it is reached (``logons`` table, migration ``0016``):

1. ``asked``: the open (or reconnect) request was accepted for a pool the user may open;
2. ``allocated``: the user holds a desktop (allocated now, or already theirs);
3. ``powered_on``: a powered-off desktop was started for the user (start on connect only);
4. ``guest_ready``: the cluster's driver said where the desktop is shown;
5. ``token_issued``: the connection token was handed to the browser;
6. ``tunnel_opened``: the gateway redeemed the token and opened the session;
7. ``daemon_connected``: the desktop daemon finished the handshake;
8. ``first_frame``: the daemon drew its first frame (something drawn, then ``sync``).

A logon that stops before the first frame keeps the phases it reached, ``failed_at`` and a
``failure_reason`` (an API error code such as ``desktop_unreachable``, a refused token such as
``token_expired``, or the end reason of a session that ended before drawing).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID


class LogonPhase(StrEnum):
    """A step of opening a desktop, in the order they happen."""

    ASKED = "asked"
    ALLOCATED = "allocated"
    POWERED_ON = "powered_on"
    GUEST_READY = "guest_ready"
    TOKEN_ISSUED = "token_issued"
    TUNNEL_OPENED = "tunnel_opened"
    DAEMON_CONNECTED = "daemon_connected"
    FIRST_FRAME = "first_frame"

    @property
    def column(self) -> str:
        """The ``logons`` column holding when the phase was reached."""
        return f"{self.value}_at"

    @property
    def earlier(self) -> tuple[LogonPhase, ...]:
        """The phases before this one."""
        order = list(LogonPhase)
        return tuple(order[: order.index(self)])


#: The phases in order.
PHASES: tuple[LogonPhase, ...] = tuple(LogonPhase)


def phase_steps(
    times: Sequence[datetime | None],
) -> Iterator[tuple[LogonPhase, datetime, float]]:
    """The phases reached, in order, with when and the seconds since the one reached before.

    :param times: when each of :data:`PHASES` was reached (``None``: not reached), in order.
    """
    previous: datetime | None = None
    for phase, at in zip(PHASES, times, strict=True):
        if at is None:
            continue
        yield phase, at, 0.0 if previous is None else (at - previous).total_seconds()
        previous = at


def outcome_of(first_frame_at: datetime | None, failed_at: datetime | None) -> str:
    """``connected`` (first frame drawn), ``failed``, or ``pending``."""
    if first_frame_at is not None:
        return "connected"
    return "failed" if failed_at is not None else "pending"


@dataclass(frozen=True, slots=True, kw_only=True)
class LogonRecord:
    """One logon as it is stored: when each phase was reached (``None``: not reached)."""

    id: UUID
    user_id: UUID
    pool_id: UUID
    desktop_id: UUID | None
    session_id: UUID | None
    asked_at: datetime
    allocated_at: datetime | None
    powered_on_at: datetime | None
    guest_ready_at: datetime | None
    token_issued_at: datetime | None
    tunnel_opened_at: datetime | None
    daemon_connected_at: datetime | None
    first_frame_at: datetime | None
    failed_at: datetime | None
    failure_reason: str | None

    def at(self, phase: LogonPhase) -> datetime | None:
        """When ``phase`` was reached."""
        value: datetime | None = getattr(self, phase.column)
        return value

    @property
    def outcome(self) -> str:
        """``connected`` (first frame drawn), ``failed``, or ``pending``."""
        return outcome_of(self.first_frame_at, self.failed_at)

    @property
    def duration(self) -> float | None:
        """Seconds from the request to the first frame (``None``: not drawn)."""
        if self.first_frame_at is None:
            return None
        return (self.first_frame_at - self.asked_at).total_seconds()

    def phases(self) -> list[dict[str, Any]]:
        """The phases reached, in order: name, time, and seconds since the previous one."""
        times = [self.at(phase) for phase in PHASES]
        return [
            {"phase": str(phase), "at": at, "seconds": seconds}
            for phase, at, seconds in phase_steps(times)
        ]

    def as_json(self) -> dict[str, Any]:
        """The logon as the API shows it (times as datetimes, for the schema to render)."""
        return {
            "id": str(self.id),
            "outcome": self.outcome,
            "phases": self.phases(),
            "duration_seconds": self.duration,
            "failed_at": self.failed_at,
            "failure_reason": self.failure_reason,
        }
