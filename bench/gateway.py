"""The gateway's relay next to guacamole-lite and a plain TCP relay, on the same daemon stream.

Three relays stand between a client and the same fake guacd (``bench/gateway_servers.py``),
each in its own process: deskpool's gateway (the real component), guacamole-lite (the npm
package, installed into a temporary folder with npm, on node) and a plain asyncio TCP relay. In
alternated runs (the order rotates every run) the client measures:

- **throughput**: ``--tunnels`` concurrent tunnels each receive ``--megabytes`` of a realistic
  guacd display stream (PNG ``img`` streams in 6048-byte blobs and small drawing instructions);
  megabytes per second over the wall time, from the first byte after the handshake to the last;
- **latency**: ``--round-trips`` sequential round trips (a ``key`` to the daemon, its ``sync``
  answer back) over one tunnel; the p50 and p99 round-trip time, and what each relay adds over
  the plain relay;
- **memory**: ``--idle`` idle tunnels (the daemon sends ``nop`` every 5 s, the client every 4 s)
  opened to deskpool and to guacamole-lite; the relay process's RSS growth per tunnel.
- **recording**: the throughput above through deskpool's gateway with recording off and with
  it on (a second gateway process recording every tunnel into sealed chunk files through its
  recording writer process, issue 26), in ``--recording-runs`` alternated rounds under the
  harness's load monitor (``harness.py``: starved runs are refused), after one small recorded
  tunnel that starts the writer; the writer's CPU per MB, what the recorded runs wrote and
  whether any recording stopped early (``truncated``: the writer fell behind by more than its
  share of the ring, and the recording gave up rather than slow the relay) are printed with
  the figures. ``--recording-only`` runs just this (no node needed).
- **client policy**: the throughput above through deskpool's gateway with a client policy on
  (watermark, clipboard limits, no files, no sound: issue 36) and with the default policy, on a
  display stream with an 8 KiB clipboard copy after every frame, in ``--policy-runs`` alternated
  rounds. ``--policy-only`` runs just this.

Run from the repository root (node and npm on the PATH)::

    .venv/bin/python bench/gateway.py [--runs 5] [--tunnels 4] [--megabytes 32] [--idle 1000]
    .venv/bin/python bench/gateway.py --recording-only [--recording-runs 5]
    .venv/bin/python bench/gateway.py --policy-only [--policy-runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from harness import (
    CLOCK_TICKS,
    Figure,
    LoadMonitor,
    Run,
    Series,
    arguments,
    descendants,
    print_run,
    read_processes,
    rounds,
)

from deskpool.guacamole import encode
from deskpool.guacamole.handshake import ClientInfo, perform_handshake
from deskpool.guacamole.stream import InstructionReader
from deskpool.testing.processes import until
from deskpool_recording_files import SEGMENTS

HERE = Path(__file__).resolve().parent
LITE_KEY = b"MySuperSecretKeyForParamsToken12"
LITE_SERVER = """
const GuacamoleLite = require('guacamole-lite');
const [port, guacdPort] = process.argv.slice(2).map(Number);
const lite = new GuacamoleLite({host: '127.0.0.1', port}, {host: '127.0.0.1', port: guacdPort}, {
    crypt: {cypher: 'AES-256-CBC', key: KEY},
    log: {level: 0},
});
process.on('SIGUSR2', () => global.gc());
const listening = lite.webSocketServer;
listening.on('listening', () => console.log(`ready ${listening.address().port}`));
""".replace("KEY", json.dumps(LITE_KEY.decode()))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def lite_token(mode: str) -> str:
    """A guacamole-lite token: AES-256-CBC of the connection, as its Crypt class reads it."""
    iv = os.urandom(16)
    body = {"connection": {"type": "vnc", "settings": {"hostname": mode, "port": "5900"}}}
    padder = padding.PKCS7(128).padder()
    plain = padder.update(json.dumps(body).encode()) + padder.finalize()
    encryptor = Cipher(algorithms.AES(LITE_KEY), modes.CBC(iv)).encryptor()
    value = encryptor.update(plain) + encryptor.finalize()
    data = {"iv": base64.b64encode(iv).decode(), "value": base64.b64encode(value).decode()}
    return base64.b64encode(json.dumps(data).encode()).decode()


class Relay:
    """One relay under test: how to start it and how a client opens a tunnel through it."""

    def __init__(self, name: str, command: list[str], kind: str) -> None:
        self.name, self.command, self.kind = name, command, kind
        self.process: subprocess.Popen[str] | None = None
        #: The port it listens on, from its ``ready PORT`` line (it binds port 0).
        self.port = 0

    def start(self, cwd: Path | None = None) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{self.kind}-", suffix=".log")  # noqa: SIM115
        self.process = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            cwd=cwd,
            env={**os.environ},
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("ready "):
            raise RuntimeError(f"{self.name} did not start: {line!r}")
        self.port = int(line.split()[1])

    def check_alive(self) -> None:
        """Raise with the process's error output if it died."""
        assert self.process is not None
        if self.process.poll() is not None:
            self.log.seek(0)
            errors = self.log.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"{self.name} exited ({self.process.returncode}): {errors}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def settled_rss(self) -> int:
        """RSS in KiB, after a full garbage collection where the runtime has one to ask for."""
        assert self.process is not None
        self.check_alive()
        if self.kind == "lite":
            self.process.send_signal(signal.SIGUSR2)
            time.sleep(1)
            self.check_alive()
        return rss_kib(self.process.pid)

    def url(self, mode: str) -> str:
        if self.kind == "deskpool":
            return f"ws://127.0.0.1:{self.port}/websocket-tunnel?token={mode}"
        token = lite_token(mode)
        return f"ws://127.0.0.1:{self.port}/?token={token}"


