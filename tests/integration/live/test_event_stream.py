"""``GET /api/v1/events``: live events through Redis, across two api applications.

Each application has its own runtime (database pool, Redis client, stream reader), as two api
processes would: what one publishes, the other streams; a client that reconnects with
``Last-Event-ID`` gets what it missed; each caller sees only what it may read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from deskpool.live import bus
from deskpool.live.model import LiveEvent
from deskpool.testing.pytest_plugin import served

ADMIN = "events-admin"
CONSOLE = "http://console.example.org"


@pytest.fixture
async def two_apis(
    secure_environ: dict[str, str], aiohttp_client: Any
) -> AsyncIterator[tuple[Any, Any, Any]]:
    """Two API clients on two runtimes sharing the database and Redis; the first runtime.

    Each client (whose server ends its streams) is closed before its runtime.
    """
    environ = {
        **secure_environ,
        "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": ADMIN,
        "API_CORS_ALLOWED_ORIGINS": CONSOLE,
    }
    async with (
        served(environ, aiohttp_client) as (first, one),
        served(environ, aiohttp_client) as (_, two),
    ):
        yield one, two, first


async def read_events(response: Any, count: int) -> list[dict[str, Any]]:
    """The next ``count`` events of an open stream (comments skipped), within 10 seconds."""
    events: list[dict[str, Any]] = []

    async def read() -> None:
        while len(events) < count:
            block = (await response.content.readuntil(b"\n\n")).decode()
            fields: dict[str, str] = {}
            for line in block.splitlines():
                if line.startswith(":") or not line:
                    continue
                name, _, value = line.partition(": ")
                fields[name] = value
            if "data" in fields:
                events.append({**fields, "data": json.loads(fields["data"])})

    await asyncio.wait_for(read(), 10.0)
    return events


async def test_a_change_through_one_api_streams_from_the_other_and_resumes(
    two_apis: tuple[Any, Any, Any], bearer: Callable[..., dict[str, str]]
) -> None:
    writer, reader, _ = two_apis
    admin = bearer(ADMIN, email="events-admin@example.com")
    stream = await reader.get("/api/v1/events", headers={**admin, "Origin": CONSOLE})
    assert stream.status == 200
    assert stream.headers["Content-Type"] == "text/event-stream"
    assert stream.headers["Access-Control-Allow-Origin"] == CONSOLE  # a console may read it
    created = await writer.post(
        "/api/v1/groups", json={"key": "ops", "name": "Operators"}, headers=admin
    )
    assert created.status == 201
    group = await created.json()
    [event] = await read_events(stream, 1)
    assert event["event"] == "group.changed"
    assert event["data"]["id"] == group["id"]
    assert event["data"]["type"] == "group.changed"
    first_id = event["id"]
    stream.close()

    # Two changes while disconnected: the reconnect with Last-Event-ID gets both, in order.
    for key in ("dev", "qa"):
        response = await writer.post(
            "/api/v1/groups", json={"key": key, "name": key}, headers=admin
        )
        assert response.status == 201
    resumed = await reader.get("/api/v1/events", headers={**admin, "Last-Event-ID": first_id})
    missed = await read_events(resumed, 2)
    assert [e["event"] for e in missed] == ["group.changed", "group.changed"]
    assert missed[0]["id"] > first_id
    assert missed[1]["id"] > missed[0]["id"]
    resumed.close()


async def test_a_caller_sees_only_what_it_may_read(
    two_apis: tuple[Any, Any, Any], bearer: Callable[..., dict[str, str]]
) -> None:
    _, reader, runtime = two_apis
    user = bearer("desk-user", email="desk-user@example.com")
    me = await (await reader.get("/api/v1/me", headers=user)).json()
    stream = await reader.get("/api/v1/events", headers=user)
    assert stream.status == 200
    prefix = runtime.config["KVSTORE_KEY_PREFIX"]
    await bus.publish(runtime.kv, prefix, LiveEvent("pool.changed", "p-1"))
    await bus.publish(runtime.kv, prefix, LiveEvent("desktop.state", "d-other", owner="someone"))
    await bus.publish(
        runtime.kv, prefix, LiveEvent("desktop.state", "d-mine", {"state": "ready"}, owner=me["id"])
    )
    [event] = await read_events(stream, 1)
    assert event["data"] == {"type": "desktop.state", "id": "d-mine", "state": "ready"}
    stream.close()


async def test_a_stale_position_starts_with_a_reset_and_a_bad_one_is_refused(
    two_apis: tuple[Any, Any, Any], bearer: Callable[..., dict[str, str]]
) -> None:
    _, reader, runtime = two_apis
    admin = bearer(ADMIN)
    await bus.publish(
        runtime.kv, runtime.config["KVSTORE_KEY_PREFIX"], LiveEvent("pool.changed", "p")
    )
    stale = await reader.get("/api/v1/events", headers={**admin, "Last-Event-ID": "1-0"})
    [event] = await read_events(stale, 1)
    assert event["event"] == "reset"
    stale.close()
    bad = await reader.get("/api/v1/events", headers={**admin, "Last-Event-ID": "nope"})
    assert bad.status == 400
    assert (await reader.get("/api/v1/events")).status == 401


async def test_events_published_together_are_the_entries_published_one_by_one(
    runtime: Any,
) -> None:
    prefix = runtime.config["KVSTORE_KEY_PREFIX"]
    events = [
        LiveEvent("job.succeeded", str(n), {"n": n}, owner="u1" if n % 2 else None)
        for n in range(3)
    ]
    try:
        assert await bus.publish_many(runtime.kv, f"{prefix}many:", events) == 3
        assert await bus.publish_many(runtime.kv, f"{prefix}many:", []) == 0
        for event in events:
            await bus.publish(runtime.kv, f"{prefix}one:", event)
        together = await bus.read_after(runtime.kv, f"{prefix}many:", "0-0")
        one_by_one = await bus.read_after(runtime.kv, f"{prefix}one:", "0-0")
        assert [event for _, event in together] == [event for _, event in one_by_one] == events
    finally:
        await runtime.kv.delete(bus.stream_key(f"{prefix}many:"), bus.stream_key(f"{prefix}one:"))


async def test_events_published_at_once_share_a_command_and_each_caller_gets_its_entry(
    runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of changes publishes in a few commands, not one each (issue 39).

    At 9 a.m. every opening and every redemption publishes its event: one ``XADD`` each was
    4 % of the api's and 6 % of the gateway's time in the storm (py-spy ``--gil``). Events
    published while a write is on its way go together in the next, and each caller still
    returns once its event is in the stream, with its own entry's id, in the order published.
    """
    prefix = f"{runtime.config['KVSTORE_KEY_PREFIX']}gathered:"
    events = [LiveEvent("desktop.state", str(n), {"n": n}) for n in range(20)]
    commands: list[str] = []
    real = runtime.kv.execute_command

    async def counting(*args: Any, **options: Any) -> Any:
        commands.append(str(args[0]))
        return await real(*args, **options)

    monkeypatch.setattr(runtime.kv, "execute_command", counting)
    try:
        ids = await asyncio.gather(*(bus.publish(runtime.kv, prefix, event) for event in events))
        assert len(commands) <= 3, commands
        entries = await bus.read_after(runtime.kv, prefix, "0-0")
        assert [entry_id for entry_id, _ in entries] == ids
        assert [event for _, event in entries] == events
        # Alone, an event is published at once, by itself.
        commands.clear()
        alone = await bus.publish(runtime.kv, prefix, events[0])
        assert commands == ["XADD"]
        last = ids[-1]
        assert last is not None
        assert alone == (await bus.read_after(runtime.kv, prefix, last))[0][0]
    finally:
        await runtime.kv.delete(bus.stream_key(prefix))


async def test_a_publisher_whose_batch_fails_unexpectedly_gets_the_error(
    runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault that is not Redis's reaches the publishers, as when each wrote alone."""
    prefix = f"{runtime.config['KVSTORE_KEY_PREFIX']}faulty:"

    async def broken(*args: Any, **options: Any) -> Any:
        raise ValueError("a bug")

    monkeypatch.setattr(runtime.kv, "execute_command", broken)
    outcomes = await asyncio.gather(
        *(bus.publish(runtime.kv, prefix, LiveEvent("job.failed", str(n), {})) for n in range(3)),
        return_exceptions=True,
    )
    assert [type(outcome) for outcome in outcomes] == [ValueError] * 3
    monkeypatch.undo()
    assert await bus.publish(runtime.kv, prefix, LiveEvent("job.failed", "after", {}))
    await runtime.kv.delete(bus.stream_key(prefix))
