"""Live events across two real api processes (issue 14, item 6).

Two ``deskpool run api`` processes on one database and one Redis: a change made through
api-a reaches a reader of ``GET /api/v1/events`` on api-b; a reader that reconnects with
``Last-Event-ID`` (to api-b, or to api-a: positions are the shared stream's) gets what it
missed, in order. The in-process test (``tests/integration/live``) checks the same with two
applications in one process; this one has nothing shared but PostgreSQL and Redis.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from tests.integration.live.test_event_stream import read_events
from tests.support.e2e import (
    DeploymentEnviron,
)

from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.processes import DeskpoolProcess, listening, running

ADMIN = "live-admin"
pytestmark = pytest.mark.slow


@pytest.fixture
async def apis(quick_deployment: DeploymentEnviron) -> AsyncIterator[dict[str, DeskpoolProcess]]:
    """api-a and api-b: two processes, each on a port of its own."""
    environ = quick_deployment(ADMIN, METRICS_ADDR="")
    started = {name: listening(["api"], environ, "API_ADDR") for name in ("api-a", "api-b")}
    async with running(started) as processes:
        yield processes


def order(event_id: str) -> tuple[int, ...]:
    """A stream entry id (``<ms>-<seq>``) as something that sorts as the stream does."""
    return tuple(int(part) for part in event_id.split("-"))


def url(process: DeskpoolProcess, path: str) -> str:
    return f"{process.url('api')}/api/v1{path}"


async def test_a_change_through_one_api_process_streams_from_the_other_and_resumes(
    apis: dict[str, DeskpoolProcess], identity_provider: TestIdentityProvider
) -> None:
    a, b = apis["api-a"], apis["api-b"]
    admin = {"Authorization": f"Bearer {identity_provider.issue_token(ADMIN)}"}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=30)
    async with aiohttp.ClientSession(timeout=timeout) as http:

        async def create_group(key: str) -> dict[str, Any]:
            async with http.post(
                url(a, "/groups"), json={"key": key, "name": key}, headers=admin
            ) as response:
                assert response.status == 201, await response.text()
                return dict(await response.json())

        stream = await http.get(url(b, "/events"), headers=admin)
        assert stream.status == 200, await stream.text()
        assert stream.headers["Content-Type"] == "text/event-stream"
        group = await create_group("live-ops")
        [event] = await read_events(stream, 1)
        assert (event["event"], event["data"]["id"]) == ("group.changed", group["id"])
        position = event["id"]
        stream.close()

        # Two changes through api-a while no one reads: the reconnect to api-b gets both.
        missed = [await create_group(key) for key in ("live-dev", "live-qa")]
        resumed = await http.get(url(b, "/events"), headers={**admin, "Last-Event-ID": position})
        assert resumed.status == 200
        events = await read_events(resumed, 2)
        assert [e["data"]["id"] for e in events] == [g["id"] for g in missed]
        assert order(position) < order(events[0]["id"]) < order(events[1]["id"])
        resumed.close()

        # The position is the shared stream's: a reconnect to the other process resumes too.
        elsewhere = await http.get(url(a, "/events"), headers={**admin, "Last-Event-ID": position})
        again = await read_events(elsewhere, 2)
        assert [e["id"] for e in again] == [e["id"] for e in events]
        elsewhere.close()
