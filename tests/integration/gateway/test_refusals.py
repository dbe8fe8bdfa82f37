"""Every refusal reaches the browser as Guacamole's Java endpoint sends it: code and status."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import Any

import pytest
from tests.support.gateway import (
    GatewayHarness,
)

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.guacamole import Status, encode
from deskpool.sessions.tunnel import DesktopTarget, SessionEndReason


async def refused_with(harness: GatewayHarness, token: str, **options: Any) -> Status:
    client = await harness.open(token, **options)
    closed = await client.closed()
    status = Status(closed.status)
    assert closed.code == status.websocket_code
    return status


@pytest.mark.parametrize(
    ("reason", "status"),
    [
        ("expired", Status.CLIENT_UNAUTHORIZED),
        ("desktop_gone", Status.RESOURCE_NOT_FOUND),
        ("unavailable", Status.SERVER_ERROR),
    ],
)
async def test_rejected_tokens(gateway: GatewayHarness, reason: str, status: Status) -> None:
    assert await refused_with(gateway, gateway.broker.issue(reject=reason)) is status


async def test_unknown_replayed_and_missing_tokens_are_unauthorized(
    gateway: GatewayHarness,
) -> None:
    assert await refused_with(gateway, "forged") is Status.CLIENT_UNAUTHORIZED
    client, token = await gateway.synced()
    assert await refused_with(gateway, token) is Status.CLIENT_UNAUTHORIZED
    assert await refused_with(gateway, "") is Status.CLIENT_UNAUTHORIZED
    await client.ws.close()
    failures = gateway.component.metrics.failures
    assert failures.labels("token_unknown")._value.get() == 1
    assert failures.labels("token_used")._value.get() == 1


async def test_a_foreign_origin_is_forbidden_before_the_token_is_spent(
    gateway: GatewayHarness,
) -> None:
    token = gateway.broker.issue()
    status = await refused_with(gateway, token, origin="https://evil.example.net")
    assert status is Status.CLIENT_FORBIDDEN
    assert token not in gateway.broker.used
    client = await gateway.open(token, origin="https://gateway.example.com")
    await client.until("sync")
    await client.ws.close()
    client = await gateway.open(gateway.broker.issue(), origin=None)
    await client.until("sync")
    await client.ws.close()


async def test_development_allows_loopback_origins(start_gateway: Callable[..., Any]) -> None:
    harness: GatewayHarness = await start_gateway(APP_ENV="development")
    client = await harness.open(harness.broker.issue(), origin="http://localhost:5173")
    await client.until("sync")
    await client.ws.close()
    harness = await start_gateway(GATEWAY_ALLOWED_ORIGINS="https://only.example.com")
    token = harness.broker.issue()
    status = await refused_with(harness, token, origin="https://console.example.com")
    assert status is Status.CLIENT_FORBIDDEN


@pytest.mark.parametrize("display", [{"width": "wide"}, {"dpi": "0"}, {"image": "png"}])
async def test_a_bad_display_is_a_bad_request(
    gateway: GatewayHarness, display: dict[str, str]
) -> None:
    token = gateway.broker.issue()
    assert await refused_with(gateway, token, **display) is Status.CLIENT_BAD_REQUEST
    assert token not in gateway.broker.used


@pytest.mark.parametrize(
    ("payload", "status"),
    [
        ("4.key,1.1,1.", Status.CLIENT_BAD_REQUEST),  # never terminated properly
        ("3.key,x.1;", Status.CLIENT_BAD_REQUEST),
        ("4.blob,1.0,999999.", Status.CLIENT_OVERRUN),
        (encode("blob", "0", "A" * 9000), Status.CLIENT_OVERRUN),
        (encode("x", *(["a"] * 128)), Status.CLIENT_OVERRUN),
    ],
)
async def test_malformed_or_oversized_input_closes_the_tunnel(
    gateway: GatewayHarness, payload: str, status: Status
) -> None:
    client, token = await gateway.synced()
    await client.ws.send_str(payload)
    if status is Status.CLIENT_BAD_REQUEST and payload.endswith("."):
        await client.ws.send_str("xyz;")
    closed = await client.closed()
    assert closed.status == status
    assert closed.code == status.websocket_code
    session_id = gateway.broker.grant_of(token).session_id
    assert await gateway.broker.wait_ended(session_id) is SessionEndReason.CLIENT_CLOSED


async def test_binary_messages_are_a_bad_type(gateway: GatewayHarness) -> None:
    client, _ = await gateway.synced()
    await client.ws.send_bytes(b"3.nop;")
    assert (await client.closed()).status == Status.CLIENT_BAD_TYPE


async def test_too_many_tunnels(start_gateway: Callable[..., Any]) -> None:
    harness: GatewayHarness = await start_gateway(GATEWAY_MAX_TUNNELS="1")
    client = await harness.open(harness.broker.issue())
    await client.until("sync")
    assert await refused_with(harness, harness.broker.issue()) is Status.CLIENT_TOO_MANY
    await client.ws.close()


async def test_a_daemon_that_is_down_is_upstream_not_found(
    start_gateway: Callable[..., Any],
) -> None:
    with socket.socket() as held:  # bound, never listening: connections to it are refused
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        harness: GatewayHarness = await start_gateway(DESKTOPD_ADDRESS=f"127.0.0.1:{port}")
        token = harness.broker.issue()
        assert await refused_with(harness, token) is Status.UPSTREAM_NOT_FOUND
    session_id = harness.broker.grant_of(token).session_id
    assert await harness.broker.wait_ended(session_id) is SessionEndReason.DAEMON_ERROR


async def test_a_slow_daemon_is_upstream_timeout(start_gateway: Callable[..., Any]) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        harness: GatewayHarness = await start_gateway(
            DESKTOPD_ADDRESS=f"127.0.0.1:{port}", GATEWAY_HANDSHAKE_TIMEOUT="1s"
        )
        token = harness.broker.issue()
        assert await refused_with(harness, token) is Status.UPSTREAM_TIMEOUT
        failures = harness.component.metrics.failures
        assert failures.labels("daemon_timeout")._value.get() == 1


async def test_a_refusing_daemon_passes_its_status_on(gateway: GatewayHarness) -> None:
    join = gateway.broker.issue(join_connection_id="$missing", read_only=True)
    assert await refused_with(gateway, join) is Status.RESOURCE_NOT_FOUND
    telnet = gateway.broker.issue(DesktopTarget("telnet", "h", 23))
    assert await refused_with(gateway, telnet) is Status.UPSTREAM_ERROR


async def test_a_slow_redemption_leaves_the_daemon_its_whole_handshake_time(
    start_gateway: Callable[..., Any],
    desktop_daemon: DesktopDaemonSimulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 9 a.m. (issue 39): redemptions queue for the database; a daemon that takes half its
    # handshake time was refused UPSTREAM_TIMEOUT when the queue had eaten the rest of it.
    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def half_as_fast(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.5)
        upstream_reader, upstream_writer = await asyncio.open_connection(
            "127.0.0.1", desktop_daemon.port
        )
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    server = await asyncio.start_server(half_as_fast, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        harness: GatewayHarness = await start_gateway(
            DESKTOPD_ADDRESS=f"127.0.0.1:{port}", GATEWAY_HANDSHAKE_TIMEOUT="1s"
        )
        redeem = harness.broker.redeem

        async def queued(token: str, *, gateway_id: str) -> Any:
            await asyncio.sleep(0.8)
            return await redeem(token, gateway_id=gateway_id)

        monkeypatch.setattr(harness.broker, "redeem", queued)
        client = await harness.open(harness.broker.issue())
        await client.until("sync")
        await client.ws.close()
