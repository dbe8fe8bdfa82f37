"""The SQL of connection tokens: issued by the API, redeemed once by a gateway, pruned.

A token is stored by its key with its sealed target (``connection_tokens``); redemption marks it
used in one ``UPDATE``, so two gateways cannot both redeem it. The service issues tokens
(:mod:`deskpool.sessions.service`), the broker redeems them (:mod:`deskpool.sessions.broker`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.db.rows import Db, fetch_record, record_from_row
from deskpool.sessions.model import IssuedToken, UserNames


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


@dataclass(frozen=True, slots=True)
class RedeemedToken:
    """A token :func:`redeem_token` marked used, with its sealed target and its user's names."""

    issued: IssuedToken
    sealed_target: bytes
    names: UserNames


#: The token marked used, its user's row shared-locked in the same statement, and the user's
#: names read from it. The lock is what a revocation's ``FOR UPDATE`` meets: a redemption that
#: waits for it here reads the user's access in its next statement, whose snapshot sees what
#: the revocation committed (reads in this statement would see the database as it was before
#: the wait).
_REDEEM = """
WITH redeemed AS (
    UPDATE connection_tokens SET redeemed_at = now()
     WHERE token_key = $1 AND redeemed_at IS NULL AND expires_at > now()
    RETURNING *
),
locked AS (
    SELECT u.id, coalesce(u.display_name, u.email, u.subject) AS display, u.email
      FROM users u JOIN redeemed r ON u.id = r.user_id
       FOR SHARE OF u
)
SELECT r.*, l.display, l.email
  FROM redeemed r LEFT JOIN locked l ON l.id = r.user_id
"""


async def redeem_token(connection: asyncpg.Connection, key: bytes) -> RedeemedToken | None:
    """Mark the token redeemed, once, and share-lock its user's row; ``None``: nothing to redeem.

    ``None`` when no unexpired, unredeemed token has that key; two concurrent redemptions
    cannot both succeed (the ``UPDATE`` takes the row's lock and re-checks). Call it in the
    transaction that judges the user's access next (see ``_REDEEM``).
    """
    row = await connection.fetchrow(_REDEEM, key)
    if row is None:
        return None
    issued = _issued(row)
    names = UserNames(str(row["display"] or issued.user_id), str(row["email"] or ""))
    return RedeemedToken(issued, bytes(row["sealed_target"]), names)


async def get_token(db: Db, key: bytes) -> IssuedToken | None:
    """The token with that key (redeemed or not), or ``None``."""
    query = "SELECT * FROM connection_tokens WHERE token_key = $1"
    return await fetch_record(db, _issued, query, key)


async def prune_tokens(connection: asyncpg.Connection, before: datetime) -> int:
    """Delete tokens that expired before ``before``; return how many."""
    result = await connection.execute("DELETE FROM connection_tokens WHERE expires_at < $1", before)
    return int(result.split()[-1])
