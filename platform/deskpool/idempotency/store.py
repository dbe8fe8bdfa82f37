"""The SQL of idempotency keys: claim a key in a transaction, keep its response, purge.

A key is claimed first in the transaction of its request (:func:`claim`): the row is inserted
with a placeholder response, which :func:`record` replaces before the commit. Another request
with the same key waits for that transaction: it then finds the committed row (and its
response), or inserts its own if the first rolled back. Nobody sees the placeholder.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from deskpool.idempotency.model import StoredResponse

Db = Any  # a connection or a pool (asyncpg)


async def claim(
    connection: Db, principal_id: str, key: str, fingerprint: str, expires_at: datetime
) -> StoredResponse | None:
    """Claim ``key`` for this transaction; the stored response when it was used already.

    ``None``: the key is new (or expired), and this transaction holds it until it ends.
    """
    row = await connection.fetchrow(
        """INSERT INTO idempotency_keys
                  (principal_id, key, fingerprint, status, body, expires_at)
           VALUES ($1, $2, $3, 0, ''::bytea, $4)
           ON CONFLICT (principal_id, key) DO UPDATE
              SET fingerprint = EXCLUDED.fingerprint, status = 0, headers = '{}'::jsonb,
                  body = ''::bytea, created_at = now(), expires_at = EXCLUDED.expires_at
            WHERE idempotency_keys.expires_at <= now()
           RETURNING 1""",
        principal_id,
        key,
        fingerprint,
        expires_at,
    )
    if row is not None:
        return None
    stored = await connection.fetchrow(
        """SELECT fingerprint, status, headers, body FROM idempotency_keys
            WHERE principal_id = $1 AND key = $2""",
        principal_id,
        key,
    )
    assert stored is not None  # the conflict was with this row, committed and unexpired
    return StoredResponse(
        stored["fingerprint"],
        stored["status"],
        bytes(stored["body"]),
        json.loads(stored["headers"]),
    )


async def record(
    connection: Db,
    principal_id: str,
    key: str,
    status: int,
    headers: dict[str, str],
    body: bytes,
) -> None:
    """Keep the response of the claimed ``key`` (in the transaction that claimed it)."""
    await connection.execute(
        """UPDATE idempotency_keys SET status = $3, headers = $4::jsonb, body = $5
            WHERE principal_id = $1 AND key = $2""",
        principal_id,
        key,
        status,
        json.dumps(headers),
        body,
    )


async def release(connection: Db, principal_id: str, key: str) -> None:
    """Forget the claimed ``key`` (its request failed: a retry runs it again)."""
    await connection.execute(
        "DELETE FROM idempotency_keys WHERE principal_id = $1 AND key = $2", principal_id, key
    )


async def purge_expired(db: Db) -> int:
    """Delete the expired keys and their responses; how many."""
    result: str = await db.execute("DELETE FROM idempotency_keys WHERE expires_at <= now()")
    return int(result.split()[-1])
