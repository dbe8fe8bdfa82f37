"""Disruptive actions on a user's desktop or session, announced to him first.

An administrator's power off, restart, rebuild or delete of a desktop, his disconnect of a
session and his log-off of a user may carry a message to the user who loses it: the message is
sent to him (:func:`deskpool.messages.service.send_message`: kept for him, audited
``message.send`` with what it announces, shown at once in his open desktop views) and only then
is the action asked for, so he reads it before it happens. The message goes to the user, not to
the session, so the desktop view that the action closes keeps showing it, and his next one too
while it is valid.

An action the platform refuses (the desktop cannot take it, the session has ended, the user
holds no such desktop) is refused before anything is sent: its rule is checked first, and again
by the action itself under its own lock. A desktop nobody holds has nobody to tell: the action
runs without a message.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from deskpool.desktops import service as desktops
from deskpool.errors import NotFound
from deskpool.helpdesk import service as helpdesk
from deskpool.messages.model import SendMessage, Severity, TargetKind
from deskpool.messages.service import send_message
from deskpool.sessions import service as sessions
from deskpool.sessions import store as session_store

if TYPE_CHECKING:
    from deskpool.actor import Actor
    from deskpool.jobs.model import Job
    from deskpool.runtime import Runtime
    from deskpool.sessions.model import SessionRecord


async def _announce(
    runtime: Runtime, actor: Actor, user_id: uuid.UUID, body: str, about: dict[str, str]
) -> None:
    """Send ``body`` to ``user_id`` as a warning, audited with what it announces."""
    command = SendMessage(
        target_kind=TargetKind.USER, target_id=user_id, severity=Severity.WARNING, body=body
    )
    await send_message(runtime, actor, command, about)


def _given(message: str | None) -> str | None:
    """The message to send, or ``None`` when it is left empty."""
    return message.strip() or None if message else None


async def desktop_action(
    runtime: Runtime, actor: Actor, desktop_id: uuid.UUID, action: str, message: str | None
) -> Job:
    """Tell the desktop's user ``message`` (when given), then run ``action`` on the desktop.

    :raises NotFound: no such desktop. :raises DesktopActionNotAllowed: a power action the
        desktop cannot take now. :raises IllegalTransition: the state machine refuses it.
    """
    body = _given(message)
    if body is not None:
        desktop = (await desktops.get_desktop(runtime, desktop_id)).desktop
        desktops.refuse_action(desktop, action)
        if desktop.assigned_user is not None:
            about = {"about": f"desktop.{action}", "desktop_id": str(desktop_id)}
            await _announce(runtime, actor, uuid.UUID(str(desktop.assigned_user)), body, about)
    return await desktops.run_action(runtime, actor, desktop_id, action)


async def disconnect(
    runtime: Runtime, actor: Actor, session_id: uuid.UUID, message: str | None
) -> SessionRecord:
    """Tell the session's user ``message`` (when given), then close his session.

    :raises NotFound: no such session. :raises SessionNotOpen: it has ended.
    """
    body = _given(message)
    if body is not None:
        session = await session_store.get_session(runtime.db, session_id)
        if session is None:
            raise NotFound(f"No session has the id {session_id}.")
        if not session.is_open:
            raise sessions.SessionNotOpen(f"session {session_id} has ended")
        about = {
            "about": "session.disconnect",
            "session_id": str(session_id),
            "desktop_id": str(session.desktop_id),
        }
        await _announce(runtime, actor, session.user_id, body, about)
    return await sessions.disconnect_session(runtime, session_id, actor.audit_event)


async def log_off(
    runtime: Runtime,
    actor: Actor,
    user_id: uuid.UUID,
    desktop_id: uuid.UUID,
    message: str | None,
) -> None:
    """Tell the user ``message`` (when given), then log him off his desktop.

    :raises NotFound: he holds no such desktop.
    """
    body = _given(message)
    if body is not None:
        desktop = (await desktops.get_desktop(runtime, desktop_id)).desktop
        if str(desktop.assigned_user) != str(user_id):
            raise NotFound(f"The user holds no desktop with the id {desktop_id}.")
        about = {"about": "desktop.forced_logoff", "desktop_id": str(desktop_id)}
        await _announce(runtime, actor, user_id, body, about)
    await helpdesk.log_off(runtime, actor, user_id, desktop_id)
