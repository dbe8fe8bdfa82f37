"""SQL of messages to desktop users: kept, listed, the recipients, dismissals."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.db.rows import Db
from deskpool.messages.model import Message, SendMessage, Severity, TargetKind

#: A message with its sender's name (a user's display name or email, when the sender is one).
_SELECT = """
    SELECT m.*, coalesce(u.display_name, u.email) AS sender_name
      FROM user_messages m
      LEFT JOIN users u ON u.id::text = m.sender
"""


def _message(row: Mapping[str, Any]) -> Message:
    return Message(
        id=row["id"],
        target_kind=TargetKind(row["target_kind"]),
        target_id=row["target_id"],
        severity=Severity(row["severity"]),
        body=row["body"],
        sender=row["sender"],
        sender_name=row["sender_name"],
        created_at=row["created_at"],
        valid_until=row["valid_until"],
    )


async def insert_message(
    connection: asyncpg.Connection, command: SendMessage, sender: str
) -> Message:
    """Keep the message; it is valid from now for ``command.valid_for``."""
    row = await connection.fetchrow(
        f"""
        WITH m AS (
            INSERT INTO user_messages (id, target_kind, target_id, severity, body, sender,
                                       valid_until)
            VALUES ($1, $2, $3, $4, $5, $6, now() + $7::interval)
            RETURNING *
        )
        {_SELECT.replace("FROM user_messages m", "FROM m")}
        """,
        uuid.uuid4(),
        str(command.target_kind),
        command.target_id,
        str(command.severity),
        command.body,
        sender,
        command.valid_for,
    )
    assert row is not None
    return _message(row)


async def target_exists(db: Db, kind: TargetKind, target_id: uuid.UUID) -> bool:
    """Whether the session, user or pool exists (a session must be open)."""
    query = {
        TargetKind.SESSION: (
            "SELECT true FROM desktop_sessions WHERE id = $1 AND ended_at IS NULL AND NOT read_only"
        ),
        TargetKind.USER: "SELECT true FROM users WHERE id = $1",
        TargetKind.POOL: "SELECT true FROM pools WHERE id = $1",
    }[kind]
    return bool(await db.fetchval(query, target_id))


async def recipients(db: Db, kind: TargetKind, target_id: uuid.UUID) -> list[uuid.UUID]:
    """The users whose desktop views show the message now: those with a session open to it.

    A message to a user reaches him even with no session open (his next one shows it).
    """
    if kind is TargetKind.USER:
        return [target_id]
    column = "id" if kind is TargetKind.SESSION else "pool_id"
    rows = await db.fetch(
        f"""
        SELECT DISTINCT user_id FROM desktop_sessions
         WHERE {column} = $1 AND ended_at IS NULL AND NOT read_only
        """,
        target_id,
    )
    return [row["user_id"] for row in rows]


async def messages_for_user(db: Db, user_id: uuid.UUID) -> list[Message]:
    """The valid messages ``user_id`` has not dismissed, oldest first.

    His own, those of his open sessions, and those of the pools he has a session open in.
    """
    rows = await db.fetch(
        f"""
        {_SELECT}
         WHERE m.valid_until > now()
           AND NOT EXISTS (SELECT 1 FROM user_message_dismissals d
                            WHERE d.message_id = m.id AND d.user_id = $1)
           AND (
                (m.target_kind = 'user' AND m.target_id = $1)
             OR (m.target_kind = 'session' AND m.target_id IN (
                    SELECT id FROM desktop_sessions
                     WHERE user_id = $1 AND ended_at IS NULL))
             OR (m.target_kind = 'pool' AND m.target_id IN (
                    SELECT pool_id FROM desktop_sessions
                     WHERE user_id = $1 AND ended_at IS NULL AND NOT read_only))
           )
         ORDER BY m.created_at, m.id
        """,
        user_id,
    )
    return [_message(row) for row in rows]


async def dismiss(
    connection: asyncpg.Connection, message_id: uuid.UUID, user_id: uuid.UUID
) -> None:
    """Record that ``user_id`` dismissed the message (again: nothing changes)."""
    await connection.execute(
        """
        INSERT INTO user_message_dismissals (message_id, user_id) VALUES ($1, $2)
        ON CONFLICT DO NOTHING
        """,
        message_id,
        user_id,
    )


async def list_messages(
    db: Db,
    *,
    target_kind: TargetKind | None,
    target_id: uuid.UUID | None,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int,
) -> list[Message]:
    """Messages sent, newest first, of one target when given."""
    rows = await db.fetch(
        f"""
        {_SELECT}
         WHERE ($1::text IS NULL OR m.target_kind = $1)
           AND ($2::uuid IS NULL OR m.target_id = $2)
           AND ($3::timestamptz IS NULL OR (m.created_at, m.id) < ($3, $4::uuid))
         ORDER BY m.created_at DESC, m.id DESC
         LIMIT $5
        """,
        None if target_kind is None else str(target_kind),
        target_id,
        None if after is None else after[0],
        None if after is None else after[1],
        limit,
    )
    return [_message(row) for row in rows]


async def purge_expired(db: Db, before: datetime) -> int:
    """Forget messages that expired before ``before`` (with their dismissals)."""
    status = await db.execute("DELETE FROM user_messages WHERE valid_until < $1", before)
    return int(status.rsplit(" ", 1)[-1])
