"""What the platform gives a driver besides its connection, and the deadline of a call.

:class:`DriverContext` (shared state, cluster id, owner tag, clock, observer), the
:class:`DriverCall` records an observer receives, and the deadline helpers a driver uses to
size its own waits. :mod:`deskpool_driver_api.base` runs every call under its deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol

from deskpool_driver_api.ownership import DEFAULT_OWNER_TAG
from deskpool_driver_api.shared_state import SharedState

#: The deadline of the driver call running in this context (set by the base class).
current_deadline: ContextVar[float | None] = ContextVar("deskpool_driver_deadline", default=None)


def deadline_after(seconds: float) -> float:
    """The absolute deadline (a :func:`time.monotonic` value) ``seconds`` from now."""
    return time.monotonic() + seconds


def remaining_time(deadline: float | None = None) -> float:
    """Seconds left before ``deadline``, by default the deadline of the driver call running.

    Returns ``inf`` outside a driver call when no deadline is given, and never less than 0.
    """
    at = deadline if deadline is not None else current_deadline.get()
    if at is None:
        return float("inf")
    return max(0.0, at - time.monotonic())


@dataclass(frozen=True)
class DriverCall:
    """One finished driver call, as the observer sees it.

    :param driver: the driver's name (``proxmox``).
    :param cluster_id: the cluster the driver instance serves.
    :param operation: the public method called (``clone``).
    :param seconds: how long it took.
    :param outcome: ``ok``, ``cancelled``, or the error's stable ``code`` (``driver_timeout``,
        ``vm_not_found``...); ``unexpected_error`` for an exception outside the hierarchy.
    """

    driver: str
    cluster_id: str
    operation: str
    seconds: float
    outcome: str


class DriverCallObserver(Protocol):
    """Receives every finished driver call (the platform times them into metrics)."""

    def driver_call_finished(self, call: DriverCall) -> None:
        """Record ``call``; must not raise and must not block."""
        ...


@dataclass(frozen=True)
class DriverContext:
    """What the platform gives a driver besides the connection.

    :param shared_state: state shared by every process of the deployment (Redis-backed),
        already namespaced for this cluster.
    :param cluster_id: the cluster record's id, for messages and metrics.
    :param owner_tag: the tag marking VMs as deskpool's.
    :param clock: wall-clock time in seconds (:func:`time.time`); a driver that stores
        timestamps in shared state reads this so other processes agree and tests can move time.
    :param observer: told about every finished call, or ``None``.
    """

    shared_state: SharedState
    cluster_id: str = "default"
    owner_tag: str = DEFAULT_OWNER_TAG
    clock: Callable[[], float] = field(default=time.time)
    observer: DriverCallObserver | None = None