async def wait_listening(port: int) -> None:
    for _ in range(200):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


# ------------------------------------------------------------------------------ one tunnel
async def ws_flood(
    session: aiohttp.ClientSession, relay: Relay, size: int, mode: str = "flood"
) -> tuple[int, float, float]:
    """Bytes received, first and last arrival times."""
    received, first, last = 0, 0.0, 0.0
    async with session.ws_connect(relay.url(f"{mode}:{size}"), protocols=("guacamole",)) as ws:
        async for message in ws:
            if message.type is not aiohttp.WSMsgType.TEXT:
                break
            data: str = message.data
            if data.startswith("0."):
                continue
            now = time.perf_counter()
            first = first or now
            last = now
            received += len(data)
    return received, first, last


async def tcp_flood(relay: Relay, size: int) -> tuple[int, float, float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
    instructions = InstructionReader(reader)
    await perform_handshake(
        instructions, writer, "vnc", {"hostname": f"flood:{size}"}, ClientInfo(), within=10
    )
    received = len(instructions.detach())
    first = time.perf_counter()
    last = first
    while data := await reader.read(262144):
        received += len(data)
        last = time.perf_counter()
    writer.close()
    return received, first, last


async def throughput(
    relay: Relay, tunnels: int, megabytes: int, mode: str = "flood", tolerance: float = 0.99
) -> float:
    """Megabytes per second through ``tunnels`` concurrent tunnels (daemon mode ``mode``)."""
    size = megabytes * 1_000_000
    async with aiohttp.ClientSession() as session:
        if relay.kind == "tcp":
            results = await asyncio.gather(*(tcp_flood(relay, size) for _ in range(tunnels)))
        else:
            results = await asyncio.gather(
                *(ws_flood(session, relay, size, mode) for _ in range(tunnels))
            )
    total = sum(r[0] for r in results)
    if total < tunnels * size * tolerance:
        raise RuntimeError(f"{relay.name}: received {total} of {tunnels * size} bytes")
    span = max(r[2] for r in results) - min(r[1] for r in results)
    return total / span / 1e6


async def latency(relays: list[Relay], count: int) -> dict[str, list[float]]:
    """Round-trip times in milliseconds through each relay, interleaved trip by trip.

    The order rotates every round, so that a burst of load on the machine hits every relay alike.
    """
    times: dict[str, list[float]] = {relay.name: [] for relay in relays}
    trips: dict[str, Callable[[int], Awaitable[None]]] = {}
    async with contextlib.AsyncExitStack() as stack:
        session = await stack.enter_async_context(aiohttp.ClientSession())
        for relay in relays:
            if relay.kind == "tcp":
                reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
                stack.callback(writer.close)
                instructions = InstructionReader(reader)
                target = {"hostname": "echo"}
                await perform_handshake(
                    instructions, writer, "vnc", target, ClientInfo(), within=10
                )
                while (await instructions.read()).opcode != "sync":  # the first frame
                    pass

                async def tcp_trip(
                    n: int,
                    writer: asyncio.StreamWriter = writer,
                    reader: InstructionReader = instructions,
                ) -> None:
                    writer.write(encode("key", n, 1).encode())
                    while (await reader.read()).opcode != "sync":
                        pass

                trips[relay.name] = tcp_trip
            else:
                ws = await stack.enter_async_context(
                    session.ws_connect(relay.url("echo"), protocols=("guacamole",))
                )
                await ws.receive()  # the tunnel's UUID or connection id: the handshake is done

                async def ws_trip(n: int, ws: aiohttp.ClientWebSocketResponse = ws) -> None:
                    expected = encode("sync", n, 1)
                    await ws.send_str(encode("key", n, 1))
                    while expected not in (await ws.receive()).data:
                        pass

                trips[relay.name] = ws_trip
        names = list(trips)
        for n in range(count + 50):
            shift = n % len(names)
            for name in names[shift:] + names[:shift]:
                started = time.perf_counter()
                await trips[name](n)
                if n >= 50:
                    times[name].append((time.perf_counter() - started) * 1000)
    return times


async def idle_memory(relay: Relay, count: int) -> float:
    """KiB of the relay process's RSS per idle tunnel, at ``count`` tunnels."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(2):  # warm up: imports, allocator arenas
            warm = [
                await session.ws_connect(relay.url("idle"), protocols=("guacamole",))
                for _ in range(20)
            ]
            for ws in warm:
                await ws.receive()
                await ws.close()
        await asyncio.sleep(1)
        before = relay.settled_rss()
        sockets: list[aiohttp.ClientWebSocketResponse] = []
        semaphore = asyncio.Semaphore(50)

        async def open_one() -> None:
            async with semaphore:
                ws = await session.ws_connect(relay.url("idle"), protocols=("guacamole",))
                await ws.receive()
                sockets.append(ws)

        await asyncio.gather(*(open_one() for _ in range(count)))

        async def keep_alive() -> None:
            while True:
                await asyncio.sleep(4)
                for ws in sockets:
                    await ws.send_str(encode("nop"))

        alive = asyncio.create_task(keep_alive())
        await asyncio.sleep(3)
        after = relay.settled_rss()
        alive.cancel()
        await asyncio.gather(*(ws.close() for ws in sockets))
    return (after - before) / count


# ------------------------------------------------------------------------------ the run
def summary(values: list[float]) -> str:
    return f"{min(values):8.1f} {statistics.median(values):8.1f} {max(values):8.1f}"


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * q), len(ordered) - 1)]


async def run(args: argparse.Namespace, relays: list[Relay]) -> None:
    for relay in relays:
        await wait_listening(relay.port)
    mbps: dict[str, list[float]] = {r.name: [] for r in relays}
    p50: dict[str, list[float]] = {r.name: [] for r in relays}
    p99: dict[str, list[float]] = {r.name: [] for r in relays}
    for number in range(args.runs):
        order = relays[number % len(relays) :] + relays[: number % len(relays)]
        for relay in order:
            mbps[relay.name].append(await throughput(relay, args.tunnels, args.megabytes))
            relay.check_alive()
        for name, times in (await latency(order, args.round_trips)).items():
            p50[name].append(p(times, 0.50))
            p99[name].append(p(times, 0.99))
        print(f"run {number + 1}/{args.runs} done", file=sys.stderr, flush=True)
    print(f"\nthroughput, MB/s ({args.tunnels} tunnels x {args.megabytes} MB; min median max)")
    for relay in relays:
        print(f"  {relay.name:16} {summary(mbps[relay.name])}")
    ratios = [d / g for d, g in zip(mbps["deskpool"], mbps["guacamole-lite"], strict=True)]
    print(f"  deskpool / guacamole-lite, per run: {summary(ratios)}")
    print(f"\nround trip, ms ({args.round_trips} per run; min median max of each run's p50 / p99)")
    for relay in relays:
        print(f"  {relay.name:16} p50 {summary(p50[relay.name])}   p99 {summary(p99[relay.name])}")
    for name in ("deskpool", "guacamole-lite"):
        added = [a - b for a, b in zip(p99[name], p99["plain relay"], strict=True)]
        print(f"  {name} p99 minus the plain relay's: {summary(added)}")
    if args.idle:
        print(f"\nmemory per idle tunnel, KiB (RSS growth at {args.idle} tunnels)")
        for relay in relays:
            if relay.kind != "tcp":
                print(f"  {relay.name:16} {await idle_memory(relay, args.idle):8.1f}")


def cpu_seconds(relay: Relay) -> float:
    """The CPU time the relay's process used so far (all its threads)."""
    assert relay.process is not None
    return read_processes()[relay.process.pid].ticks / CLOCK_TICKS


def writer_cpu_seconds(relay: Relay) -> float:
    """The CPU time the processes the relay started (its recording writer) used so far."""
    assert relay.process is not None
    processes = read_processes()
    below = descendants(processes, relay.process.pid) - {relay.process.pid}
    return sum(processes[pid].ticks for pid in below) / CLOCK_TICKS


def sealed_size(folder: Path) -> int:
    """The bytes of the sealed chunk files under ``folder``.

    Segment files, or a file per chunk in the layout before them.
    """
    return sum(
        path.stat().st_size for pattern in ("*.chunk", SEGMENTS) for path in folder.rglob(pattern)
    )


def ended(folder: Path) -> int:
    """How many recordings the gateway ended (each leaves an ``.ended`` mark)."""
    return len(list(folder.glob("*.ended")))


async def settled(folder: Path, recordings: int) -> None:
    """Wait until the gateway ended the ``recordings``.

    A recording ends once its writer wrote and synced its last chunks, after its tunnel closed.
    """

    async def done() -> bool:
        return await asyncio.to_thread(ended, folder) >= recordings

    await until(done, "the gateway ended its recordings", seconds=300)


def recorded_bytes(folder: Path) -> tuple[int, int]:
    """Sealed bytes written under ``folder`` and the recordings marked truncated; then empty it."""
    written = sealed_size(folder)
    truncated = len(list(folder.glob("*.truncated")))
    for path in folder.iterdir():
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    return written, truncated


async def recording_overhead(
    args: argparse.Namespace, on: Relay, off: Relay, folder: Path
) -> Series:
    """Throughput through the gateway recording every tunnel and not, rounds alternated."""
    for relay in (on, off):
        await wait_listening(relay.port)
    series = Series(
        f"deskpool gateway throughput with recording on and off "
        f"({args.tunnels} tunnels x {args.megabytes} MB)",
        sides=("recording on", "recording off"),
        figures=(
            Figure("mbps", "throughput, MB/s", 1, ratio=True),
            Figure("cpu", "gateway CPU per MB relayed, ms", 2, ratio=True),
            Figure("writer", "recording writer CPU per MB relayed, ms", 2),
            Figure("sealed", "sealed on disk, MB", 1),
            Figure("truncated", "recordings truncated", 0),
        ),
        keep_starved=args.keep_starved,
    )
    # A gateway starts its recording writer with its first recorded tunnel: one small recorded
    # tunnel first, so that the rounds measure a gateway that has been recording, not its start.
    await throughput(on, 1, 1)
    await settled(folder, 1)
    recorded_bytes(folder)
    for number, side in rounds(args.recording_runs, series.sides):
        relay = on if side == "recording on" else off
        monitor = LoadMonitor()
        cpu, writer_cpu = cpu_seconds(relay), writer_cpu_seconds(relay)
        monitor.start()
        mbps = await throughput(relay, args.tunnels, args.megabytes)
        load = monitor.stop()
        relay.check_alive()
        if relay is on:
            await settled(folder, args.tunnels)  # the last chunks' writes are its cost too
        cpu = cpu_seconds(relay) - cpu
        relayed = args.tunnels * args.megabytes
        figures = {"mbps": mbps, "cpu": cpu * 1000 / relayed}
        if relay is on:
            sealed, truncated = recorded_bytes(folder)
            writer_cpu = writer_cpu_seconds(relay) - writer_cpu
            figures |= {
                "sealed": sealed / 1e6,
                "truncated": float(truncated),
                "writer": writer_cpu * 1000 / relayed,
            }
        print_run(
            series, Run(side, number, figures, load), lambda line: print(line, file=sys.stderr)
        )
    return series


async def policy_overhead(args: argparse.Namespace, on: Relay, off: Relay) -> Series:
    """Throughput through the gateway with a client policy on and with the default, alternated.

    The daemon's display stream carries an 8 KiB clipboard copy after every frame (~57 KB), so
    the guard parses every message on both sides and cuts every copy on the policy side.
    """
    for relay in (on, off):
        await wait_listening(relay.port)
    series = Series(
        f"deskpool gateway throughput with a client policy on (watermark, clipboard limits, "
        f"no files, no sound) and off ({args.tunnels} tunnels x {args.megabytes} MB, "
        f"an 8 KiB copy every frame)",
        sides=("policy on", "policy off"),
        figures=(
            Figure("mbps", "throughput, MB/s", 1, ratio=True),
            Figure("cpu", "gateway CPU per MB relayed, ms", 2, ratio=True),
        ),
        keep_starved=args.keep_starved,
    )
    for number, side in rounds(args.policy_runs, series.sides):
        relay = on if side == "policy on" else off
        monitor = LoadMonitor()
        cpu = cpu_seconds(relay)
        monitor.start()
        # The policy side cuts each copy to 4 KiB: it delivers about 5 % less.
        mbps = await throughput(relay, args.tunnels, args.megabytes, "flood-clipboard", 0.9)
        load = monitor.stop()
        relay.check_alive()
        cpu = cpu_seconds(relay) - cpu
        figures = {"mbps": mbps, "cpu": cpu * 1000 / (args.tunnels * args.megabytes)}
        print_run(
            series, Run(side, number, figures, load), lambda line: print(line, file=sys.stderr)
        )
    return series


def install_guacamole_lite(folder: Path) -> None:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise SystemExit("node and npm are needed for the guacamole-lite peer")
    subprocess.run([npm, "init", "-y"], cwd=folder, check=True, capture_output=True)
    subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "guacamole-lite"],
        cwd=folder,
        check=True,
        capture_output=True,
    )
    (folder / "server.js").write_text(LITE_SERVER)
    version = json.loads((folder / "node_modules/guacamole-lite/package.json").read_text())
    node = subprocess.check_output(["node", "--version"], text=True).strip()
    print(f"guacamole-lite {version['version']} on node {node}")


