"""The VM events service: an event that matters enqueues the reconciliation of its pools."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from deskpool.drivers import VmEvent
from deskpool.pools.jobs import enqueue_pool_reconcile
from deskpool.sessions.store_addresses import forget_vm_addresses
from deskpool.vm_events.model import wants_reconcile
from deskpool.vm_events.store import pools_recording_vm

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)


async def vm_changed(runtime: Runtime, event: VmEvent) -> list[uuid.UUID]:
    """Enqueue ``pool.reconcile`` for each pool whose desktops record ``event``'s VM.

    :returns: the pools whose reconciliation was asked for (none for an event that does not
        matter, or for a VM no desktop records).
    """
    if not wants_reconcile(event):
        return []
    try:
        cluster_id = uuid.UUID(event.cluster_id)
    except ValueError:
        return []
    # Stopped or gone, the VM may be shown elsewhere when it runs again: its desktop's
    # recorded address is forgotten, recorded again when it is ready (or at its next opening).
    async with runtime.db.acquire() as connection:
        await forget_vm_addresses(connection, event.vm_id)
    async with runtime.db.acquire() as connection, connection.transaction():
        pools = await pools_recording_vm(connection, cluster_id, event.vm_id)
        for pool_id in pools:
            await enqueue_pool_reconcile(connection, pool_id)
    if pools:
        log.info(
            "VM %s of cluster %s %s: reconciling pool(s) %s",
            event.vm_id,
            cluster_id,
            event.kind.value,
            ", ".join(str(pool) for pool in pools),
        )
    return pools
