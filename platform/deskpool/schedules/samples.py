"""What a pool has at a reconciliation pass, counted for its capacity plot (pure).

The reconciler records one :class:`CapacitySample` per pool and
:data:`SAMPLE_MINUTES` minutes (the last pass of the bucket wins) and prunes those older than
:data:`SAMPLE_RETENTION`; ``GET /api/v1/pools/{pool_id}/capacity`` shows them next to the
targets the schedule planned.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from deskpool.pools.model import Desktop, DesktopState
from deskpool.schedules.model import InForce, Targets

#: One sample per pool and this many minutes.
SAMPLE_MINUTES = 5
#: How long samples are kept (the console plots the past week).
SAMPLE_RETENTION = timedelta(days=15)


@dataclass(frozen=True, slots=True)
class CapacitySample:
    """What a pool had at one reconciliation pass, and the phase and targets in force then."""

    at: datetime
    ready: int
    in_use: int
    powered_off: int
    other: int
    phase: str | None
    min_ready: int | None
    spare: int | None


def capacity_sample(
    desktops: Iterable[Desktop], at: datetime, in_force: InForce | None, targets: Targets | None
) -> CapacitySample:
    """Count ``desktops``: free and ready, held by a user, powered off, anything else."""
    ready = in_use = powered_off = other = 0
    for desktop in desktops:
        if desktop.state is DesktopState.POWERED_OFF:
            powered_off += 1
        elif desktop.state in (DesktopState.READY, DesktopState.IN_USE) and desktop.is_busy:
            in_use += 1
        elif desktop.state is DesktopState.READY:
            ready += 1
        elif desktop.state is not DesktopState.DELETING:
            other += 1
    return CapacitySample(
        at=at,
        ready=ready,
        in_use=in_use,
        powered_off=powered_off,
        other=other,
        phase=None if in_force is None else in_force.phase,
        min_ready=None if targets is None else targets.min_ready,
        spare=None if targets is None else targets.spare,
    )