def main() -> None:
    parser = arguments(__doc__, "rounds of the relay comparison")
    parser.add_argument("--tunnels", type=int, default=4)
    parser.add_argument("--megabytes", type=int, default=32)
    parser.add_argument("--round-trips", type=int, default=1000)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--recording-runs", type=int, default=5, help="rounds of recording on/off")
    parser.add_argument("--recording-only", action="store_true")
    parser.add_argument("--policy-runs", type=int, default=5, help="rounds of client policy on/off")
    parser.add_argument("--policy-only", action="store_true")
    args = parser.parse_args()
    python = sys.executable
    servers = str(HERE / "gateway_servers.py")
    with (
        tempfile.TemporaryDirectory(prefix="bench-guacamole-lite-") as folder,
        tempfile.TemporaryDirectory(prefix="bench-recordings-") as recordings,
    ):
        partial = args.recording_only or args.policy_only
        if not partial:
            install_guacamole_lite(Path(folder))
        daemon = Relay("daemon", [python, servers, "daemon", "0"], "")
        started: list[Relay] = []
        try:
            daemon.start()
            started.append(daemon)
            upstream = str(daemon.port)
            deskpool = Relay("deskpool", [python, servers, "deskpool", "0", upstream], "deskpool")
            recorded = Relay(
                "deskpool recording",
                [python, servers, "deskpool-recorded", "0", upstream, recordings],
                "deskpool",
            )
            relays = [
                deskpool,
                Relay(
                    "guacamole-lite", ["node", "--expose-gc", "server.js", "0", upstream], "lite"
                ),
                Relay("plain relay", [python, servers, "relay", "0", upstream], "tcp"),
            ]
            policed = Relay(
                "deskpool client policy",
                [python, servers, "deskpool-policy", "0", upstream],
                "deskpool",
            )
            if partial:
                relays = [deskpool]
            extra = [policed] if args.policy_only else [recorded, policed]
            for relay in [*relays, *extra]:
                relay.start(cwd=Path(folder) if relay.kind == "lite" else None)
                started.append(relay)
            if not partial:
                asyncio.run(run(args, relays))
            if args.policy_runs:
                series = asyncio.run(policy_overhead(args, policed, deskpool))
                print()
                print(series.table())
            if args.recording_runs and not args.policy_only:
                series = asyncio.run(recording_overhead(args, recorded, deskpool, Path(recordings)))
                print()
                print(series.table())
        finally:
            for relay in reversed(started):
                relay.stop()


if __name__ == "__main__":
    main()
