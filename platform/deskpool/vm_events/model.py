"""What the VM events work decides without I/O."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING

from deskpool.drivers import VmEvent, VmEventKind

if TYPE_CHECKING:
    # A type only: a model does no I/O, so it never loads the clusters' repository.
    from deskpool.clusters.repository import ClusterRecord

#: The event kinds that may leave a desktop without a running VM.
RECONCILE_ON = frozenset({VmEventKind.STOPPED, VmEventKind.REMOVED})

#: What a watcher's driver was built from: the record and when its credentials changed.
WatchKey = tuple[uuid.UUID, datetime, datetime | None]


def wants_reconcile(event: VmEvent) -> bool:
    """Whether ``event`` should make deskpool reconcile the pools of its VM now."""
    return event.kind in RECONCILE_ON


def watch_key(record: ClusterRecord) -> WatchKey:
    """The key a watcher's driver is kept under: a changed record or credentials rebuild it."""
    return (record.id, record.updated_at, record.credentials.changed_at)
