"""The SQL of revocation: whose access a change may take away, and what they hold.

Functions run on the caller's connection, inside the transaction of the change; no business
rule here (:mod:`deskpool.revocation.model` decides).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass

import asyncpg

from deskpool.db.rows import Db, one_of_ids
from deskpool.identity.store_roles import (
    ROLES_JSON_SQL,
    grants_json_sql,
    grants_of_json,
    roles_of_json,
)
from deskpool.permissions import Grant, Role
from deskpool.sessions.model import SessionRecord
from deskpool.sessions.store import session_from_row


async def lock_users(
    connection: asyncpg.Connection, user_ids: Collection[uuid.UUID], *, exclusive: bool
) -> None:
    """Lock the users' rows, ``FOR UPDATE`` when ``exclusive``, else ``FOR SHARE``.

    A revocation locks exclusively, a token's redemption shares: whichever comes second sees
    what the first committed (a session started meanwhile, or the access taken away).
    """
    lock = "FOR UPDATE" if exclusive else "FOR SHARE"
    await connection.execute(
        f"SELECT 1 FROM users WHERE id = ANY($1::uuid[]) ORDER BY id {lock}", list(user_ids)
    )


@dataclass(frozen=True, slots=True)
class AccessRead:
    """What one user's access is made of, read in one statement (:func:`read_access`)."""

    disabled: bool
    claimed_roles: tuple[str, ...]
    user_grants: list[Grant]
    group_grants: list[Grant]
    #: Every defined role: the built-in ones and the custom ones.
    roles: dict[str, Role]
    entitled_pools: frozenset[uuid.UUID]


#: Each user of ``$1``: their groups' ids (by membership, or bound to a group claim of their
#: last sign-in), their and their groups' grants and the pools they are entitled to; every
#: custom role once, on the first row (an uncorrelated subquery: computed once).
_ACCESS = f"""
WITH u AS (
    SELECT id, disabled, claimed_groups, claimed_roles FROM users WHERE {{users}}
)
SELECT u.id, u.disabled, u.claimed_roles,
{grants_json_sql("= ANY(ug.group_ids)")} AS grants,
       ARRAY(SELECT DISTINCT e.pool_id FROM pool_entitlements e
              WHERE (e.subject_type = 'user' AND e.subject_id = u.id)
                 OR (e.subject_type = 'group' AND e.subject_id = ANY(ug.group_ids)))
           AS pools,
       CASE WHEN row_number() OVER () = 1 THEN {ROLES_JSON_SQL} END AS roles
  FROM u
 CROSS JOIN LATERAL (
     SELECT ARRAY(SELECT m.group_id FROM group_members m WHERE m.user_id = u.id
                  UNION
                  SELECT b.group_id FROM oidc_group_bindings b
                   WHERE b.claim_value = ANY(u.claimed_groups)) AS group_ids
 ) ug
"""


async def read_access(
    connection: asyncpg.Connection, user_ids: Collection[uuid.UUID]
) -> dict[uuid.UUID, AccessRead]:
    """What each user's access is made of, in one statement; a user that is gone is left out.

    It takes no lock: lock the users' rows in an earlier statement of the transaction
    (:func:`lock_users`, or the redemption's own), so that this statement's snapshot, taken
    after any wait for those locks, sees what a revocation committed. The access watch reads
    every user with a stream this way, every two seconds (it was four statements a user).
    """
    users, ids = one_of_ids("id", user_ids)
    rows = await connection.fetch(_ACCESS.replace("{users}", users), ids)
    if not rows:
        return {}
    roles = next(roles_of_json(row["roles"]) for row in rows if row["roles"] is not None)
    read = {}
    for row in rows:
        user_grants, group_grants = grants_of_json(row["grants"])
        read[row["id"]] = AccessRead(
            row["disabled"],
            tuple(row["claimed_roles"]),
            user_grants,
            group_grants,
            roles,
            frozenset(row["pools"]),
        )
    return read


async def users_of_group(db: Db, group_id: uuid.UUID) -> list[uuid.UUID]:
    """The group's members and the users whose last claims are bound to it."""
    rows = await db.fetch(
        """
        SELECT user_id AS id FROM group_members WHERE group_id = $1
        UNION
        SELECT u.id FROM users AS u
         WHERE u.claimed_groups && ARRAY(SELECT claim_value FROM oidc_group_bindings
                                          WHERE group_id = $1)
        """,
        group_id,
    )
    return [row["id"] for row in rows]


async def users_with_claim(db: Db, claim_value: str) -> list[uuid.UUID]:
    """The users whose last sign-in carried the group claim ``claim_value``."""
    rows = await db.fetch("SELECT id FROM users WHERE $1 = ANY(claimed_groups)", claim_value)
    return [row["id"] for row in rows]


async def users_holding_desktops(db: Db) -> list[uuid.UUID]:
    """Every user with an open session, a desktop in use or a pending start on connect."""
    rows = await db.fetch(
        """
        SELECT user_id AS id FROM desktop_sessions WHERE ended_at IS NULL
        UNION
        SELECT assigned_user FROM desktops WHERE state = 'in_use' AND assigned_user IS NOT NULL
        UNION
        SELECT user_id FROM desktop_starts WHERE powered_on_at IS NULL
        """
    )
    return [row["id"] for row in rows]


async def open_sessions_of(db: Db, user_ids: Collection[uuid.UUID]) -> list[SessionRecord]:
    """The open sessions (tunnels and read-only views) of the users."""
    rows = await db.fetch(
        "SELECT * FROM desktop_sessions WHERE ended_at IS NULL AND user_id = ANY($1::uuid[])",
        list(user_ids),
    )
    return [session_from_row(row) for row in rows]


@dataclass(frozen=True, slots=True)
class HeldDesktop:
    """A desktop a user is logged on to (``in_use``)."""

    desktop_id: uuid.UUID
    pool_id: uuid.UUID
    user_id: uuid.UUID


async def desktops_in_use_by(db: Db, user_ids: Collection[uuid.UUID]) -> list[HeldDesktop]:
    """The desktops the users are logged on to."""
    rows = await db.fetch(
        """
        SELECT id, pool_id, assigned_user FROM desktops
         WHERE state = 'in_use' AND assigned_user = ANY($1::uuid[])
        """,
        list(user_ids),
    )
    return [HeldDesktop(row["id"], row["pool_id"], row["assigned_user"]) for row in rows]
