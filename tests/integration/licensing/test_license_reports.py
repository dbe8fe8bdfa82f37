"""Activation reports counted by a real HTTP receiver, sent by a real worker component."""

from __future__ import annotations

import asyncio
import itertools
import random
import socket
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from deskpool.actor import Actor
from deskpool.jobs.periodic import PeriodicContext
from deskpool.licensing import service
from deskpool.licensing.reporting import REPORT_JITTER, build_reporter
from deskpool.runtime import Runtime
from deskpool.testing.licensing import TestVendor
from deskpool.testing.pytest_plugin import opened_runtime
from deskpool_worker import WorkerComponent

INTERVAL = 1.0
DOCUMENTED = {
    "schema",
    "instance_id",
    "version",
    "edition",
    "license_id",
    "license_status",
    "build",
    "usage",
    "sent_at",
}


class Receiver:
    """The vendor's endpoint: records each report and when it came; can be made to fail."""

    def __init__(self) -> None:
        self.reports: list[tuple[float, dict[str, Any], int]] = []
        self.status = 204
        self.changed = asyncio.Condition()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        async with self.changed:
            self.reports.append((asyncio.get_running_loop().time(), body, self.status))
            self.changed.notify_all()
        return web.Response(status=self.status)

    def accepted(self) -> list[tuple[float, dict[str, Any], int]]:
        return [report for report in self.reports if report[2] < 300]

    async def wait_for(self, predicate: Any) -> None:
        async with asyncio.timeout(15), self.changed:
            await self.changed.wait_for(predicate)


class RunCounter:
    """Wraps the worker's ``license_report`` task to count its finished runs."""

    def __init__(self, worker: WorkerComponent) -> None:
        task = worker.scheduler.tasks["license_report"]
        self.runs = 0
        self.changed = asyncio.Condition()

        async def counted(context: PeriodicContext) -> None:
            try:
                await task.run(context)
            finally:
                async with self.changed:
                    self.runs += 1
                    self.changed.notify_all()

        worker.scheduler.tasks["license_report"] = replace(task, run=counted)

    async def wait_for_runs(self, count: int) -> None:
        async with asyncio.timeout(15), self.changed:
            await self.changed.wait_for(lambda: self.runs >= count)


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    app = web.Application()
    endpoint = Receiver()
    app.router.add_post("/activations", endpoint.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield endpoint, str(server.make_url("/activations"))
    finally:
        await server.close()


async def run_worker(environ: dict[str, str]) -> AsyncIterator[tuple[Runtime, RunCounter]]:
    async with opened_runtime(environ, ["worker"]) as runtime:
        worker = WorkerComponent(runtime)
        counter = RunCounter(worker)
        runtime.components[worker.name] = worker
        await worker.start()
        try:
            yield runtime, counter
        finally:
            await worker.stop()


def worker_environ(environ: dict[str, str], url: str) -> dict[str, str]:
    return {
        **environ,
        "LICENSE_REPORT_URL": url,
        "LICENSE_REPORT_INTERVAL": f"{INTERVAL}s",
        "POOL_RECONCILE_INTERVAL": "1h",
    }


async def test_the_free_edition_never_reports_whatever_the_url_says(
    db: asyncpg.Connection, licensing_environ: dict[str, str], receiver: Any
) -> None:
    endpoint, url = receiver
    async for runtime, counter in run_worker(worker_environ(licensing_environ, url)):
        # The report task looks a dozen times (about 0.6 s).
        await counter.wait_for_runs(12)
        async with runtime.db.acquire() as connection:
            state = await service.license_state(connection, runtime.licensing)
        assert state.reports.last_attempt_at is None
    assert endpoint.reports == []


async def test_a_licensed_edition_reports_on_schedule_and_recovers_from_failures(
    db: asyncpg.Connection,
    licensing_environ: dict[str, str],
    receiver: Any,
    license_vendor: TestVendor,
    make_context: Any,
) -> None:
    endpoint, url = receiver
    from tests.support.licensing import Clock

    await service.install_license(
        db, make_context(Clock()), license_vendor.issue(), Actor.system("test:reports")
    )
    async for runtime, counter in run_worker(worker_environ(licensing_environ, url)):
        await endpoint.wait_for(lambda: len(endpoint.accepted()) >= 3)
        times = [at for at, _, _ in endpoint.accepted()]
        low, high = INTERVAL * (1 - REPORT_JITTER), INTERVAL * (1 + REPORT_JITTER)
        for earlier, later in itertools.pairwise(times):
            # Within the jitter, plus the task's look interval and scheduling.
            assert low - 0.02 <= later - earlier <= high + 0.35
        _, payload, _ = endpoint.accepted()[0]
        assert set(payload) == DOCUMENTED
        assert payload["edition"] == "standard"
        assert payload["license_status"] == "valid"
        assert set(payload["usage"]) == {"desktops", "pools", "sessions"}
        text = str(payload)
        assert "@" not in text
        assert "Example Test Org" not in text
        assert socket.gethostname() not in text
        # The receiver fails for a while: retried with backoff, shown in the state.
        endpoint.status = 503
        await endpoint.wait_for(lambda: sum(1 for r in endpoint.reports if r[2] == 503) >= 3)
        await counter.wait_for_runs(counter.runs + 1)
        async with runtime.db.acquire() as connection:
            failing = await service.license_state(connection, runtime.licensing)
        assert failing.reports.last_outcome == "failed"
        assert failing.reports.consecutive_failures >= 3
        assert "503" in (failing.reports.last_error or "")
        endpoint.status = 204
        accepted = len(endpoint.accepted())
        await endpoint.wait_for(lambda seen=accepted: len(endpoint.accepted()) > seen)
        # The outcome is recorded when the run that sent it ends.
        await counter.wait_for_runs(counter.runs + 1)
        async with runtime.db.acquire() as connection:
            recovered = await service.license_state(connection, runtime.licensing)
        assert recovered.reports.last_outcome == "sent"
        assert recovered.reports.consecutive_failures == 0
        assert recovered.reports.sent == len(endpoint.accepted())


async def test_an_empty_url_disables_reporting(
    db: asyncpg.Connection,
    lic_runtime: Runtime,
    license_vendor: TestVendor,
) -> None:
    await service.install_license(
        db, lic_runtime.licensing, license_vendor.issue(), Actor.system("test:reports")
    )
    reporter = build_reporter(lic_runtime.plugins, lic_runtime.config)
    assert not reporter.enabled
    outcome = await service.send_report_if_due(
        db, lic_runtime.licensing, reporter, timedelta(seconds=1), random.Random(1)
    )
    assert outcome == "disabled"
