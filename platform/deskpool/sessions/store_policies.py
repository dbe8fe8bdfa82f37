"""The SQL of pool session policies, and the reads the periodic session check enforces them on.

A pool's :class:`~deskpool.sessions.model.SessionPolicy` (``pool_session_policies``: the default
for a pool that never set one), and the two reads :mod:`deskpool.sessions.maintenance` applies it
to: the desktops in use with no tunnel open, and every open session with its pool's policy. No
business rules here: :mod:`deskpool.sessions.model` decides.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.client_policy.model import ClientPolicy
from deskpool.db.rows import Db
from deskpool.recordings.model import RecordingPolicy
from deskpool.sessions.model import (
    DEFAULT_POLICY,
    AfterDisconnect,
    DisplayProtocol,
    SessionPolicy,
    SessionRecord,
)
from deskpool.sessions.store import (
    session_from_row,
)


def policy_from_row(row: Mapping[str, Any] | None) -> SessionPolicy:
    """A policy from a ``pool_session_policies`` row (the default for ``None``)."""
    if row is None:
        return DEFAULT_POLICY
    return SessionPolicy(
        protocol=DisplayProtocol(row["protocol"]),
        after_disconnect=AfterDisconnect(row["after_disconnect"]),
        logoff_delay=row["logoff_delay"],
        idle_timeout=row["idle_timeout"],
        max_session_duration=row["max_session_duration"],
        recording=RecordingPolicy(
            enabled=row["recording_enabled"], include_keys=row["recording_include_keys"]
        ),
        client=ClientPolicy.from_json(_json(row.get("client_policy"))),
    )


def _json(value: Any) -> dict[str, Any] | None:
    """A ``jsonb`` column's value (asyncpg hands it over as text)."""
    return None if value is None else dict(json.loads(value) if isinstance(value, str) else value)


async def get_policy(db: Db, pool_id: uuid.UUID) -> SessionPolicy:
    """The session policy of ``pool_id`` (the default when it never set one)."""
    row = await db.fetchrow("SELECT * FROM pool_session_policies WHERE pool_id = $1", pool_id)
    return policy_from_row(row)


async def policies_of(db: Db, pool_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, SessionPolicy]:
    """The session policy of each of ``pool_ids`` (defaults included)."""
    rows = await db.fetch(
        "SELECT * FROM pool_session_policies WHERE pool_id = ANY($1::uuid[])", list(pool_ids)
    )
    found = {row["pool_id"]: policy_from_row(row) for row in rows}
    return {pool_id: found.get(pool_id, DEFAULT_POLICY) for pool_id in pool_ids}


async def put_policy(
    connection: asyncpg.Connection, pool_id: uuid.UUID, policy: SessionPolicy
) -> None:
    """Store the session policy of ``pool_id``."""
    await connection.execute(
        """
        INSERT INTO pool_session_policies AS p
               (pool_id, protocol, after_disconnect, logoff_delay, idle_timeout,
                max_session_duration, recording_enabled, recording_include_keys, client_policy)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb)
        ON CONFLICT (pool_id) DO UPDATE
           SET protocol = $2, after_disconnect = $3, logoff_delay = $4, idle_timeout = $5,
               max_session_duration = $6, recording_enabled = $7,
               recording_include_keys = $8, client_policy = $9::jsonb, updated_at = now()
        """,
        pool_id,
        str(policy.protocol),
        str(policy.after_disconnect),
        policy.logoff_delay,
        policy.idle_timeout,
        policy.max_session_duration,
        policy.recording.enabled,
        policy.recording.include_keys,
        json.dumps(policy.client.as_json()),
    )


@dataclass(frozen=True, slots=True)
class DisconnectedDesktop:
    """A desktop in use with no tunnel open, and how long it has been so."""

    desktop_id: uuid.UUID
    pool_id: uuid.UUID
    policy: SessionPolicy
    disconnected_since: datetime
    last_end_reason: str | None


async def disconnected_desktops(db: Db) -> list[DisconnectedDesktop]:
    """Desktops in use by a user who has no session open to them."""
    rows = await db.fetch(
        """
        SELECT d.id AS desktop_id, d.pool_id AS desktop_pool_id, p.protocol, p.after_disconnect,
               p.logoff_delay, p.idle_timeout, p.max_session_duration, p.recording_enabled,
               p.recording_include_keys, p.client_policy,
               greatest(d.state_changed_at, last.ended_at, tok.issued_at) AS since,
               last.end_reason
          FROM desktops AS d
          LEFT JOIN pool_session_policies AS p ON p.pool_id = d.pool_id
          LEFT JOIN LATERAL (SELECT s.ended_at, s.end_reason FROM desktop_sessions AS s
                              WHERE s.desktop_id = d.id AND NOT s.read_only
                              ORDER BY s.started_at DESC LIMIT 1) AS last ON true
          LEFT JOIN LATERAL (SELECT max(t.issued_at) AS issued_at FROM connection_tokens AS t
                              WHERE t.desktop_id = d.id AND t.shadow_of IS NULL) AS tok ON true
         WHERE d.state = 'in_use' AND NOT d.in_session
           AND NOT EXISTS (SELECT 1 FROM desktop_sessions AS o
                            WHERE o.desktop_id = d.id AND o.ended_at IS NULL AND NOT o.read_only)
        """
    )
    return [
        DisconnectedDesktop(
            desktop_id=row["desktop_id"],
            pool_id=row["desktop_pool_id"],
            policy=policy_from_row(row) if row["protocol"] is not None else DEFAULT_POLICY,
            disconnected_since=row["since"],
            last_end_reason=row["end_reason"],
        )
        for row in rows
    ]


@dataclass(frozen=True, slots=True)
class OpenSession:
    """An open session, its pool's policy and whether its desktop is still its user's."""

    session: SessionRecord
    policy: SessionPolicy
    desktop_held: bool


async def open_sessions(db: Db) -> Sequence[OpenSession]:
    """Every open session with its pool's policy and the state of its desktop."""
    rows = await db.fetch(
        """
        SELECT s.*, p.protocol AS policy_protocol, p.after_disconnect, p.logoff_delay,
               p.idle_timeout, p.max_session_duration, p.recording_enabled,
               p.recording_include_keys, p.client_policy,
               (d.state = 'in_use' AND d.assigned_user = s.user_id) IS TRUE AS held
          FROM desktop_sessions AS s
          LEFT JOIN pool_session_policies AS p ON p.pool_id = s.pool_id
          LEFT JOIN desktops AS d ON d.id = s.desktop_id
         WHERE s.ended_at IS NULL
        """
    )
    out = []
    for row in rows:
        policy = (
            DEFAULT_POLICY
            if row["after_disconnect"] is None
            else policy_from_row({**dict(row), "protocol": row["policy_protocol"]})
        )
        out.append(OpenSession(session_from_row(row), policy, row["held"] or row["read_only"]))
    return out
