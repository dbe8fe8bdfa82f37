"""An administrator's disruptive action carries a message to the user, sent before it is done.

Written from issue 37's guard-rails: a disconnect, a log-off or a desktop action with a
``message`` sends it to the user who loses his session or desktop (he reads it in his desktop
view, audited ``message.send`` with what it announces), and an action the platform refuses
sends nothing (its rule is checked before the message goes out).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.sessions import Estate, NewCaller, connected_through

from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker

MakeEstate = Callable[..., Awaitable[Estate]]


async def _messages(client: Any, estate: Estate) -> list[str]:
    response = await client.get("/api/v1/me/messages", headers=estate.user.headers)
    assert response.status == 200
    return [m["body"] for m in (await response.json())["items"]]


async def _announcements(runtime: Runtime, user_id: str) -> list[dict[str, Any]]:
    async with runtime.db.acquire() as connection:
        rows = await connection.fetch(
            "SELECT details FROM audit_events WHERE action = 'message.send' "
            "AND resource_id = $1 ORDER BY occurred_at",
            user_id,
        )
    return [dict(json.loads(row["details"])) for row in rows]


async def test_a_disconnect_and_a_log_off_tell_the_user_first(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker, pools_runtime: Runtime
) -> None:
    place = await estate(ready=1)
    opened, grant = await connected_through(client, broker, place, "gw-announced")
    # Without a body, as before: a plain disconnect.
    plain = await client.post(
        f"/api/v1/sessions/{grant.session_id}/disconnect", headers=place.admin.headers
    )
    assert plain.status == 202, await plain.json()
    assert await _messages(client, place) == []

    told = await client.post(
        f"/api/v1/sessions/{grant.session_id}/disconnect",
        json={"message": "  Disconnecting you for maintenance.  "},
        headers=place.admin.headers,
    )
    assert told.status == 202, await told.json()
    assert await _messages(client, place) == ["Disconnecting you for maintenance."]
    [sent] = await _announcements(pools_runtime, place.user.id)
    assert sent["about"] == "session.disconnect", sent
    assert sent["session_id"] == str(grant.session_id), sent

    logged_off = await client.post(
        f"/api/v1/helpdesk/users/{place.user.id}/desktops/{opened['id']}/logoff",
        json={"message": "Logging you off."},
        headers=place.admin.headers,
    )
    assert logged_off.status == 202, await logged_off.json()
    assert (await _announcements(pools_runtime, place.user.id))[-1]["about"] == (
        "desktop.forced_logoff"
    )


async def test_a_refused_action_sends_no_message(
    client: Any,
    estate: MakeEstate,
    broker: PlatformSessionBroker,
    pools_runtime: Runtime,
    new_caller: NewCaller,
) -> None:
    place = await estate(ready=1)
    opened, _grant = await connected_through(client, broker, place, "gw-refused")
    admin = await new_caller("desktops:manage", "sessions:manage")
    # A desktop in use cannot be rebuilt: refused, and he is told nothing.
    rebuilt = await client.post(
        f"/api/v1/desktops/{opened['id']}/actions",
        json={"action": "rebuild", "message": "Rebuilding your desktop."},
        headers=admin.headers,
    )
    assert rebuilt.status == 409, await rebuilt.json()
    not_his = await client.post(
        f"/api/v1/helpdesk/users/{uuid.uuid4()}/desktops/{opened['id']}/logoff",
        json={"message": "Logging you off."},
        headers=place.admin.headers,
    )
    assert not_his.status == 404
    too_long = await client.post(
        f"/api/v1/desktops/{opened['id']}/actions",
        json={"action": "restart", "message": "x" * 2001},
        headers=admin.headers,
    )
    assert too_long.status == 422
    assert [e["pointer"] for e in (await too_long.json())["errors"]] == ["/message"]
    assert await _messages(client, place) == []
    assert await _announcements(pools_runtime, place.user.id) == []

    restarted = await client.post(
        f"/api/v1/desktops/{opened['id']}/actions",
        json={"action": "restart", "message": "Restarting your desktop."},
        headers=admin.headers,
    )
    assert restarted.status == 202, await restarted.json()
    assert await _messages(client, place) == ["Restarting your desktop."]
    [sent] = await _announcements(pools_runtime, place.user.id)
    assert (sent["about"], sent["desktop_id"]) == ("desktop.restart", opened["id"])
