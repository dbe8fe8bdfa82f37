"""One attempt of a desktop job, as it writes to its desktop: fenced, and only in its step.

A job decides from a desktop it read earlier; by the time it writes, an administrator or the
reconciler may have moved the desktop on, or another worker may have reclaimed the job.
:class:`DesktopRecorder` writes each outcome of a step under the job's lease
(:meth:`~deskpool.jobs.JobContext.hold_lease`) and only while the desktop is still in the state
the step started from; a desktop deleted meanwhile is left alone. It also decides what an error
leads to (:meth:`DesktopRecorder.settle`): a retry of the job when a later attempt may succeed,
else a failed desktop, with ``failed_step`` and a short ``last_error`` that never holds a secret
(:func:`describe_failure`). The steps themselves are :mod:`deskpool.provisioning.steps`.

A desktop started for a user (start on connect, :mod:`deskpool.starts`) is handed to him in the
transaction that records it ``ready``, and a failure ends the start with the reason.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import asyncpg

from deskpool.audit import record_audit_event
from deskpool.desktops.jobs import DESKTOPS, WORKER_ACTOR
from deskpool.desktops.states import DesktopEvent, Failed, IllegalTransition
from deskpool.desktops.store import apply_event_in_state, get_desktop, set_desktop_node
from deskpool.drivers import DriverError
from deskpool.errors import DeskpoolError, ServiceUnavailable
from deskpool.events import AuditEvent, Outcome
from deskpool.jobs.context import JobContext
from deskpool.live.publishers import publish_desktop
from deskpool.pools.model import Desktop, DesktopState, Pool
from deskpool.provisioning import starts

log = logging.getLogger(__name__)

#: The longest error text kept on a failed desktop.
ERROR_TEXT_LIMIT = 500


def describe_failure(error: BaseException) -> str:
    """The ``last_error`` of a desktop failed by ``error``: short, and never a secret."""
    if isinstance(error, DeskpoolError):
        text = error.detail
    else:
        text = f"unexpected error ({type(error).__name__})"
    return text[:ERROR_TEXT_LIMIT]


def retryable(error: BaseException) -> bool:
    """Whether a later attempt may succeed where this one met ``error``."""
    if isinstance(error, DriverError):
        return error.retryable
    return isinstance(error, ServiceUnavailable)


def utc_now() -> datetime:
    """The time of an outcome (UTC)."""
    return datetime.now(UTC)


class StepStopped(Exception):
    """The desktop left the step being worked on (deleted, failed, moved on by someone)."""


class DesktopRecorder:
    """Writes what one attempt of a job does to its desktop.

    Every outcome is written fenced by the job's lease, and only while the desktop is still
    in the state the step started from.
    """

    def __init__(self, context: JobContext, desktop: Desktop, pool: Pool) -> None:
        self.context = context
        self.desktop = desktop
        self.pool = pool
        self._last_heartbeat = asyncio.get_running_loop().time()

    @property
    def db(self) -> asyncpg.Pool:
        """The worker's connection pool."""
        return self.context.runtime.db

    @property
    def last_attempt(self) -> bool:
        """Whether the job will not be tried again if this attempt fails."""
        return self.context.attempt >= self.context.job.max_attempts

    async def reload(self) -> Desktop | None:
        """Read the desktop again; ``None`` once it is gone."""
        found = await get_desktop(self.db, self.desktop.id)
        if found is not None:
            self.desktop = found
        return found

    async def record(self, event: DesktopEvent, *, node: str | None = None) -> Desktop | None:
        """Apply ``event`` if the desktop is still in the state the step started from.

        :param node: the node the desktop's VM is on, recorded with the event.
        :returns: the desktop after it, or ``None`` when the desktop moved on meanwhile.
        :raises LeaseLost: the job was reclaimed; nothing is written.
        """
        step = self.desktop.state
        async with self.db.acquire() as connection, connection.transaction():
            await self.context.hold_lease(connection)
            after = await apply_event_in_state(
                connection, self.desktop.id, event, utc_now(), states={step}, pool=self.pool
            )
            if after is not None and node is not None:
                await set_desktop_node(connection, self.desktop.id, node)
            if after is not None:
                after = await starts.hand_over(self.context.runtime, connection, after, self.pool)
        if after is None:
            log.info(
                "desktop %s left %s while the job worked on it; %s not recorded",
                self.desktop.name,
                step,
                event.name,
            )
            return None
        self.desktop = after
        await publish_desktop(self.context.runtime, after)
        return after

    async def record_from_any(self, event: DesktopEvent) -> Desktop | None:
        """Apply ``event`` in whatever state the desktop is; ``None`` if illegal there."""
        async with self.db.acquire() as connection, connection.transaction():
            await self.context.hold_lease(connection)
            current = await get_desktop(connection, self.desktop.id, for_update=True)
            if current is None:
                return None
            try:
                after = await apply_event_in_state(
                    connection, current.id, event, utc_now(), states={current.state}, pool=self.pool
                )
            except IllegalTransition as error:
                log.info("desktop %s: %s", current.name, error.detail)
                return None
        if after is not None:
            self.desktop = after
            await publish_desktop(self.context.runtime, after)
        return after

    async def fail(self, error: str) -> None:
        """Fail the desktop at its current step with ``error`` (if it is still there)."""
        step = self.desktop.state
        now = utc_now()
        async with self.db.acquire() as connection, connection.transaction():
            await self.context.hold_lease(connection)
            after = await apply_event_in_state(
                connection, self.desktop.id, Failed(error), now, states={step}, pool=self.pool
            )
            if after is None:
                return
            await self.audit(
                connection, "desktop.fail", now, "failure", step=str(step), error=error
            )
            await starts.end_start(connection, self.desktop.id, starts.START_FAILED)
        self.desktop = after
        await publish_desktop(self.context.runtime, after)
        log.warning("desktop %s failed at %s: %s", after.name, step, error)

    async def audit(
        self,
        connection: asyncpg.Connection,
        action: str,
        now: datetime,
        outcome: Outcome,
        **details: object,
    ) -> None:
        """Record the audit event of a change the job made to the desktop, as the worker."""
        await record_audit_event(
            connection,
            AuditEvent(
                action=action,
                actor=WORKER_ACTOR,
                resource_type=DESKTOPS,
                resource_id=str(self.desktop.id),
                outcome=outcome,
                occurred_at=now,
                details={
                    "pool_id": str(self.pool.id),
                    "desktop": self.desktop.name,
                    **details,
                    "job_id": self.context.id,
                },
            ),
        )

    async def settle(self, error: BaseException) -> None:
        """Decide what a step's ``error`` leads to: a retry of the job, or a failed desktop.

        :raises: ``error`` again when a later attempt may succeed.
        """
        if retryable(error) and not self.last_attempt:
            raise error
        await self.fail(describe_failure(error))

    async def pause(self, seconds: float) -> None:
        """Sleep between two polls, heartbeating the lease every third of its duration."""
        await asyncio.sleep(seconds)
        loop = asyncio.get_running_loop()
        if loop.time() - self._last_heartbeat >= self.context.lease_duration.total_seconds() / 3:
            await self.context.heartbeat()
            self._last_heartbeat = loop.time()

    async def still_in(self, state: DesktopState) -> None:
        """Raise :class:`StepStopped` unless the desktop is still in ``state``."""
        current = await self.reload()
        if current is None or current.state is not state:
            raise StepStopped
