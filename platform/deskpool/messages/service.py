"""Send a message to desktop users, list what was sent, show a user his, let him dismiss one.

Sending validates the command, keeps the message and audits it in one transaction; the live
``message.sent`` events to the users who have a session open to the target go out after the
commit. A user who connects later while it is valid reads it with :func:`messages_for`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from deskpool.actor import Actor
from deskpool.audit import record_audit_event
from deskpool.errors import NotFound
from deskpool.live.publishers import publish_many
from deskpool.messages import store
from deskpool.messages.model import Message, SendMessage, TargetKind, checked, message_event

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

#: The audit trail's resource type of a message's target.
_RESOURCE_TYPE = {
    TargetKind.SESSION: "sessions",
    TargetKind.USER: "users",
    TargetKind.POOL: "pools",
}

_NAMED = {TargetKind.SESSION: "open session", TargetKind.USER: "user", TargetKind.POOL: "pool"}


async def send_message(
    runtime: Runtime, actor: Actor, command: SendMessage, about: Mapping[str, str] | None = None
) -> Message:
    """Keep and audit the message, then show it in its recipients' open desktop views.

    ``about``: what the message announces (an administrator's action on the user's desktop or
    session: ``{"about": "desktop.power_off", "desktop_id": ...}``), added to the audit event.

    :raises ValidationFailed: its body or validity. :raises NotFound: no such pool or user, or
        no such open session.
    """
    command = checked(command)
    async with runtime.db.acquire() as connection, connection.transaction():
        if not await store.target_exists(connection, command.target_kind, command.target_id):
            raise NotFound(f"No {_NAMED[command.target_kind]} has the id {command.target_id}.")
        message = await store.insert_message(connection, command, actor.name)
        recipients = await store.recipients(connection, command.target_kind, command.target_id)
        await record_audit_event(
            connection,
            actor.audit_event(
                "message.send",
                _RESOURCE_TYPE[command.target_kind],
                str(command.target_id),
                {
                    "message_id": str(message.id),
                    "severity": str(message.severity),
                    "valid_until": message.valid_until.isoformat(),
                    "recipients": len(recipients),
                    **(about or {}),
                },
            ),
        )
    await publish_many(runtime, [message_event(message, user) for user in recipients])
    return message


async def list_messages(
    runtime: Runtime,
    *,
    target_kind: TargetKind | None,
    target_id: uuid.UUID | None,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int,
) -> list[Message]:
    """Messages sent, newest first (of one target when given)."""
    return await store.list_messages(
        runtime.db, target_kind=target_kind, target_id=target_id, after=after, limit=limit
    )


async def messages_for(runtime: Runtime, user_id: str | uuid.UUID) -> list[Message]:
    """The valid messages of ``user_id`` he has not dismissed (his, his sessions', his pools')."""
    return await store.messages_for_user(runtime.db, uuid.UUID(str(user_id)))


async def dismiss(runtime: Runtime, user_id: str | uuid.UUID, message_id: uuid.UUID) -> None:
    """The user has read the message: it is not shown to him again.

    :raises NotFound: the message is not one of his (a message he may not see is not told apart
        from one that does not exist).
    """
    user = uuid.UUID(str(user_id))
    async with runtime.db.acquire() as connection, connection.transaction():
        mine = await store.messages_for_user(connection, user)
        if message_id not in {message.id for message in mine}:
            raise NotFound(f"No message of yours has the id {message_id}.")
        await store.dismiss(connection, message_id, user)
