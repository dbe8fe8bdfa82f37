"""Fixtures of the job queue tests: a clean queue, and in-process workers with test plugins."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from deskpool.host import bootstrap
from deskpool.runtime import Runtime
from deskpool_worker import WorkerComponent

StartWorker = Callable[..., Awaitable[WorkerComponent]]


@pytest.fixture
def db_emptied() -> tuple[str, ...]:
    """``db`` empties the job queue and the periodic runs."""
    return ("jobs", "periodic_tasks")


@pytest.fixture
async def start_worker(
    deskpool_environ: dict[str, str], db: asyncpg.Connection
) -> AsyncIterator[StartWorker]:
    """``await start_worker(*plugins, **settings)``: a started worker component in this process.

    Each worker has its own runtime (pool, metrics registry) and the given plugin objects
    registered besides the installed ones; every worker is stopped and closed at the end.
    """
    started: list[tuple[WorkerComponent, Runtime]] = []

    async def start(*plugins: Any, **settings: str) -> WorkerComponent:
        environ = {
            **deskpool_environ,
            "WORKER_LEASE_DURATION": "3s",
            "WORKER_SHUTDOWN_TIMEOUT": "2s",
            "WORKER_POLL_INTERVAL": "10m",
            **settings,
        }
        process = bootstrap(environ, ["worker"], log_setup=False)
        for plugin in plugins:
            process.plugins.pm.register(plugin)
        runtime = Runtime(process.config, process.plugins)
        await runtime.open()
        worker = WorkerComponent(runtime)
        runtime.components[worker.name] = worker
        await worker.start()
        started.append((worker, runtime))
        return worker

    yield start
    for worker, runtime in reversed(started):
        if worker.started:
            await worker.stop()
        await runtime.close()
