"""SQL of the VM events work."""

from __future__ import annotations

import uuid

from deskpool.db.rows import Db


async def pools_recording_vm(db: Db, cluster_id: uuid.UUID, vm_id: str) -> list[uuid.UUID]:
    """The pools with a desktop that records the VM ``vm_id`` of the cluster."""
    rows = await db.fetch(
        "SELECT DISTINCT pool_id FROM desktops WHERE cluster_id = $1 AND vm_id = $2",
        cluster_id,
        vm_id,
    )
    return [row["pool_id"] for row in rows]
