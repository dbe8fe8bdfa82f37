"""The lease clock: a gateway's lease does not run out while nobody could reach the database.

A gateway renews its lease with every heartbeat; when its lease runs out, its sessions end as
``gateway_lost`` (:func:`deskpool.sessions.lost_gateways.end_lost_gateways`). But when the database
is away (stopped, unreachable) for longer than a lease, *every* heartbeat fails: the lease
clock ran on while the gateway could not be heard, and a gateway still relaying its users'
tunnels would be judged lost the moment the database returns.

So every process that holds a lease or judges them (each gateway's heartbeat, the worker's
session check) touches one marker, ``lease_clock.touched_at``, whenever it reaches the
database to judge the leases, in the same transaction. When the checker finds the marker older
than a lease, nobody could reach the database for that long: each lease that ran out during
that silence restarts (a full lease from now, ``gateway_leases.restarted_at`` set) instead of
ending its gateway's sessions. The gateway that is alive renews it with its next heartbeat.

Steady state: while the database is up, heartbeats and the session check touch the marker
every few seconds, far more often than a lease, so nothing restarts and a gateway that died
is judged lost when its lease runs out. A lease restarts at most once without a heartbeat in
between (``restarted_at`` later than ``heartbeat_at`` is not restarted again), so a gateway
that died during the outage, or while nobody judged (every process stopped), is judged lost
at most one lease after the return: within about two leases.
"""

from __future__ import annotations

import logging
from datetime import datetime

import asyncpg

log = logging.getLogger(__name__)


async def touch(connection: asyncpg.Connection) -> datetime:
    """Lock the marker, set it to now, and return when it was touched before.

    Call inside the transaction that judges the leases: two checkers take turns, and the
    second sees the first one's touch (no silence) rather than restarting twice.
    """
    before: datetime | None = await connection.fetchval(
        "SELECT touched_at FROM lease_clock FOR UPDATE"
    )
    if before is None:
        # The row is made by the migration; one deleted by hand is made again.
        await connection.execute(
            "INSERT INTO lease_clock (touched_at) VALUES (now()) ON CONFLICT DO NOTHING"
        )
        made: datetime = await connection.fetchval("SELECT now()")
        return made
    await connection.execute("UPDATE lease_clock SET touched_at = now()")
    return before


async def restart_silenced_leases(connection: asyncpg.Connection) -> list[str]:
    """Restart the leases that ran out while nobody reached the database; return whose.

    Touches the marker (:func:`touch`). A lease restarts when it ran out after the marker's
    previous touch, the silence since that touch is longer than the lease itself, and it was
    not restarted already since its gateway's last heartbeat. It runs a full lease from now.
    """
    silent_since = await touch(connection)
    rows = await connection.fetch(
        """
        WITH leases AS (
            SELECT gateway_id,
                   lease_expires_at
                   - greatest(heartbeat_at, coalesce(restarted_at, heartbeat_at)) AS length
              FROM gateway_leases
             WHERE lease_expires_at < now()
               AND lease_expires_at > $1
               AND (restarted_at IS NULL OR restarted_at < heartbeat_at)
             FOR UPDATE SKIP LOCKED
        )
        UPDATE gateway_leases AS g
           SET lease_expires_at = now() + leases.length, restarted_at = now()
          FROM leases
         WHERE g.gateway_id = leases.gateway_id
           AND now() - $1 > leases.length
        RETURNING g.gateway_id
        """,
        silent_since,
    )
    restarted = [row["gateway_id"] for row in rows]
    if restarted:
        log.warning(
            "nobody reached the database for longer than a lease (since %s): the lease(s) of "
            "gateway(s) %s restart rather than end their sessions",
            silent_since.isoformat(timespec="seconds"),
            ", ".join(restarted),
        )
    return restarted
