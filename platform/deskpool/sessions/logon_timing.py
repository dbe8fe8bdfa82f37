"""Logon timing: a logon recorded as asked, each phase it reaches, and why it stopped.

Every phase is recorded once in the database (:mod:`deskpool.sessions.store_logons`) and
counted in this process's ``deskpool_logon_phase_seconds`` histogram; the phases themselves are
the pure :mod:`deskpool.sessions.logons`. The use cases of :mod:`deskpool.sessions.service` and
the broker (:mod:`deskpool.sessions.broker`) record them.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator

import asyncpg
from prometheus_client import CollectorRegistry, Counter, Histogram

from deskpool.db.rows import Db
from deskpool.per_registry import once_per_registry
from deskpool.runtime import Runtime
from deskpool.sessions import store_logons
from deskpool.sessions.logons import LogonPhase

log = logging.getLogger(__name__)

_PHASE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


@once_per_registry
def phase_histogram(registry: CollectorRegistry) -> Histogram:
    """``deskpool_logon_phase_seconds`` on ``registry``."""
    return Histogram(
        "deskpool_logon_phase_seconds",
        "Seconds each logon phase took: from the phase before it (the request, for "
        "allocated) to reaching it, by phase (allocated, powered_on, guest_ready, "
        "token_issued, tunnel_opened, daemon_connected, first_frame).",
        ["phase"],
        buckets=_PHASE_BUCKETS,
        registry=registry,
    )


@once_per_registry
def failure_counter(registry: CollectorRegistry) -> Counter:
    """``deskpool_logon_failures`` on ``registry``.

    By pool and reason: the shipped alert on a pool that has no desktop for the users who ask
    (``reason="no_desktop_available"``) and the connection failures by reason read it.
    """
    return Counter(
        "deskpool_logon_failures",
        "Logons that stopped before the desktop was reached, by pool and reason (the "
        "error's code: no_desktop_available, license_limit_reached, desktop_unreachable...; "
        "error for anything else).",
        ["pool_id", "reason"],
        registry=registry,
    )


def observe_phase(runtime: Runtime, phase: LogonPhase, seconds: float | None) -> None:
    """Count a phase just recorded in this process's ``/metrics`` (nothing when ``None``)."""
    if seconds is not None:
        phase_histogram(runtime.metrics).labels(str(phase)).observe(max(seconds, 0.0))


async def mark_phase(
    runtime: Runtime,
    db: Db,
    logon_id: uuid.UUID,
    phase: LogonPhase,
    *,
    desktop_id: uuid.UUID | None = None,
) -> None:
    """Record that a logon reached ``phase`` now (in the caller's transaction, if any).

    Start on connect records ``powered_on`` with this, between ``allocated`` and
    ``guest_ready``.
    """
    seconds = await store_logons.mark_logon(db, logon_id, phase, desktop_id=desktop_id)
    observe_phase(runtime, phase, seconds)


@contextlib.asynccontextmanager
async def timed_logon(
    runtime: Runtime,
    *,
    user_id: uuid.UUID,
    pool_id: uuid.UUID,
    desktop_id: uuid.UUID | None = None,
    continued: uuid.UUID | None = None,
) -> AsyncIterator[uuid.UUID]:
    """Record a logon asked now; if the block fails, record why it stopped.

    The reason is the error's code (``desktop_unreachable``, ``no_desktop_available``,
    ``license_limit_reached``...), or ``error`` for anything else. A failure to record the
    failure (the database gone) is logged and the original error goes on.

    :param continued: a logon asked earlier that this block carries on (a desktop started for
        the user, who now connects to it): no new one is recorded.
    """
    logon_id = continued or await store_logons.start_logon(
        runtime.db, user_id=user_id, pool_id=pool_id, desktop_id=desktop_id
    )
    try:
        yield logon_id
    except Exception as error:
        code = getattr(error, "code", None)
        reason = code if isinstance(code, str) else "error"
        failure_counter(runtime.metrics).labels(str(pool_id), reason).inc()
        try:
            await store_logons.fail_logon(runtime.db, logon_id, reason)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as lost:
            log.warning("could not record the failed logon %s: %s", logon_id, type(lost).__name__)
        raise
