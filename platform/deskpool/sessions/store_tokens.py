"""The SQL of connection tokens: issued by the API, redeemed once by a gateway, pruned.

A token is stored by its key with its sealed target (``connection_tokens``); redemption marks it
used in one ``UPDATE``, so two gateways cannot both redeem it. The service issues tokens
(:mod:`deskpool.sessions.service`), the broker redeems them (:mod:`deskpool.sessions.broker`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.db.rows import Db, fetch_record, record_from_row
from deskpool.sessions.model import (
    IssuedToken,
)


def _issued(row: Mapping[str, Any]) -> IssuedToken:
    return record_from_row(IssuedToken, row)


async def insert_token(
    connection: asyncpg.Connection,
    key: bytes,
    *,
    user_id: uuid.UUID,
    desktop_id: uuid.UUID,
    pool_id: uuid.UUID,
    protocol: str,
    sealed_target: bytes,
    ttl: float,
    shadow_of: uuid.UUID | None = None,
    logon_id: uuid.UUID | None = None,
) -> datetime:
    """Store a new token by its key, with its sealed target; return when it expires.

    The expiry is the database's clock plus ``ttl`` seconds, the clock redemption reads.
    """
    expires_at: datetime = await connection.fetchval(
        """
        INSERT INTO connection_tokens (token_key, user_id, desktop_id, pool_id, protocol,
                                       shadow_of, sealed_target, expires_at, logon_id)
        VALUES ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8), $9)
        RETURNING expires_at
        """,
        key,
        user_id,
        desktop_id,
        pool_id,
        protocol,
        shadow_of,
        sealed_target,
        float(ttl),
        logon_id,
    )
    return expires_at


async def redeem_token(
    connection: asyncpg.Connection, key: bytes
) -> tuple[IssuedToken, bytes] | None:
    """Mark the token redeemed, once: its record and sealed target, or ``None``.

    ``None`` when no unexpired, unredeemed token has that key; two concurrent redemptions
    cannot both succeed (the ``UPDATE`` takes the row's lock and re-checks).
    """
    row = await connection.fetchrow(
        """
        UPDATE connection_tokens SET redeemed_at = now()
         WHERE token_key = $1 AND redeemed_at IS NULL AND expires_at > now()
        RETURNING *
        """,
        key,
    )
    if row is None:
        return None
    return _issued(row), bytes(row["sealed_target"])


async def get_token(db: Db, key: bytes) -> IssuedToken | None:
    """The token with that key (redeemed or not), or ``None``."""
    query = "SELECT * FROM connection_tokens WHERE token_key = $1"
    return await fetch_record(db, _issued, query, key)


async def prune_tokens(connection: asyncpg.Connection, before: datetime) -> int:
    """Delete tokens that expired before ``before``; return how many."""
    result = await connection.execute("DELETE FROM connection_tokens WHERE expires_at < $1", before)
    return int(result.split()[-1])
