"""The worker keeps the outage snapshot (:mod:`deskpool.outage_brokering`).

``OUTAGE_SNAPSHOT_INTERVAL``
    How often the snapshot in Redis of what brokering needs during a database outage is read
    from the database again (and at once after a change that took access away).
"""

from __future__ import annotations

import asyncio

from deskpool.config import SettingRegistry, parse_duration
from deskpool.outage_brokering.keeper import keep_snapshot
from deskpool.runtime import Runtime
from deskpool.task_stop import cancel_until_done

SETTING = "OUTAGE_SNAPSHOT_INTERVAL"


def declare_settings(registry: SettingRegistry) -> None:
    """Declare ``OUTAGE_SNAPSHOT_INTERVAL``."""
    registry.section("Worker and reconciliation", owner="worker").add(
        SETTING,
        parse_duration,
        "10s",
        "How often the worker reads again from the database what brokering needs during a "
        "database outage (pools, entitlements, ready desktops and their addresses, holders, "
        "the license's sessions, known users) and keeps it in the key-value store; at once "
        "after a change that took access away. The journal of an outage is written to the "
        "database as soon as it answers again.",
        type_name="duration",
    )


class SnapshotKeeper:
    """The worker's task that keeps the snapshot."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start keeping it."""
        interval = self.runtime.config.duration(SETTING)
        self._task = asyncio.create_task(keep_snapshot(self.runtime, interval), name="outage")

    async def stop(self) -> None:
        """Stop keeping it."""
        await cancel_until_done(self._task)
        self._task = None
