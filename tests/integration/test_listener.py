"""Every HTTP listener bounds its connections and logs malformed requests as one line.

The listener runs for real on a loopback socket (the limits live in the connection handler
aiohttp's test server does not use), with short limits so the test is quick.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from deskpool.config import HostPort
from deskpool.listener import (
    ConnectionLimits,
    GuardedServer,
    HttpListenerComponent,
    start_listener,
)
from deskpool.testing.processes import ANY_PORT

SECRET = "eyJhbGciOiJSUzI1NiJ9.SECRET-BEARER-TOKEN"
IDLE = 1.0
HEADER = 0.5
#: How long a test waits for what must happen (a deadline, never a measured figure).
GENEROUS = 30.0

Listen = Callable[..., Awaitable[tuple[web.AppRunner, int]]]


async def hello(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


@pytest.fixture
async def listen() -> AsyncIterator[Listen]:
    """``await listen(limits)``: serve a small application; returns the runner and its port."""
    runners: list[web.AppRunner] = []

    async def start(limits: ConnectionLimits) -> tuple[web.AppRunner, int]:
        app = web.Application()
        app.router.add_get("/hello", hello)
        app.router.add_post("/hello", hello)
        runner = await start_listener(
            app, HostPort("127.0.0.1", 0), name="test", limits=limits, shutdown_timeout=1
        )
        runners.append(runner)
        port = runner.addresses[0][1]
        return runner, port

    yield start
    for runner in runners:
        await runner.cleanup()


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (reset included)."""
    try:
        return await reader.read()
    except ConnectionResetError:
        return b""


async def test_idle_and_half_sent_connections_are_closed_while_requests_are_served(
    listen: Listen,
) -> None:
    runner, port = await listen(
        ConnectionLimits(idle_timeout=IDLE, header_timeout=HEADER, max_connections=1000)
    )
    idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(100)]
    half_sent = []
    for _ in range(100):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /hello HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        half_sent.append((reader, writer))
    server = runner.server
    assert isinstance(server, GuardedServer)

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A slowloris sends a byte now and then, for as long as it is let: that does not
        # extend its deadline (if it did, the connection would never close).
        while not (reader.at_eof() or writer.is_closing()):
            writer.write(b"a")
            await asyncio.sleep(HEADER / 5)

    trickling = [asyncio.create_task(trickle(*connection)) for connection in half_sent]
    served = 0
    async with aiohttp.ClientSession() as session:
        half_closed = asyncio.gather(*(closed_by_server(r) for r, _ in half_sent))
        async with asyncio.timeout(GENEROUS):
            while not half_closed.done():
                async with session.get(f"http://127.0.0.1:{port}/hello") as response:
                    assert response.status == 200
                    served += 1
        assert all(data == b"" for data in await half_closed)
        idle_closed = await asyncio.wait_for(
            asyncio.gather(*(closed_by_server(r) for r, _ in idle)), GENEROUS
        )
        # Normal requests are still served once the others are gone.
        async with session.get(f"http://127.0.0.1:{port}/hello") as response:
            assert response.status == 200
    await asyncio.gather(*trickling)
    assert served > 0
    assert all(data == b"" for data in idle_closed)
    for _, writer in idle + half_sent:
        writer.close()


async def test_a_connection_that_completes_its_head_is_not_cut(listen: Listen) -> None:
    _, port = await listen(ConnectionLimits(idle_timeout=IDLE, header_timeout=HEADER))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    # Two requests on one connection, each head sent in pieces within the header timeout.
    for _ in range(2):
        writer.write(b"GET /hello HTTP/1.1\r\n")
        await asyncio.sleep(HEADER / 4)
        writer.write(b"Host: x\r\n\r\n")
        status = await reader.readline()
        assert status.startswith(b"HTTP/1.1 200"), status
        while (await reader.readline()) != b"\r\n":
            pass
        assert json.loads(await reader.readexactly(len(b'{"ok": true}'))) == {"ok": True}
    writer.close()


