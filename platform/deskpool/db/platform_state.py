"""The platform's own facts kept in the database (the ``platform_state`` table).

:func:`instance_secret` is a random key the instance makes for itself on first use and every
process then shares (the cursor seal of the API's lists): no setting to configure, and it
survives restarts. Losing it costs nothing but the cursors in flight.
"""

from __future__ import annotations

import base64
import secrets

from deskpool.db.rows import Db

__all__ = ["instance_secret"]


async def instance_secret(db: Db, name: str, size: int = 32) -> bytes:
    """The random secret ``name`` of this instance, created on first use.

    Every process that asks gets the same bytes: the first one to store its candidate wins.

    :param name: the key in ``platform_state``.
    :param size: how many random bytes a new secret has.
    """
    candidate = base64.b64encode(secrets.token_bytes(size)).decode("ascii")
    await db.execute(
        """INSERT INTO platform_state (key, value)
           VALUES ($1, jsonb_build_object('secret', $2::text))
           ON CONFLICT (key) DO NOTHING""",
        name,
        candidate,
    )
    stored = await db.fetchval("SELECT value->>'secret' FROM platform_state WHERE key = $1", name)
    return base64.b64decode(str(stored))
