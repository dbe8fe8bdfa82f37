"""The ``worker`` component: runs queued jobs and periodic tasks.

At this stage the worker starts, reports ready and drains within ``WORKER_SHUTDOWN_TIMEOUT``;
the job queue it serves is built on this component.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from deskpool.plugins import hookimpl
from deskpool.registry import Registry
from deskpool.runtime import ComponentFactory, Runtime

log = logging.getLogger(__name__)


class WorkerComponent:
    """Polls the job queue every ``WORKER_POLL_INTERVAL`` until stopped."""

    name = "worker"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    @property
    def started(self) -> bool:
        """Whether the loop is running."""
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Start the loop."""
        self._stopping.clear()
        self._task = asyncio.create_task(self._run(), name="deskpool-worker")

    async def _run(self) -> None:
        interval = self.runtime.config.duration("WORKER_POLL_INTERVAL")
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval)

    async def stop(self) -> None:
        """Stop claiming and let the loop finish within ``WORKER_SHUTDOWN_TIMEOUT``."""
        self._stopping.set()
        if self._task is not None:
            timeout = self.runtime.config.duration("WORKER_SHUTDOWN_TIMEOUT")
            try:
                await asyncio.wait_for(self._task, timeout)
            except TimeoutError:
                log.warning("worker did not drain within WORKER_SHUTDOWN_TIMEOUT")
            self._task = None


@hookimpl
def deskpool_register_components(registry: Registry[ComponentFactory]) -> None:
    """Register the ``worker`` component."""
    registry.add("worker", WorkerComponent)
