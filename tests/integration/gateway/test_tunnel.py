"""The gateway tunnel end to end against the desktop daemon simulator."""

from __future__ import annotations

import time

from prometheus_client import generate_latest
from tests.support.gateway import (
    GatewayHarness,
)

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.guacamole import Instruction, Status
from deskpool.sessions.tunnel import SessionEndReason


async def test_handshake_then_instructions_flow_both_ways(
    gateway: GatewayHarness, desktop_daemon: DesktopDaemonSimulator
) -> None:
    token = gateway.broker.issue()
    grant = gateway.broker.grant_of(token)
    client = await gateway.open(token, width="800", height="600", dpi="120", timezone="UTC")
    first = await client.until("sync")
    assert client.uuid == str(grant.session_id)
    assert client.messages[0] == f"0.,36.{grant.session_id};"
    assert first[0] == Instruction("name", ("demo-01",))
    assert first[1] == Instruction("size", ("0", "800", "600"))
    # What the daemon received: the server-resolved target, never anything from the browser.
    handshake = desktop_daemon.handshakes[-1]
    assert handshake[0] == Instruction("select", ("vnc",))
    assert handshake[1] == Instruction("size", ("800", "600", "120"))
    assert Instruction("timezone", ("UTC",)) in handshake
    assert Instruction("name", ("Ada Lovelace",)) in handshake
    connection_id = gateway.broker.connected[grant.session_id]
    assert connection_id in desktop_daemon.connections
    # Every message carries whole instructions.
    for message in client.messages:
        assert message.endswith(";")
    await client.send("key", ord("é"), 1)
    await client.send("mouse", 10, 20, 1)
    await client.until("sync")
    await client.until("sync")
    screen = desktop_daemon.connections[connection_id].screen
    assert screen.typed == "é"
    assert screen.clicks == [(10, 20)]
    await client.ws.close()
    assert await gateway.broker.wait_ended(grant.session_id) is SessionEndReason.CLIENT_CLOSED
    _, counters = gateway.broker.ended[grant.session_id]
    assert counters.bytes_to_desktop > 0
    assert counters.bytes_to_browser > 1000
    assert counters.last_activity <= time.time()


async def test_pings_are_echoed_and_never_reach_the_daemon(
    gateway: GatewayHarness, desktop_daemon: DesktopDaemonSimulator
) -> None:
    client, token = await gateway.synced()
    await client.ping(1700000000123)
    await client.send("key", ord("a"), 1)
    await client.until("sync")
    assert Instruction("", ("ping", "1700000000123")) in client.internal
    connection_id = gateway.connection_of(token)
    assert desktop_daemon.connections[connection_id].screen.typed == "a"
    received = [i.opcode for i in desktop_daemon.handshakes[-1]]
    assert "" not in received
    await client.ws.close()


async def test_daemon_end_closes_the_tunnel_with_success(gateway: GatewayHarness) -> None:
    client, token = await gateway.synced()
    await client.send("disconnect")
    closed = await client.closed()
    assert closed.code == 1000
    assert closed.status == Status.SUCCESS
    session_id = gateway.broker.grant_of(token).session_id
    assert await gateway.broker.wait_ended(session_id) is SessionEndReason.DESKTOP_CLOSED


async def test_metrics_are_on_the_process_registry(gateway: GatewayHarness) -> None:
    client, _ = await gateway.synced()
    text = generate_latest(gateway.component.runtime.metrics).decode()
    assert "deskpool_gateway_open_tunnels 1.0" in text
    assert 'deskpool_gateway_relayed_bytes_total{direction="to_browser"}' in text
    assert "deskpool_gateway_handshake_seconds_count 1.0" in text
    await client.ws.close()
    await gateway.broker.wait_ended(gateway.broker.redeemed[0][0].session_id)
    text = generate_latest(gateway.component.runtime.metrics).decode()
    assert "deskpool_gateway_open_tunnels 0.0" in text
    assert 'deskpool_gateway_session_duration_seconds_count{reason="client_closed"} 1.0' in text
