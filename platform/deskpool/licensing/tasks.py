"""The worker's licensing tasks: persist the watermark, send activation reports.

Registered by the worker component with its other periodic tasks, so each runs once per
interval across all workers:

- ``license_watermark`` every ``LICENSE_WATERMARK_INTERVAL``: persists the highest time seen
  (:func:`deskpool.licensing.service.persist_watermark`), then judges the license and records
  (and audits) a change of state: expiry, the end of grace, watermark evidence.
- ``license_report``: looks every twentieth of ``LICENSE_REPORT_INTERVAL`` (at most a minute)
  whether an activation report is due, and sends it through the chosen reporter
  (:func:`deskpool.licensing.service.send_report_if_due`); never for the free edition.
"""

from __future__ import annotations

import random
from datetime import timedelta

from deskpool.jobs.periodic import PeriodicContext, PeriodicTask
from deskpool.licensing import service
from deskpool.licensing.reporting import build_reporter, check_interval
from deskpool.registry import Registry

LICENSE_WATERMARK_TASK = "license_watermark"
LICENSE_REPORT_TASK = "license_report"


async def persist_watermark(context: PeriodicContext) -> None:
    """Persist the watermark, then record the license state (auditing a change)."""
    licensing = context.runtime.licensing
    async with context.runtime.db.acquire() as connection:
        await service.persist_watermark(connection, licensing)
        judgement = await service.current_judgement(connection, licensing)
        await service.record_judgement(connection, licensing, judgement)


async def send_activation_report(context: PeriodicContext) -> None:
    """Send the activation report if one is due."""
    runtime = context.runtime
    reporter = build_reporter(runtime.plugins, runtime.config)
    interval = timedelta(seconds=runtime.config.duration("LICENSE_REPORT_INTERVAL"))
    async with runtime.db.acquire() as connection:
        await service.send_report_if_due(
            connection, runtime.licensing, reporter, interval, random.SystemRandom()
        )


def register_periodic_tasks(registry: Registry[PeriodicTask]) -> None:
    """Add the licensing tasks."""
    registry.add(
        LICENSE_WATERMARK_TASK,
        PeriodicTask(
            persist_watermark,
            every="LICENSE_WATERMARK_INTERVAL",
            description="Persist the license watermark; record license state changes.",
        ),
    )
    registry.add(
        LICENSE_REPORT_TASK,
        PeriodicTask(
            send_activation_report,
            every=check_interval,
            description="Send the activation report when due (never for the free edition).",
        ),
    )