async def test_a_listener_over_its_connection_cap_answers_503_and_closes(listen: Listen) -> None:
    _, port = await listen(ConnectionLimits(idle_timeout=30, header_timeout=30, max_connections=5))
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(5)]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    refused = await asyncio.wait_for(reader.read(), 5)
    head, _, body = refused.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 Service Unavailable")
    assert b"Retry-After: 1" in head
    assert b"Content-Type: application/problem+json" in head
    assert json.loads(body)["code"] == "too_many_connections"
    writer.close()
    # A held connection is served; once one goes, a new connection is served too.
    reader, writer = held[0]
    writer.write(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert (await reader.read()).startswith(b"HTTP/1.1 200")
    writer.close()
    await writer.wait_closed()
    for _ in range(50):
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/hello") as response,
        ):
            if response.status == 200:
                break
    assert response.status == 200
    for _, held_writer in held[1:]:
        held_writer.close()


async def test_a_header_over_8_kib_is_431_and_one_line_without_its_contents(
    listen: Listen, caplog: pytest.LogCaptureFixture
) -> None:
    _, port = await listen(ConnectionLimits())
    caplog.set_level(logging.DEBUG)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"GET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + SECRET.encode()
        + b"A" * 9000
        + b"\r\n\r\n"
    )
    answer = await asyncio.wait_for(reader.read(), 5)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 431")
    assert json.loads(body)["code"] == "request_header_too_large"
    assert SECRET.encode() not in answer
    writer.close()
    records = [r for r in caplog.records if r.name.startswith(("aiohttp", "deskpool"))]
    assert all(SECRET not in r.getMessage() and not r.exc_info for r in records), records
    assert all(r.levelno < logging.ERROR for r in records)
    lines = [r.getMessage() for r in records if r.name == "deskpool.listener"]
    assert lines == [
        "test refused a request from 127.0.0.1: LineTooLong (431 request_header_too_large)"
    ]


@pytest.mark.parametrize(
    ("request_bytes", "status", "code"),
    [
        (b"GET /a\x00b HTTP/1.1\r\nHost: x\r\n\r\n", 400, "malformed_request"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400, "malformed_request"),
        (
            b"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Encoding: br\r\n"
            b"Content-Length: 2\r\n\r\n{}",
            415,
            "unsupported_content_encoding",
        ),
    ],
)
async def test_requests_the_parser_refuses_are_problem_json(
    listen: Listen,
    caplog: pytest.LogCaptureFixture,
    request_bytes: bytes,
    status: int,
    code: str,
) -> None:
    _, port = await listen(ConnectionLimits())
    caplog.set_level(logging.DEBUG)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes)
    answer = await asyncio.wait_for(reader.read(), 5)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.0 {status}".encode()), answer
    assert b"application/problem+json" in head
    assert json.loads(body)["code"] == code
    writer.close()
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


async def test_every_listener_of_the_platform_is_guarded(make_config: Any) -> None:
    from deskpool.ops import OpsListener
    from deskpool.runtime import Runtime

    process = make_config(
        ["api", "gateway", "web"],
        API_ADDR=ANY_PORT,
        GATEWAY_ADDR=ANY_PORT,
        WEB_ADDR=ANY_PORT,
        METRICS_ADDR=ANY_PORT,
        SECRETS_MASTER_KEY=base64.b64encode(bytes(range(32))).decode(),
        API_IDLE_TIMEOUT="1s",
        API_HEADER_TIMEOUT="2s",
        API_MAX_CONNECTIONS="7",
    )
    runtime = Runtime(process.config, process.plugins)
    await runtime.open()
    components = process.plugins.components()
    # The gateway is a listener component like the others; it makes room for its tunnels, each
    # a connection while it lasts. (Started here, its session broker's Redis subscription
    # makes the test slow to stop; the gateway's own tests serve through it.)
    gateway = components.get("gateway")(runtime)
    assert isinstance(gateway, HttpListenerComponent)
    tunnels = process.config["GATEWAY_MAX_TUNNELS"]
    assert gateway.limits == ConnectionLimits(1.0, 2.0, 7 + tunnels)
    listeners: list[Any] = [components.get(name)(runtime) for name in ("api", "web")]
    listeners.append(OpsListener(runtime))
    try:
        for listener in listeners:
            await listener.start()
            server = listener.runner.server
            assert isinstance(server, GuardedServer), listener
            # The api caps each client address too (API_MAX_CONNECTIONS_PER_ADDRESS).
            per_address = 100 if listener is listeners[0] else 0
            assert server.limits == ConnectionLimits(1.0, 2.0, 7, per_address), listener
    finally:
        for listener in reversed(listeners):  # as the host stops components
            await listener.stop()
        await runtime.close()
