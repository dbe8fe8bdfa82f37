"""SQL of the desktops' recorded addresses (``desktop_addresses``, issue 39).

Where a desktop is shown, sealed (it may hold credentials), recorded for the VM it was read
from and the protocol its pool preferred then. :mod:`deskpool.sessions.tokens` seals, opens
and asks the driver; this module only stores.
"""

from __future__ import annotations

import uuid

import asyncpg

from deskpool.db.rows import Db


async def put_address(
    db: Db, desktop_id: uuid.UUID, *, vm_id: str, preference: str, sealed: bytes
) -> None:
    """Record (or replace) the address of ``desktop_id``; nothing when the desktop is gone."""
    await db.execute(
        """
        INSERT INTO desktop_addresses (desktop_id, vm_id, preference, sealed)
        SELECT id, $2, $3, $4 FROM desktops WHERE id = $1
        ON CONFLICT (desktop_id) DO UPDATE
           SET vm_id = excluded.vm_id, preference = excluded.preference,
               sealed = excluded.sealed, recorded_at = now()
        """,
        desktop_id,
        vm_id,
        preference,
        sealed,
    )


async def get_address(
    db: Db, desktop_id: uuid.UUID, *, vm_id: str, preference: str
) -> bytes | None:
    """The sealed address of ``desktop_id`` read from ``vm_id`` for ``preference``, if any."""
    sealed: bytes | None = await db.fetchval(
        "SELECT sealed FROM desktop_addresses WHERE desktop_id = $1 AND vm_id = $2 "
        "AND preference = $3",
        desktop_id,
        vm_id,
        preference,
    )
    return sealed


async def forget_vm_addresses(connection: asyncpg.Connection, vm_id: str) -> None:
    """Forget the addresses read from ``vm_id`` (its driver reported it changed)."""
    await connection.execute("DELETE FROM desktop_addresses WHERE vm_id = $1", vm_id)


async def forget_address(db: Db, desktop_id: uuid.UUID) -> None:
    """Forget the address of ``desktop_id`` (its VM is being started again)."""
    await db.execute("DELETE FROM desktop_addresses WHERE desktop_id = $1", desktop_id)
