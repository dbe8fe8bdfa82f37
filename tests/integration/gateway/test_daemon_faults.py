"""The desktop daemon's faults reach the browser, told apart from its orderly ends (issue 33).

guacd ends a connection in order with its own ``disconnect`` instruction; a connection whose
process died (killed, crashed) simply closes its socket. The gateway closes the first as a
success (``desktop_closed``) and reports the second as ``UPSTREAM_ERROR`` (an ``error``
instruction, then the close) ending the session ``daemon_error``. A refused RDP login (guacd
1.6.0 sends a lone ``sync`` and draws nothing) is not a first frame: the first-frame timeout
ends it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest
from tests.integration.gateway.test_daemon_safety import eventually, owner_of
from tests.support.gateway import GatewayHarness

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.desktopd.faults import LoginRefusal
from deskpool.guacamole import Instruction, Status
from deskpool.sessions.tunnel import DesktopTarget, SessionEndReason
from deskpool.testing.tunnels import TunnelClosed, WebSocketTunnelClient
from deskpool_gateway import supervisor

RDP = DesktopTarget("rdp", "win-01", 3389, {"username": "ada", "password": "wrong"})


@pytest.fixture(autouse=True)
def fast_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor, "SWEEP_INTERVAL", 0.05)


async def ending(
    client: WebSocketTunnelClient, within: float = 10
) -> tuple[list[Instruction], TunnelClosed]:
    """What the browser reads until the tunnel closes, and the close."""
    seen: list[Instruction] = []
    try:
        while True:
            seen.append(await client.read(within))
    except TunnelClosed as closed:
        return seen, closed


def errors(seen: list[Instruction]) -> list[Instruction]:
    return [instruction for instruction in seen if instruction.opcode == "error"]


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
async def test_a_daemon_that_hangs_up_is_an_upstream_error(
    gateway: GatewayHarness, desktop_daemon: DesktopDaemonSimulator, reset: bool
) -> None:
    """Whether the dead process's socket closes (FIN) or is reset (RST, input left unread)."""
    client, token = await gateway.synced()
    desktop_daemon.kill_connection(gateway.connection_of(token), reset=reset)
    seen, closed = await ending(client)
    (error,) = errors(seen)
    assert error.args[1] == str(int(Status.UPSTREAM_ERROR))
    assert error.args[0]  # a message says what happened
    assert "disconnect" not in [instruction.opcode for instruction in seen]
    assert closed.status == Status.UPSTREAM_ERROR
    assert closed.code == 1011
    session_id = gateway.broker.grant_of(token).session_id
    assert await gateway.broker.wait_ended(session_id) is SessionEndReason.DAEMON_ERROR


async def test_the_daemons_own_disconnect_is_an_orderly_end(
    gateway: GatewayHarness, desktop_daemon: DesktopDaemonSimulator
) -> None:
    client, token = await gateway.synced()
    user = await owner_of(gateway, desktop_daemon, token)
    # guacd ends a user who acknowledges a frame it never sent with its own disconnect.
    await client.send("sync", 99_999_999_999_999)
    seen, closed = await ending(client)
    assert seen[-1] == Instruction("disconnect")
    assert errors(seen) == []
    assert closed.status == Status.SUCCESS
    assert closed.code == 1000
    session_id = gateway.broker.grant_of(token).session_id
    assert await gateway.broker.wait_ended(session_id) is SessionEndReason.DESKTOP_CLOSED
    assert not user.killed


async def test_a_refused_rdp_login_is_no_first_frame_and_times_out(
    start_gateway: Callable[..., Awaitable[GatewayHarness]],
    desktop_daemon: DesktopDaemonSimulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only the first-frame rule can close this tunnel: not the 15 s silence rules.
    monkeypatch.setattr(supervisor, "RECEIVE_TIMEOUT", 3600.0)
    harness = await start_gateway(GATEWAY_FIRST_FRAME_TIMEOUT="1s")
    desktop_daemon.refuse_logins = LoginRefusal(then="hang")
    token = harness.broker.issue(RDP)
    started = time.monotonic()
    client = await harness.open(token)
    (sync,) = await client.until("sync")  # the lone sync, nothing drawn before it
    await client.send("sync", sync.args[0])
    await client.send("size", 1280, 800)  # what a console sends once "connected"
    seen, closed = await ending(client, within=5)
    assert time.monotonic() - started < 5
    assert closed.status == Status.UPSTREAM_TIMEOUT
    (error,) = errors(seen)
    assert error.args[1] == str(int(Status.UPSTREAM_TIMEOUT))
    session_id = harness.broker.grant_of(token).session_id
    assert await harness.broker.wait_ended(session_id) is SessionEndReason.DAEMON_ERROR
    assert session_id not in harness.broker.drawn  # no first frame was recorded
    user = await owner_of(harness, desktop_daemon, token)
    await eventually(lambda: user.disconnected, "the daemon was sent disconnect")
    assert not user.crashed
    assert user.received == [Instruction("disconnect")]  # the held sync and size never did


async def test_a_refused_rdp_login_that_closes_is_an_upstream_error(
    gateway: GatewayHarness, desktop_daemon: DesktopDaemonSimulator
) -> None:
    desktop_daemon.refuse_logins = LoginRefusal(then="close", close_after=0.2)
    token = gateway.broker.issue(RDP)
    client = await gateway.open(token)
    seen, closed = await ending(client)
    assert [i.opcode for i in seen] == ["sync", "error"]
    assert closed.status == Status.UPSTREAM_ERROR
    session_id = gateway.broker.grant_of(token).session_id
    assert await gateway.broker.wait_ended(session_id) is SessionEndReason.DAEMON_ERROR
    assert session_id not in gateway.broker.drawn
