"""What the platform gives a driver besides its connection, and the deadline of a call.

:class:`DriverContext` (shared state, cluster id, owner tag, clock, observer), the
:class:`DriverCall` records an observer receives, the deadline helpers a driver uses to size
its own waits, and :func:`run_call`, the one path every public call of
:class:`~deskpool_driver_api.HypervisorDriver` takes.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from deskpool_driver_api.errors import DriverError, DriverTimeout, UnexpectedAnswer
from deskpool_driver_api.ownership import DEFAULT_OWNER_TAG
from deskpool_driver_api.shared_state import SharedState

T = TypeVar("T")

log = logging.getLogger(__name__)

#: What a driver raises when an answer is not the shape it reads (see UnexpectedAnswer).
_SHAPE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError)

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


class VmEventKind(enum.StrEnum):
    """What happened to a VM, as a driver that watches its hypervisor reports it."""

    STARTED = "started"
    STOPPED = "stopped"
    #: The VM no longer exists (deleted or undefined).
    REMOVED = "removed"


@dataclass(frozen=True)
class VmEvent:
    """A change of one VM the hypervisor told the driver about (contract 0.3.1).

    :param cluster_id: the cluster whose driver saw it (``context.cluster_id``).
    :param vm_id: the VM's id, as :meth:`~deskpool_driver_api.HypervisorDriver.get_vm` takes.
    :param kind: what happened.
    :param node: the node it happened on, when known.
    """

    cluster_id: str
    vm_id: str
    kind: VmEventKind
    node: str | None = None


class VmEventSink(Protocol):
    """Receives the VM events of drivers declaring ``capabilities.vm_events``.

    A driver calls :meth:`vm_event` on the event loop its calls run on (from another thread:
    through ``loop.call_soon_threadsafe``), for VMs whether deskpool owns them or not; the
    platform checks ownership itself.
    """

    def vm_event(self, event: VmEvent) -> None:
        """Take ``event``; must not raise and must not block."""
        ...


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
    :param events: told about VM events by a driver declaring ``capabilities.vm_events``
        (from contract 0.3.1), or ``None``.
    """

    shared_state: SharedState
    cluster_id: str = "default"
    owner_tag: str = DEFAULT_OWNER_TAG
    clock: Callable[[], float] = field(default=time.time)
    observer: DriverCallObserver | None = None
    events: VmEventSink | None = None


async def run_call(
    driver: str,
    context: DriverContext,
    operation: str,
    at: float,
    body: Callable[[], Awaitable[T]],
) -> T:
    """Run ``body`` as ``driver``'s call ``operation``, to finish before the deadline ``at``.

    Makes ``at`` visible to :func:`remaining_time`, turns an expired deadline into
    :class:`DriverTimeout` (before ``body`` runs when it has already passed), honours a
    cancellation a library below swallowed, and reports the call's duration and outcome to
    ``context.observer``.
    """
    started = time.monotonic()
    outcome = "ok"
    token = current_deadline.set(at)
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    cancel_requests = task.cancelling() if task is not None else 0
    try:
        if at <= started:
            # Already passed: a body that never suspends would otherwise run to the end.
            raise TimeoutError
        async with asyncio.timeout_at(loop.time() + (at - started)) as scope:
            try:
                result = await body()
            except TimeoutError as error:
                if scope.expired():
                    raise
                raise DriverTimeout(f"{operation}: {error or 'timed out'}") from error
        if task is not None and task.cancelling() > cancel_requests:
            # A library below swallowed our cancellation (Python 3.11's asyncio.wait_for,
            # used by redis-py and others, does when its result arrives at the same
            # moment): honour it, so a cancelled call never looks like a finished one.
            raise asyncio.CancelledError
        return result
    except TimeoutError as error:
        outcome = DriverTimeout.code
        raise DriverTimeout(f"{driver} {operation} did not finish before its deadline") from error
    except DriverError as error:
        outcome = error.code
        raise
    except _SHAPE_ERRORS as error:
        # What reading an answer of an unexpected shape raises: the hypervisor's fault (or
        # the driver's), never the request's; a 502 problem rather than a 500.
        outcome = UnexpectedAnswer.code
        log.warning(
            "%s %s: the hypervisor's answer had an unexpected shape (%s)",
            driver,
            operation,
            type(error).__name__,
        )
        raise UnexpectedAnswer(
            f"{driver} {operation}: the hypervisor's answer had an unexpected shape "
            f"({type(error).__name__})"
        ) from error
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    except Exception:
        outcome = "unexpected_error"
        raise
    finally:
        current_deadline.reset(token)
        _report(
            DriverCall(driver, context.cluster_id, operation, time.monotonic() - started, outcome),
            context.observer,
        )


def _report(call: DriverCall, observer: DriverCallObserver | None) -> None:
    if observer is None:
        return
    try:
        observer.driver_call_finished(call)
    except Exception:
        log.exception("driver call observer failed for %s %s", call.driver, call.operation)
