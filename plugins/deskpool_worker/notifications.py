"""The worker's LISTEN connection: wakes the claim loop when jobs are enqueued or given back."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import asyncpg

from deskpool.jobs.model import JOBS_CHANNEL
from deskpool_worker.reconnect import DATABASE_ERRORS, ReconnectBackoff, wait_for_event

log = logging.getLogger(__name__)


class JobNotifications:
    """One connection that LISTENs on the jobs channel, reconnected whenever it is lost.

    :param dsn: the database URL.
    :param on_notify: called on every notification, and after each (re)connection, since
        notifications sent while disconnected are lost.
    :param probe_interval: how often an idle connection is checked with a query.
    """

    def __init__(self, dsn: str, on_notify: Callable[[], None], probe_interval: float) -> None:
        self.dsn = dsn
        self.on_notify = on_notify
        self.probe_interval = probe_interval
        self.connected = asyncio.Event()
        self.connections = 0

    async def run(self) -> None:
        """Listen until cancelled."""
        backoff = ReconnectBackoff()
        while True:
            try:
                connection = await asyncpg.connect(
                    self.dsn, timeout=10, server_settings={"application_name": "deskpool-worker"}
                )
            except DATABASE_ERRORS as error:
                delay = backoff.next_delay()
                log.warning("cannot LISTEN for jobs (%s); retrying in %.1fs", error, delay)
                await asyncio.sleep(delay)
                continue
            try:
                await self._listen(connection)
            except DATABASE_ERRORS as error:
                log.warning("lost the job notification connection (%s); reconnecting", error)
            finally:
                self.connected.clear()
                with contextlib.suppress(*DATABASE_ERRORS):
                    await asyncio.wait_for(connection.close(), 2)
            await asyncio.sleep(backoff.next_delay())
            backoff.reset()

    async def _listen(self, connection: asyncpg.Connection) -> None:
        lost = asyncio.Event()
        connection.add_termination_listener(lambda _connection: lost.set())
        await connection.add_listener(JOBS_CHANNEL, lambda *_args: self.on_notify())
        self.connections += 1
        if self.connections > 1:
            log.info("job notifications reconnected")
        self.connected.set()
        self.on_notify()
        while not await wait_for_event(lost, self.probe_interval):
            await connection.fetchval("SELECT 1", timeout=10)
        raise asyncpg.ConnectionDoesNotExistError("the notification connection was closed")
