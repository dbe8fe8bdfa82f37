"""The worker's watcher of VM events: one long-lived driver per cluster that reports them.

:meth:`VmEventWatcher.refresh` (run by the worker every :data:`REFRESH_SECONDS`) builds a
driver for each cluster whose driver declares ``capabilities.vm_events``, with this watcher as
its context's event sink, and calls ``watch_events()`` (idempotent: it reconnects a host that
went away); a cluster whose record or credentials changed gets a new driver, a deleted one
loses its own. Each event is handed to :func:`deskpool.vm_events.service.vm_changed` in a task
of its own, so the driver's event thread never waits for the database.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING

from deskpool.clusters.drivers import DriverNotInstalled
from deskpool.clusters.repository import ClusterRecord, list_clusters
from deskpool.drivers import DriverError, HypervisorDriver, VmEvent, deadline_after
from deskpool.secrets import SecretDecryptionFailed, SecretsUnavailable
from deskpool.vm_events.model import WatchKey, watch_key
from deskpool.vm_events.service import vm_changed

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: How many clusters one refresh reads at most.
CLUSTER_PAGE = 1000
#: Seconds ``watch_events`` may take for one cluster.
WATCH_TIMEOUT = 30.0
#: Seconds between two refreshes at most (``POOL_RECONCILE_INTERVAL`` when shorter): a new
#: cluster is watched this soon.
REFRESH_SECONDS = 5.0


class VmEventWatcher:
    """Watches the VM events of every cluster whose driver reports them (one per process).

    :param runtime: the worker's runtime.
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._drivers: dict[uuid.UUID, tuple[WatchKey, HypervisorDriver]] = {}
        self._handling: set[asyncio.Task[object]] = set()

    def vm_event(self, event: VmEvent) -> None:
        """The drivers' event sink: hand ``event`` to the service in a task of its own."""
        task = asyncio.get_running_loop().create_task(self._handle(event))
        self._handling.add(task)
        task.add_done_callback(self._handling.discard)

    async def _handle(self, event: VmEvent) -> None:
        try:
            await vm_changed(self.runtime, event)
        except Exception as error:  # the periodic pass catches what an event misses
            log.warning(
                "VM event %s of cluster %s not handled: %s",
                event.kind.value,
                event.cluster_id,
                type(error).__name__,
            )

    def _watches(self, record: ClusterRecord) -> bool:
        try:
            return self.runtime.drivers.driver_class(record.driver).capabilities.vm_events
        except DriverNotInstalled:
            return False

    async def refresh(self) -> int:
        """Watch every cluster that reports events; drop changed or deleted ones.

        :returns: how many clusters are watched.
        """
        records = [
            record
            for record in await list_clusters(self.runtime.db, limit=CLUSTER_PAGE)
            if self._watches(record)
        ]
        wanted = {record.id: record for record in records}
        for cluster_id in list(self._drivers):
            key, driver = self._drivers[cluster_id]
            record = wanted.get(cluster_id)
            if record is None or watch_key(record) != key:
                del self._drivers[cluster_id]
                await driver.close()
        for record in records:
            await self._watch(record)
        return len(self._drivers)

    async def _watch(self, record: ClusterRecord) -> None:
        held = self._drivers.get(record.id)
        try:
            if held is None:
                driver = await self.runtime.drivers.driver_for(record, events=self)
                held = (watch_key(record), driver)
                self._drivers[record.id] = held
                await driver.watch_events(deadline=deadline_after(WATCH_TIMEOUT))
                log.info("watching the VM events of cluster %s (%s)", record.name, record.id)
                return
            await held[1].watch_events(deadline=deadline_after(WATCH_TIMEOUT))
        except (DriverError, SecretDecryptionFailed, SecretsUnavailable) as error:
            log.warning("cannot watch the VM events of cluster %s: %s", record.name, error)

    async def close(self) -> None:
        """Close every driver and wait for the events being handled."""
        drivers = [driver for _key, driver in self._drivers.values()]
        self._drivers.clear()
        for driver in drivers:
            await driver.close()
        if self._handling:
            await asyncio.gather(*self._handling, return_exceptions=True)
