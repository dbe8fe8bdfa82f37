"""The API's edges (issue 33 §8, finding 9): per-address connections, proxies, shared stream slots.

- One client address cannot hold every connection of the api's listener: past
  ``API_MAX_CONNECTIONS_PER_ADDRESS`` its new connections are refused, and another address is
  still served (seen before: the other address was refused 503 ``too_many_connections``).
- ``API_TRUSTED_PROXIES``: only those proxies' ``X-Forwarded-For`` counts, read from the right
  to the first address that is not a trusted proxy, for the rate limits and the audit; a spoofed
  ``X-Forwarded-For`` from anyone else is ignored (seen before: two clients behind one proxy
  shared one budget, the audit named the proxy).
- The per-user limit of live event streams holds across api processes sharing Redis (seen
  before: each process allowed its own 5).
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import redis.asyncio as redis

from deskpool.live.slots import SharedStreamSlots
from deskpool.testing.frozen import free_port
from deskpool.testing.processes import until
from deskpool.testing.pytest_plugin import served
from deskpool.testing.services import ServiceAddresses

ADMIN = "edges-admin"


async def refused(reader: asyncio.StreamReader) -> bool:
    """Whether the server answered a connection 503 before any request and closed it."""
    try:
        data = await asyncio.wait_for(reader.read(), 0.5)
    except TimeoutError:
        return False  # held open, waiting for a request: accepted
    except ConnectionResetError:
        return True
    return data.startswith(b"HTTP/1.1 503")


async def test_one_address_cannot_hold_every_api_connection(make_config: Any) -> None:
    from deskpool.runtime import Runtime

    process = make_config(
        ["api"],
        API_ADDR="0.0.0.0:0",
        API_MAX_CONNECTIONS="12",
        API_MAX_CONNECTIONS_PER_ADDRESS="4",
        API_IDLE_TIMEOUT="60s",
        API_HEADER_TIMEOUT="60s",
        SECRETS_MASTER_KEY=base64.b64encode(bytes(range(32))).decode(),
    )
    runtime = Runtime(process.config, process.plugins)
    await runtime.open()
    api = process.plugins.components().get("api")(runtime)
    held: list[asyncio.StreamWriter] = []
    try:
        await api.start()
        port = api.bound.port
        # One address opens as many connections as the whole listener holds.
        answers = []
        for _ in range(12):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            held.append(writer)
            answers.append(await refused(reader))
        assert answers == [False] * 4 + [True] * 8, answers
        # Another address is still served.
        connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.get(f"http://127.0.0.1:{port}/openapi.yaml") as response,
        ):
            assert response.status == 200, await response.text()
    finally:
        for writer in held:
            writer.close()
        await api.stop()
        await runtime.close()


@pytest.fixture
async def proxied(
    secure_environ: dict[str, str], identity_provider: Any, aiohttp_client: Any
) -> AsyncIterator[tuple[Any, Any, dict[str, str]]]:
    """An api behind a trusted proxy on loopback: ``(runtime, client, admin headers)``."""
    environ = secure_environ | {
        "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": ADMIN,
        "API_RATE_LIMIT_PER_MINUTE": "3",
        "API_TRUSTED_PROXIES": "127.0.0.0/8, ::1",
    }
    async with served(environ, aiohttp_client) as (runtime, client):
        token = identity_provider.issue_token(ADMIN, expires_in=3600)
        yield runtime, client, {"Authorization": f"Bearer {token}"}


async def statuses(client: Any, forwarded_for: str, count: int) -> list[int]:
    answers = []
    for _ in range(count):
        response = await client.get("/openapi.yaml", headers={"X-Forwarded-For": forwarded_for})
        answers.append(response.status)
    return answers


async def test_behind_a_trusted_proxy_clients_are_told_apart(
    proxied: tuple[Any, Any, dict[str, str]],
) -> None:
    runtime, client, admin = proxied
    # Two clients behind the proxy have a budget each (3 a minute on a public operation).
    assert await statuses(client, "198.51.100.7", 3) == [200, 200, 200]
    assert await statuses(client, "198.51.100.8", 3) == [200, 200, 200]
    assert await statuses(client, "198.51.100.7", 1) == [429]
    # A client cannot escape its budget by writing addresses of its own on the left: the
    # rightmost address that is not a trusted proxy counts.
    assert await statuses(client, "203.0.113.50, 198.51.100.7", 1) == [429]
    assert await statuses(client, "203.0.113.51, 198.51.100.8, 127.0.0.1", 1) == [429]

    # The audit names the client, not the proxy.
    response = await client.post(
        "/api/v1/groups",
        json={"key": "edge-proxied", "name": "Proxied"},
        headers={**admin, "X-Forwarded-For": "203.0.113.9, 198.51.100.20"},
    )
    assert response.status == 201, await response.text()
    async with runtime.db.acquire() as connection:
        source = await connection.fetchval(
            "SELECT source_address FROM audit_events WHERE action = 'group.create' "
            "AND resource_id = $1",
            (await response.json())["id"],
        )
    assert str(source) == "198.51.100.20"


@pytest.fixture
async def direct(
    secure_environ: dict[str, str], identity_provider: Any, aiohttp_client: Any
) -> AsyncIterator[tuple[Any, Any, dict[str, str]]]:
    """An api whose trusted proxies do not include the loopback client."""
    environ = secure_environ | {
        "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": ADMIN,
        "API_RATE_LIMIT_PER_MINUTE": "3",
        "API_TRUSTED_PROXIES": "10.0.0.0/8",
    }
    async with served(environ, aiohttp_client) as (runtime, client):
        token = identity_provider.issue_token(ADMIN, expires_in=3600)
        yield runtime, client, {"Authorization": f"Bearer {token}"}


async def test_a_spoofed_forwarded_for_from_an_untrusted_peer_is_ignored(
    direct: tuple[Any, Any, dict[str, str]],
) -> None:
    runtime, client, admin = direct
    answers = [(await statuses(client, f"198.51.100.{number}", 1))[0] for number in range(1, 6)]
    assert answers == [200, 200, 200, 429, 429]
    response = await client.post(
        "/api/v1/groups",
        json={"key": "edge-direct", "name": "Direct"},
        headers={**admin, "X-Forwarded-For": "198.51.100.99"},
    )
    assert response.status == 201, await response.text()
    async with runtime.db.acquire() as connection:
        source = await connection.fetchval(
            "SELECT source_address FROM audit_events WHERE action = 'group.create' "
            "AND resource_id = $1",
            (await response.json())["id"],
        )
    assert str(source) == "127.0.0.1"


async def test_the_stream_limit_holds_across_api_processes(
    secure_environ: dict[str, str], identity_provider: Any, aiohttp_client: Any
) -> None:
    environ = secure_environ | {
        "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": ADMIN,
        "API_EVENT_STREAMS_PER_USER": "2",
        "API_RATE_LIMIT_PER_MINUTE": "0",
    }
    token = identity_provider.issue_token("edges-streamer", expires_in=3600)
    headers = {"Authorization": f"Bearer {token}"}
    opened: list[Any] = []

    async def open_stream(client: Any) -> Any:
        response = await client.get("/api/v1/events", headers=headers)
        opened.append(response)
        if response.status == 200:
            await response.content.readline()  # the stream has begun
        return response

    async with (
        served(environ, aiohttp_client) as (_, first),
        served(environ, aiohttp_client) as (_, second),
    ):
        try:
            one, two = await open_stream(first), await open_stream(second)
            assert (one.status, two.status) == (200, 200)
            third, fourth = await open_stream(first), await open_stream(second)
            assert (third.status, fourth.status) == (429, 429)
            assert json.loads(await fourth.text())["code"] == "too_many_streams"
            # A stream closed gives its slot back, in whichever process it was.
            one.close()

            async def a_slot_is_free() -> bool:
                response = await open_stream(second)
                response.close()
                return bool(response.status == 200)

            await until(a_slot_is_free, "the closed stream's slot is given back")
        finally:
            for response in opened:
                response.close()


async def test_the_slots_of_a_dead_process_lapse_and_an_outage_keeps_the_process_limit(
    test_servers: ServiceAddresses,
) -> None:
    host, _, port = test_servers.kv_addr.rpartition(":")
    prefix = f"deskpool-test-{secrets.token_hex(4)}:"
    kv = redis.Redis(host=host, port=int(port), socket_timeout=1)
    lost = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=1)
    try:
        dead = SharedStreamSlots(kv, prefix, 2, slot_seconds=1.0)
        alive = SharedStreamSlots(kv, prefix, 2, slot_seconds=1.0)
        # A process takes both slots and dies: it never renews them nor gives them back.
        assert await dead.take("u1") is not None
        assert await dead.take("u1") is not None
        assert await alive.take("u1") is None
        await asyncio.sleep(1.2)
        slot = await alive.take("u1")
        assert slot is not None
        await alive.give_back(slot)

        # Redis unreachable: the process's own limit still holds, nothing else refuses.
        alone = SharedStreamSlots(lost, prefix, 2)
        taken = [await alone.take("u2") for _ in range(3)]
        assert [slot is not None for slot in taken] == [True, True, False]
    finally:
        await kv.aclose()
        await lost.aclose()
