"""Periodic tasks: work that runs once per interval across the whole deployment.

Every worker process schedules every registered :class:`PeriodicTask`, and each run is claimed
in PostgreSQL with one conditional update of the task's row in ``periodic_tasks``: it succeeds
only when the previous run started at least one interval ago *and* no run holds the task's
lease. So however many workers there are, a task starts at most once per interval, and two
runs of a task never overlap; a run whose worker died is taken over once its lease expires.
Like jobs, a run's lease carries a fencing token and is extended by heartbeats.

Plugins add tasks through ``deskpool_register_periodic_tasks``:
``registry.add("license_watermark", PeriodicTask(persist, every="LICENSE_WATERMARK_INTERVAL"))``.

A task that walks many objects (pools, sessions, desktops, recordings, partitions) handles each
alone (:func:`each_alone`): one object that fails is one warning line, and the rest go on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import asyncpg

from deskpool.errors import error_text
from deskpool.jobs.model import LeaseLost

if TYPE_CHECKING:
    from deskpool.config import Config
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

PeriodicHandler = Callable[["PeriodicContext"], Awaitable[Any]]

_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclass(frozen=True)
class EachOutcome(Generic[_R]):
    """What :func:`each_alone` did: the results of the objects done, and how many failed."""

    done: tuple[_R, ...]
    failed: int


async def each_alone(
    task: str,
    items: Iterable[_T],
    act: Callable[[_T], Awaitable[_R]],
    describe: Callable[[_T], str],
) -> EachOutcome[_R]:
    """Apply ``act`` to each item, each alone: one that raises does not stop the others.

    A failure is logged as one warning line (``task``, the item as ``describe`` says it, the
    error's type and, when safe, its message; no traceback). A lost lease and a cancellation
    still stop the run.
    """
    done: list[_R] = []
    failed = 0
    for item in items:
        try:
            done.append(await act(item))
        except LeaseLost:
            raise
        except Exception as error:
            failed += 1
            log.warning(
                "%s: %s failed (%s); the others go on", task, describe(item), error_text(error)
            )
    return EachOutcome(tuple(done), failed)


@dataclass(frozen=True)
class PeriodicTask:
    """A task run once per interval across the deployment.

    :param run: ``async def run(context: PeriodicContext)``.
    :param every: the interval: the name of a duration setting (``"POOL_RECONCILE_INTERVAL"``),
        seconds, or a function of the configuration returning seconds.
    :param description: one line for logs and the operator guide.
    """

    run: PeriodicHandler
    every: str | float | Callable[[Config], float]
    description: str = ""

    def interval(self, config: Config) -> timedelta:
        """The interval, read from the configuration when :attr:`every` names a setting."""
        every = self.every
        seconds = (
            config.duration(every)
            if isinstance(every, str)
            else every(config)
            if callable(every)
            else every
        )
        if seconds <= 0:
            raise ValueError("a periodic task's interval must be positive")
        return timedelta(seconds=seconds)


class PeriodicContext:
    """One run of a periodic task, as the task sees it.

    :param name: the task's registered name.
    :param runtime: the worker process's runtime.
    :param fence: the fencing token of this run's lease.
    :param started_at: when the run was claimed (the database's clock).
    :param interval: the task's interval.
    :param lease_duration: ``WORKER_LEASE_DURATION``.
    """

    def __init__(
        self,
        name: str,
        runtime: Runtime,
        *,
        fence: int,
        started_at: datetime,
        interval: timedelta,
        lease_duration: timedelta,
    ) -> None:
        self.name = name
        self.runtime = runtime
        self.fence = fence
        self.started_at = started_at
        self.interval = interval
        self.lease_duration = lease_duration
        self.cancelled = asyncio.Event()

    async def heartbeat(self) -> None:
        """Extend the run's lease now (the worker also does it in the background).

        :raises LeaseLost: another worker took the task over.
        """
        async with self.runtime.db.acquire() as connection:
            held = await extend_run(connection, self.name, self.fence, self.lease_duration)
        if not held:
            self.cancelled.set()
            raise LeaseLost(f"periodic task {self.name} is no longer held by this run")


@dataclass(frozen=True)
class ClaimedRun:
    """A claimed run: its fencing token and when it was claimed."""

    fence: int
    started_at: datetime


async def register_tasks(connection: asyncpg.Connection, names: list[str]) -> None:
    """Make sure every task has its row (a task's first run is due at once)."""
    await connection.execute(
        "INSERT INTO periodic_tasks (name) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING",
        names,
    )


async def claim_run(
    connection: asyncpg.Connection,
    name: str,
    *,
    worker: str,
    interval: timedelta,
    lease: timedelta,
) -> ClaimedRun | None:
    """Claim a run of ``name`` if one is due and none is running; ``None`` otherwise."""
    row = await connection.fetchrow(
        """
        UPDATE periodic_tasks SET
            fence = fence + 1,
            worker = $2,
            lease_expires_at = now() + $4::interval,
            last_started_at = now(),
            runs = runs + 1
        WHERE name = $1
          AND (last_started_at IS NULL OR last_started_at <= now() - $3::interval)
          AND (lease_expires_at IS NULL OR lease_expires_at <= now())
        RETURNING fence, last_started_at
        """,
        name,
        worker,
        interval,
        lease,
    )
    return ClaimedRun(row["fence"], row["last_started_at"]) if row is not None else None


async def seconds_until_due(
    connection: asyncpg.Connection, name: str, interval: timedelta
) -> float:
    """Seconds until a run of ``name`` may be claimed (its interval passed, no lease held)."""
    seconds: float | None = await connection.fetchval(
        """
        SELECT greatest(
            0,
            extract(epoch FROM coalesce(last_started_at + $2::interval, now()) - now()),
            extract(epoch FROM coalesce(lease_expires_at, now()) - now())
        )::float8
        FROM periodic_tasks WHERE name = $1
        """,
        name,
        interval,
    )
    return seconds or 0.0


async def extend_run(
    connection: asyncpg.Connection, name: str, fence: int, lease: timedelta
) -> bool:
    """Extend a run's lease; ``False`` when the run no longer holds it."""
    held = await connection.fetchval(
        """
        UPDATE periodic_tasks SET lease_expires_at = now() + $3::interval
        WHERE name = $1 AND fence = $2 AND lease_expires_at IS NOT NULL
        RETURNING true
        """,
        name,
        fence,
        lease,
    )
    return bool(held)


async def finish_run(
    connection: asyncpg.Connection,
    name: str,
    fence: int,
    *,
    outcome: str,
    error: str | None = None,
) -> bool:
    """Record the end of a run and free the task; ``False`` when the run had lost its lease."""
    done = await connection.fetchval(
        """
        UPDATE periodic_tasks SET lease_expires_at = NULL, last_finished_at = now(),
                                  last_outcome = $3, last_error = $4
        WHERE name = $1 AND fence = $2 AND lease_expires_at IS NOT NULL
        RETURNING true
        """,
        name,
        fence,
        outcome,
        error,
    )
    return bool(done)


async def hold_periodic_run(connection: asyncpg.Connection, name: str, fence: int) -> None:
    """Fence the caller's open transaction with the lease of the periodic run ``fence``.

    The task's row is share-locked until the transaction ends, so another worker cannot take
    the task over (its claim updates the row) before the transaction's effects are committed.

    :raises LeaseLost: the run no longer holds the task; the transaction must not commit.
    """
    if not connection.is_in_transaction():
        raise RuntimeError("hold_periodic_run must run inside the transaction it protects")
    held = await connection.fetchval(
        """
        SELECT true FROM periodic_tasks
         WHERE name = $1 AND fence = $2 AND lease_expires_at IS NOT NULL
           FOR SHARE
        """,
        name,
        fence,
    )
    if not held:
        raise LeaseLost(f"periodic task {name} is no longer held by run {fence}")
