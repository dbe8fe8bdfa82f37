"""The processes of ``bench/gateway.py``: a fake guacd, deskpool's gateway, and a plain relay.

Each runs as its own process (``python bench/gateway_servers.py ROLE PORT [DAEMON_PORT
[RECORDINGS_DIR]]``) and prints ``ready PORT`` once it listens (port 0 asks for a port the
system picks).

- ``daemon``: guacd's side of the handshake (``args`` with ``VERSION_1_5_0``, ``ready``), a
  first frame (a ``sync``: the gateway holds input until then, and ends a tunnel whose daemon
  draws nothing), then what the ``hostname`` argument asks for: ``flood:N`` sends N bytes of
  a realistic display stream (PNG ``img`` streams of 6048-byte blobs plus small drawing
  instructions, ``sync`` per frame) as fast as the peer takes them, then hangs up; ``echo``
  answers each ``key`` with ``sync`` carrying the key's first argument; ``idle`` sends ``nop``
  every 5 s as guacd does.
- ``deskpool``: the real gateway component with a broker that grants any token (the token is
  the daemon mode), so token redemption costs nothing on either side of the comparison.
- ``deskpool-recorded``: the same, recording every tunnel (``RECORDINGS_DIR`` the 4th argument):
  the gateway's own recorder and recording writer process, whose real ``files`` recording store
  seals and writes the chunks, as in production; only the count of kept chunks in the
  recording's row (one PostgreSQL update a second per recording at most) is left out: no
  database here. A recording that stopped early (``truncated``) leaves a ``<id>.truncated`` file
  next to the chunks, so the benchmark can tell.
- ``relay``: a plain asyncio TCP relay to the daemon, the floor a relay in Python can reach.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
import random
import sys
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

from deskpool.client_policy.model import DEFAULT_CLIENT_POLICY, ClientPolicyChange
from deskpool.guacamole import encode
from deskpool.guacamole.stream import InstructionReader, StreamClosed
from deskpool.sessions.tunnel import (
    DesktopTarget,
    SessionEndReason,
    TunnelCounters,
    TunnelGrant,
)

VNC_ARG_NAMES = ("hostname", "port", "password")


def display_frame(seed: int = 1) -> bytes:
    """One frame of guacd-like output: ~57 KB, mostly base64 blobs, 40 small instructions."""
    rng = random.Random(seed)
    parts = []
    for _ in range(32):
        x, y = rng.randrange(1024), rng.randrange(768)
        parts.append(encode("copy", -1, x, y, 64, 16, 14, 0, (x + 8) % 1024, y))
    for n in range(8):
        parts.append(encode("rect", 0, n * 10, n * 10, 32, 32))
        parts.append(encode("cfill", 14, 0, 200, 100, 50, 255))
    parts.append(encode("img", 3, 14, 0, "image/png", 0, 0))
    for _ in range(7):
        parts.append(encode("blob", 3, base64.b64encode(rng.randbytes(6048)).decode()))
    parts.append(encode("end", 3))
    parts.append(encode("sync", 1700000000000, 1))
    return "".join(parts).encode()


#: The timestamp of the daemon's first frame (never a key's number).
FIRST_FRAME = 1700000000000


def clipboard_copy(index: int = 5, size: int = 8192) -> bytes:
    """A copy on the desktop as guacd sends it: a text ``clipboard`` stream of ``size`` bytes.

    It comes in blobs of 4096 bytes (``GUAC_COMMON_CLIPBOARD_BLOCK_SIZE``).
    """
    text = (b"copied text " * (size // 12 + 1))[:size]
    blobs = [
        encode("blob", index, base64.b64encode(text[at : at + 4096]).decode())
        for at in range(0, size, 4096)
    ]
    return (
        encode("clipboard", index, "text/plain") + "".join(blobs) + encode("end", index)
    ).encode()


async def serve_daemon(port: int) -> None:
    """The fake guacd (``flood-clipboard:N``: each frame followed by an 8 KiB copy)."""
    frame = display_frame()
    copied = frame + clipboard_copy()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        instructions = InstructionReader(reader)
        try:
            await instructions.expect("select")
            writer.write(encode("args", "VERSION_1_5_0", *VNC_ARG_NAMES).encode())
            while (connect := await instructions.read()).opcode != "connect":
                pass
            values = dict(zip(VNC_ARG_NAMES, connect.args[1:], strict=False))
            writer.write(encode("ready", f"${uuid.uuid4()}").encode())
            writer.write(encode("sync", FIRST_FRAME, 1).encode())
            mode = values.get("hostname", "idle")
            if mode.startswith(("flood:", "flood-clipboard:")):
                remaining = int(mode.split(":")[1])
                chunk = copied if mode.startswith("flood-clipboard:") else frame
                while remaining > 0:
                    writer.write(chunk)
                    remaining -= len(chunk)
                    await writer.drain()
            elif mode == "echo":
                while True:
                    instruction = await instructions.read()
                    if instruction.opcode == "key":
                        writer.write(encode("sync", instruction.args[0], 1).encode())
            else:
                while True:
                    try:
                        async with asyncio.timeout(5):
                            await instructions.read()
                    except TimeoutError:
                        writer.write(encode("nop").encode())
        except (StreamClosed, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
    print(f"ready {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


class BenchBroker:
    """Grants every token: the token names the daemon mode (the VNC ``hostname``)."""

    async def redeem(self, token: str, *, gateway_id: str) -> TunnelGrant:
        """A grant for the daemon mode ``token``."""
        return TunnelGrant(
            session_id=uuid.uuid4(),
            user_id=uuid.uuid4(),
            desktop_id=uuid.uuid4(),
            pool_id=uuid.uuid4(),
            target=DesktopTarget("vnc", token, 5900),
            user_display_name="bench",
            desktop_name="bench",
        )

    async def session_connected(self, session_id: uuid.UUID, *, connection_id: str) -> None:
        """Nothing to record."""

    async def first_frame(self, session_id: uuid.UUID) -> None:
        """Nothing to record."""

    async def heartbeat(
        self, gateway_id: str, counters: Mapping[uuid.UUID, TunnelCounters]
    ) -> None:
        """Nothing to renew."""

    async def session_ended(
        self, session_id: uuid.UUID, reason: SessionEndReason, counters: TunnelCounters
    ) -> None:
        """Nothing to close."""

    async def disconnect_requests(self, gateway_id: str) -> AsyncIterator[uuid.UUID]:
        """Never any."""
        await asyncio.Event().wait()
        yield uuid.uuid4()


class RecordingBenchBroker(BenchBroker):
    """Grants like :class:`BenchBroker`, each tunnel recorded (marks left under ``folder``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.counted: dict[uuid.UUID, int] = {}

    async def redeem(self, token: str, *, gateway_id: str) -> TunnelGrant:
        """A grant for the daemon mode ``token``, recorded."""
        grant = await super().redeem(token, gateway_id=gateway_id)
        return dataclasses.replace(grant, recording_id=uuid.uuid4())

    async def count_chunks(
        self, recording_id: uuid.UUID, first_index: int, sizes: Sequence[int]
    ) -> None:
        """Count the chunks the writer kept (in memory: no database here)."""
        self.counted[recording_id] = first_index + len(sizes)

    async def recording_ended(self, recording_id: uuid.UUID, *, truncated: bool) -> None:
        """Leave a mark that the recording ended, and one when it stopped before the tunnel."""
        if truncated:
            (self.folder / f"{recording_id}.truncated").touch()
        (self.folder / f"{recording_id}.ended").touch()


#: The client policy of ``deskpool-policy``: watermark on, clipboard limits (copying out cut at
#: 4 KiB, pasting at 1 KiB), no file transfer, no sound.
BENCH_POLICY = ClientPolicyChange(
    {
        "clipboard": {"to_desktop": {"max_bytes": 1024}, "to_browser": {"max_bytes": 4096}},
        "file_transfer": {"upload": False, "download": False},
        "audio": {"output": False},
        "watermark": {"enabled": True},
    }
).applied_to(DEFAULT_CLIENT_POLICY)


class PolicyBenchBroker(BenchBroker):
    """Grants like :class:`BenchBroker`, each under :data:`BENCH_POLICY`."""

    async def redeem(self, token: str, *, gateway_id: str) -> TunnelGrant:
        """A grant for the daemon mode ``token``, under the bench's client policy."""
        grant = await super().redeem(token, gateway_id=gateway_id)
        return dataclasses.replace(grant, client_policy=BENCH_POLICY)


async def serve_deskpool(
    port: int, daemon_port: int, recordings: str | None = None, *, policy: bool = False
) -> None:
    """The real gateway component.

    It records every tunnel into ``recordings`` when given, and grants :data:`BENCH_POLICY`
    with ``policy``.
    """
    from deskpool.host import bootstrap
    from deskpool.runtime import Runtime
    from deskpool_gateway import GatewayComponent

    environ = {
        "DATABASE_URL": "postgresql://bench@127.0.0.1:5432/unused",
        "KVSTORE_ADDR": "127.0.0.1:6379",
        "SECRETS_MASTER_KEY": "A" * 43 + "=",
        "GATEWAY_ADDR": f"127.0.0.1:{port}",
        "DESKTOPD_ADDRESS": f"127.0.0.1:{daemon_port}",
        "GATEWAY_MAX_TUNNELS": "100000",
        "LOG_LEVEL": "warn",
        "APP_ENV": "production",
    }
    if recordings is not None:
        environ["RECORDINGS_PATH"] = recordings
    process = bootstrap(environ, ["gateway"])
    runtime = Runtime(process.config, process.plugins)
    broker = BenchBroker() if recordings is None else RecordingBenchBroker(Path(recordings))
    if policy:
        broker = PolicyBenchBroker()
    component = GatewayComponent(runtime, broker_factory=lambda _: broker)
    await component.start()
    print(f"ready {component.bound.port}", flush=True)
    await asyncio.Event().wait()


async def serve_relay(port: int, daemon_port: int) -> None:
    """A plain TCP relay."""

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", daemon_port)
        await asyncio.gather(pump(reader, upstream_writer), pump(upstream_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
    print(f"ready {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    """``ROLE PORT [DAEMON_PORT [RECORDINGS_DIR]]``."""
    role, port = sys.argv[1], int(sys.argv[2])
    daemon_port = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    if role == "daemon":
        asyncio.run(serve_daemon(port))
    elif role == "deskpool":
        asyncio.run(serve_deskpool(port, daemon_port))
    elif role == "deskpool-policy":
        asyncio.run(serve_deskpool(port, daemon_port, policy=True))
    elif role == "deskpool-recorded":
        asyncio.run(serve_deskpool(port, daemon_port, sys.argv[4]))
    elif role == "relay":
        asyncio.run(serve_relay(port, daemon_port))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
