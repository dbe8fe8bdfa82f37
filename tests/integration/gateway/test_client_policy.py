"""The client policy enforced by the gateway itself, whatever a hand-written client sends.

The client here is a raw Guacamole client over the WebSocket (no console, no guacamole-common-js):
it sends clipboard, file, put and audio streams the policy forbids, and the desktop daemon
simulator (guacd's side) sends clipboard, downloads, a print job's PDF, sound and a filesystem
object. Nothing forbidden crosses the gateway either way, the sender is told with guacd's own
``ack`` statuses, each refusal is reported for the audit, and a policy changed while the tunnel
is open applies within 2 s.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
import uuid

from tests.support.gateway import GatewayHarness

from deskpool.client_policy.model import (
    DEFAULT_CLIENT_POLICY,
    ClientPolicy,
    ClientPolicyChange,
    Transfer,
)
from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.guacamole import Instruction, Status, encode
from deskpool.sessions.tunnel import DesktopTarget
from deskpool.testing.tunnels import WebSocketTunnelClient
from deskpool_gateway.transfers import TRANSFER_NOTICE

RDP = DesktopTarget("rdp", "demo-01", 3389, {"username": "ada", "password": "s3cret"})
#: Everything off.
LOCKED = ClientPolicyChange(
    {
        "clipboard": {"to_desktop": {"mode": "off"}, "to_browser": {"mode": "off"}},
        "file_transfer": {"upload": False, "download": False},
        "audio": {"output": False, "microphone": False},
        "printing": False,
    }
).applied_to(DEFAULT_CLIENT_POLICY)
GOVERNED = {"clipboard", "file", "put", "audio", "blob", "end", "body", "filesystem"}
FORBIDDEN = str(int(Status.CLIENT_FORBIDDEN))
OVERRUN = str(int(Status.CLIENT_OVERRUN))
NOTICE = str(TRANSFER_NOTICE)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def open_tunnel(
    gateway: GatewayHarness, policy: ClientPolicy, **grant: object
) -> tuple[WebSocketTunnelClient, uuid.UUID, str]:
    """``(client, session id, daemon connection id)`` of a tunnel under ``policy``, drawn."""
    client, token = await gateway.synced(target=RDP, client_policy=policy, **grant)
    return client, gateway.broker.grant_of(token).session_id, gateway.connection_of(token)


async def settle(client: WebSocketTunnelClient) -> list[Instruction]:
    """Type a key and read up to its frame: the daemon has read everything sent before."""
    await client.send("key", ord("z"), 1)
    return await client.until("sync")


async def test_every_forbidden_stream_from_the_client_is_dropped_refused_and_audited(
    gateway: GatewayHarness, desktop_daemon: DesktopDaemonSimulator
) -> None:
    client, session_id, connection_id = await open_tunnel(gateway, LOCKED)
    secret, upload, microphone = b"the quarterly numbers", b"\x00\x01file", b"\x10" * 64
    sent = [
        encode("clipboard", 1, "text/plain"),
        encode("blob", 1, b64(secret)),
        encode("end", 1),
        encode("file", 2, "application/octet-stream", "payload.bin"),
        encode("blob", 2, b64(upload)),
        encode("end", 2),
        encode("put", 0, 3, "text/plain", "/Desktop/notes.txt"),
        encode("blob", 3, b64(upload)),
        encode("end", 3),
        encode("audio", 4, "audio/L16;rate=44100,channels=2"),
        encode("blob", 4, b64(microphone)),
        encode("end", 4),
    ]
    # One message with everything, as a client that ignores the console would.
    await client.ws.send_str("".join(sent))
    answers = await settle(client)
    user = desktop_daemon.user_of(connection_id)
    assert [i for i in user.received if i.opcode in GOVERNED] == []
    acks = {i.args[0]: i.args[2] for i in answers if i.opcode == "ack"}
    # guacd ignores a refused paste silently; the gateway tells the client (its console says so).
    assert acks == {"1": FORBIDDEN, "2": FORBIDDEN, "3": FORBIDDEN, "4": FORBIDDEN}
    audited = await gateway.broker.wait_transfers(session_id, 4)
    by_kind = {(t.kind.value, t.reason): t for t in audited}
    assert set(by_kind) == {
        ("clipboard", "clipboard_off"),
        ("file", "upload_off"),
        ("microphone", "microphone_off"),
    }
    clipboard = by_kind["clipboard", "clipboard_off"]
    assert (clipboard.outcome, clipboard.size, clipboard.delivered) == ("refused", len(secret), 0)
    assert clipboard.sha256 == sha(secret)
    files = [t for t in audited if t.kind.value == "file"]
    assert sorted(t.name or "" for t in files) == ["/Desktop/notes.txt", "payload.bin"]
    assert all(t.sha256 == sha(upload) and t.direction.value == "to_desktop" for t in files)
    # The input that is no transfer still reaches the desktop.
    screen = desktop_daemon.connections[connection_id].screen
    assert screen.typed.endswith("z")
    await client.ws.close()


async def test_every_forbidden_stream_from_the_desktop_is_withheld_and_guacd_told(
    gateway: GatewayHarness, desktop_daemon: DesktopDaemonSimulator
) -> None:
    client, session_id, connection_id = await open_tunnel(gateway, LOCKED)
    user = desktop_daemon.user_of(connection_id)
    pdf = b"%PDF-1.4 printed"
    await user.send(
        "".join(
            [
                encode("clipboard", 10, "text/plain"),
                encode("blob", 10, b64(b"copied out")),
                encode("end", 10),
                encode("filesystem", 0, "Shared Drive"),
                encode("file", 11, "application/octet-stream", "report.xlsx"),
                encode("blob", 11, b64(b"cells")),
                encode("body", 0, 12, "application/octet-stream", "/secret.txt"),
                encode("blob", 12, b64(b"lines")),
                encode("file", 13, "application/pdf", "document.pdf"),
                encode("blob", 13, b64(pdf)),
                encode("audio", 14, "audio/L16;rate=44100,channels=2"),
                encode("blob", 14, b64(b"\x00" * 32)),
                encode("name", "marker"),
            ]
        )
    )
    seen = await client.until("name")
    assert [i for i in seen if i.opcode in GOVERNED] == []
    # The browser is told what was withheld (its console says so in words), not what it was.
    notices = [i.args[1:] for i in seen if i.opcode == "msg" and i.args[0] == NOTICE]
    assert notices == [
        ("clipboard", "clipboard_off", "", "0"),
        ("file", "download_off", "report.xlsx", "0"),
        ("file", "download_off", "/secret.txt", "0"),
        ("print", "printing_off", "document.pdf", "0"),
    ]
    await settle(client)
    told = {i.args[0]: i.args[2] for i in user.received if i.opcode == "ack"}
    assert told == {"11": FORBIDDEN, "12": FORBIDDEN, "13": FORBIDDEN}
    await client.ws.close()
    audited = await gateway.broker.wait_transfers(session_id, 5)
    reasons = sorted((t.kind.value, t.reason or "") for t in audited)
    assert reasons == [
        ("audio", "audio_off"),
        ("clipboard", "clipboard_off"),
        ("file", "download_off"),
        ("file", "download_off"),
        ("print", "printing_off"),
    ]
    printed = next(t for t in audited if t.kind.value == "print")
    assert (printed.name, printed.sha256, printed.delivered) == ("document.pdf", sha(pdf), 0)


async def test_clipboard_over_its_limit_is_cut_at_a_character_and_allowed_streams_pass(
    gateway: GatewayHarness, desktop_daemon: DesktopDaemonSimulator
) -> None:
    policy = ClientPolicyChange(
        {
            "clipboard": {"to_desktop": {"max_bytes": 9}, "to_browser": {"max_bytes": 4}},
            "file_transfer": {"upload": True, "download": True, "max_file_bytes": 1000},
        }
    ).applied_to(DEFAULT_CLIENT_POLICY)
    client, session_id, connection_id = await open_tunnel(gateway, policy)
    text = "héllo wörld, and more".encode()
    await client.send("clipboard", 1, "text/plain")
    await client.send("blob", 1, b64(text))
    await client.send("end", 1)
    await client.send("file", 2, "application/octet-stream", "small.bin")
    await client.send("blob", 2, b64(b"x" * 600))
    await client.send("blob", 2, b64(b"y" * 600))
    await client.send("end", 2)
    answers = await settle(client)
    user = desktop_daemon.user_of(connection_id)
    blobs = {}
    for instruction in user.received:
        if instruction.opcode == "blob":
            blobs.setdefault(instruction.args[0], b"")
            blobs[instruction.args[0]] += base64.b64decode(instruction.args[1])
    assert blobs["1"] == "héllo w".encode()  # 8 bytes: the 9th would split "ö"
    assert blobs["2"] == b"x" * 600 + b"y" * 400  # cut at max_file_bytes
    ends = [i.args[0] for i in user.received if i.opcode == "end"]
    assert ends == ["1", "2"]
    overrun = [i.args[0] for i in answers if i.opcode == "ack" and i.args[2] == OVERRUN]
    # Both cut streams are answered CLIENT_OVERRUN: the paste too (guacd cuts one silently,
    # the console says it was cut).
    assert overrun == ["1", "2"]
    await user.send(
        encode("clipboard", 5, "text/plain")
        + encode("blob", 5, b64(b"abcdefgh"))
        + encode("end", 5)
        + encode("file", 6, "application/octet-stream", "ok.txt")
        + encode("blob", 6, b64(b"fine"))
        + encode("end", 6)
        + encode("name", "marker")
    )
    seen = await client.until("name")
    notices = [i.args[1:] for i in seen if i.opcode == "msg" and i.args[0] == NOTICE]
    assert notices == [("clipboard", "over_limit", "", "4")]
    out = [i for i in seen if i.opcode in GOVERNED]
    assert out == [
        Instruction("clipboard", ("5", "text/plain")),
        Instruction("blob", ("5", b64(b"abcd"))),
        Instruction("end", ("5",)),
        Instruction("file", ("6", "application/octet-stream", "ok.txt")),
        Instruction("blob", ("6", b64(b"fine"))),
        Instruction("end", ("6",)),
    ]
    await client.ws.close()
    audited = await gateway.broker.wait_transfers(session_id, 4)
    outcomes = sorted((t.kind.value, t.direction.value, t.outcome) for t in audited)
    assert outcomes == [
        ("clipboard", "to_browser", "cut"),
        ("clipboard", "to_desktop", "cut"),
        ("file", "to_browser", "allowed"),
        ("file", "to_desktop", "cut"),
    ]
    pasted = next(
        t for t in audited if t.kind.value == "clipboard" and t.direction.value == "to_desktop"
    )
    assert (pasted.size, pasted.delivered, pasted.sha256) == (len(text), 8, sha(text))


async def test_a_policy_change_reaches_an_open_tunnel_within_two_seconds(
    gateway: GatewayHarness, desktop_daemon: DesktopDaemonSimulator
) -> None:
    pool_id = uuid.uuid4()
    client, session_id, connection_id = await open_tunnel(
        gateway, DEFAULT_CLIENT_POLICY, pool_id=pool_id
    )
    user = desktop_daemon.user_of(connection_id)

    async def copy_out(n: int) -> bool:
        """Whether a copy on the desktop reaches the browser now."""
        await user.send(
            encode("clipboard", n, "text/plain")
            + encode("blob", n, b64(f"copy {n}".encode()))
            + encode("end", n)
            + encode("name", f"marker {n}")
        )
        seen = await client.until("name")
        return any(i.opcode == "clipboard" for i in seen)

    assert await copy_out(1)
    gateway.broker.policies[pool_id] = LOCKED
    changed = time.monotonic()
    n = 2
    while await copy_out(n):
        assert time.monotonic() - changed < 2.0, "copying out still works 2 s after the change"
        n += 1
        await asyncio.sleep(0.05)
    elapsed = time.monotonic() - changed
    assert elapsed < 2.0
    # Without a reconnect: the same tunnel goes on.
    assert not client.ws.closed
    await settle(client)
    await client.ws.close()
    audited: list[Transfer] = await gateway.broker.wait_transfers(session_id, n)
    assert audited[-1].reason == "clipboard_off"
