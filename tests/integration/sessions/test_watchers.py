"""A watched user is told: ``GET /api/v1/me/watchers`` and the ``session.watched`` event.

Written from issue 37's guard-rails: while an administrator's read-only view of a user's
session is open, the user's ``/me/watchers`` names him, and the user's own event stream gets
``session.watched`` when the view begins and when it ends (then the list is empty).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tests.integration.live.test_event_stream import read_events
from tests.support.sessions import Estate, connected_through

from deskpool.sessions.broker import PlatformSessionBroker
from deskpool.sessions.tunnel import SessionEndReason, TunnelCounters

MakeEstate = Callable[..., Awaitable[Estate]]


async def test_a_user_is_told_while_an_administrator_watches_him(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker
) -> None:
    place = await estate()
    _opened, grant = await connected_through(client, broker, place, "gw-w")
    await broker.session_connected(grant.session_id, connection_id="$0f5e-watched")

    async def watchers() -> list[dict[str, Any]]:
        response = await client.get("/api/v1/me/watchers", headers=place.user.headers)
        assert response.status == 200
        return list((await response.json())["items"])

    assert await watchers() == []
    stream = await client.get("/api/v1/events", headers=place.user.headers)
    assert stream.status == 200
    shadow = await client.post(
        f"/api/v1/sessions/{grant.session_id}/shadow", headers=place.admin.headers
    )
    assert shadow.status == 200, await shadow.text()
    viewer = await broker.redeem((await shadow.json())["connection"]["token"], gateway_id="gw-v")

    [began] = await read_events(stream, 1)
    assert (began["data"]["type"], began["data"]["id"]) == (
        "session.watched",
        str(grant.session_id),
    )
    [watcher] = await watchers()
    assert watcher["session_id"] == str(viewer.session_id)
    assert watcher["watched_session_id"] == str(grant.session_id)
    assert watcher["watcher_name"] == viewer.user_display_name
    # The watcher's own list is his: nobody watches him.
    mine = await client.get("/api/v1/me/watchers", headers=place.admin.headers)
    assert (await mine.json())["items"] == []

    await broker.session_ended(viewer.session_id, SessionEndReason.CLIENT_CLOSED, TunnelCounters())
    [ended] = await read_events(stream, 1)
    assert ended["data"]["type"] == "session.watched", ended
    assert await watchers() == []
    stream.close()
