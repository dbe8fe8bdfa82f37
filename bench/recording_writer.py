"""The recording writer alone: what a chunk costs the store, and the fastest stream it keeps.

No gateway, no network, no database: the ``files`` recording store (real envelope encryption,
real files under ``--folder``, by default a temporary folder on the repository's disk), and the
gateway's real recording writer process fed through its real ring.

1. **Per chunk** (60 KiB of display stream, the writer's chunk size): the wall and CPU time of
   each step the writer takes for a chunk, best and median of ``--repeats`` series of
   ``--chunks`` chunks: sealing it in memory; sealing and appending it in one
   :meth:`write_chunks` call of 1, 4, 16 or 32 chunks; and the same with a ``sync`` (one
   ``fsync``) after every call, as a recording that closes after each.
2. **The writer process under a flood**: ``--tunnels`` recordings fed ``--flood-mb`` MB in all
   at each of ``--rates`` MB/s (the relay's 64 KiB messages, round robin, the loop yielding
   after each as the relay does after each send), through one :class:`RecordingWriter` exactly
   as a gateway keeps it (a lap of its ring recorded first, not timed). It gives how much was
   kept and whether a recording stopped (``truncated``: the writer fell more than its share of
   the ring behind), the CPU time of the hand-overs per MB (:meth:`RecordingChannel.put`,
   timed around each call: what the relay's loop spends on recording, the copy into the ring
   and the message) and the writer process's CPU (user and system) per MB.

Run from the repository root::

    .venv/bin/python bench/recording_writer.py            # about 15 s here
    .venv/bin/python bench/recording_writer.py --repeats 5 --chunks 400 --rates 50,100
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from deskpool.secrets import SecretContext
from deskpool.testing.processes import until
from deskpool_envelope.store import EnvelopeSecretStore
from deskpool_gateway.recording_process import CHUNK_BYTES
from deskpool_gateway.recording_writer import RING_BYTES, RecordingChannel, RecordingWriter
from deskpool_recording_files import SECRET_KIND, FileRecordingStore

BATCHES = (1, 4, 16, 32)
#: What the relay hands the recorder at a time under a flood (one read of the daemon).
MESSAGE_BYTES = 65536
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def display_stream(size: int) -> str:
    """``size`` characters of ``blob`` instructions (base64-like payload)."""
    payload = secrets.token_urlsafe(6000)[:8000]
    instruction = f"4.blob,1.1,{len(payload)}.{payload};"
    return (instruction * (size // len(instruction) + 1))[:size]


def timed(work: Callable[[], None]) -> tuple[float, float]:
    """Wall and process CPU seconds of ``work``."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def chunk_costs(store: FileRecordingStore, chunks: int, repeats: int) -> list[tuple[str, list]]:
    """Each step's (wall, cpu) ms per chunk, one pair per series."""
    data = display_stream(CHUNK_BYTES).encode()
    context = SecretContext.of(SECRET_KIND, str(uuid.uuid4()), "chunk_0")
    steps: list[tuple[str, Callable[[], None]]] = [
        ("seal in memory", lambda: [store.secrets.encrypt(data, context) for _ in range(chunks)])
    ]
    for synced in (False, True):
        for batch in BATCHES:

            def append(batch: int = batch, synced: bool = synced) -> None:
                key = str(uuid.uuid4())
                for first in range(0, chunks, batch):
                    store.write_chunks(key, first, [data] * min(batch, chunks - first))
                    if synced:
                        store.sync(key)
                store.delete(key)

            label = "one fsync per call" if synced else "no fsync"
            steps.append((f"seal + append, {batch} per call ({label})", append))
    series = []
    for name, work in steps:
        pairs = []
        for _ in range(repeats):
            wall, cpu = timed(work)
            pairs.append((wall / chunks * 1000, cpu / chunks * 1000))
        series.append((name, pairs))
    return series


class CountingSink:
    """The broker's recording calls without a database: kept chunks counted in memory."""

    def __init__(self) -> None:
        self.counted: dict[uuid.UUID, list[int]] = {}

    async def count_chunks(
        self, recording_id: uuid.UUID, first_index: int, sizes: Sequence[int]
    ) -> None:
        """Keep the sizes (in order)."""
        kept = self.counted.setdefault(recording_id, [])
        assert first_index == len(kept)
        kept.extend(sizes)

    async def recording_ended(self, recording_id: uuid.UUID, *, truncated: bool) -> None:
        """Nothing to mark."""


def process_ticks(pid: int) -> tuple[int, int]:
    """User and system clock ticks ``pid`` used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


async def feed(
    channels: Sequence[RecordingChannel], megabytes: int, rate: float
) -> tuple[float, float]:
    """Hand ``megabytes`` MB round robin at ``rate`` MB/s at most.

    :returns: MB/s fed, and the CPU seconds of the hand-overs themselves (what the relay's
        loop spends in :meth:`RecordingChannel.put`).
    """
    message = display_stream(MESSAGE_BYTES).encode()
    count = megabytes * 1_000_000 // len(message)
    wall = time.perf_counter()
    handing = 0.0
    for number in range(count):
        before = time.thread_time()
        channels[number % len(channels)].put(message)
        handing += time.thread_time() - before
        ahead = wall + (number + 1) * len(message) / (rate * 1e6) - time.perf_counter()
        await asyncio.sleep(max(ahead, 0))
    fed = time.perf_counter() - wall
    return count * len(message) / fed / 1e6, handing


async def flood(
    writer: RecordingWriter, tunnels: int, megabytes: int, rate: float
) -> dict[str, float]:
    """Feed ``tunnels`` recordings ``megabytes`` MB in all at ``rate`` MB/s; what was kept."""
    sink = CountingSink()
    channels = [await writer.open(uuid.uuid4(), sink) for _ in range(tunnels)]
    pid = writer.pid
    assert pid is not None
    user, system = process_ticks(pid)
    fed, handing = await feed(channels, megabytes, rate)
    for channel in channels:
        await channel.close()
    user_after, system_after = process_ticks(pid)
    total = sum(channel.handed for channel in channels)
    kept = sum(sum(sink.counted.get(channel.recording_id, [])) for channel in channels)
    return {
        "fed": fed,
        "kept": kept / 1e6,
        "of": total / 1e6,
        "truncated": float(sum(channel.truncated for channel in channels)),
        "relay": handing * 1000 / (total / 1e6),
        "user": (user_after - user) / CLOCK_TICKS * 1000 / (total / 1e6),
        "system": (system_after - system) / CLOCK_TICKS * 1000 / (total / 1e6),
    }


async def floods(folder: Path, args: argparse.Namespace) -> list[tuple[float, dict[str, float]]]:
    """One writer, as a gateway keeps it: a lap of its ring first, then a flood per rate."""
    environ = {
        "DATABASE_URL": "postgresql://bench@127.0.0.1:5432/unused",
        "KVSTORE_ADDR": "127.0.0.1:6379",
        "SECRETS_MASTER_KEY": "B" * 43 + "=",
        "RECORDINGS_PATH": str(folder),
        "LOG_LEVEL": "warn",
        "APP_ENV": "production",
    }
    writer = RecordingWriter(environ)
    try:
        warm = await writer.open(uuid.uuid4(), CountingSink())

        async def ready() -> bool:
            return writer.ready

        await until(ready, "the recording writer is ready")
        await feed([warm], RING_BYTES // 1_000_000 + 1, 400)
        await warm.close()
        return [
            (rate, await flood(writer, args.tunnels, args.flood_mb, rate))
            for rate in [float(rate) for rate in args.rates.split(",")]
        ]
    finally:
        await writer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--chunks", type=int, default=300, help="chunks per series")
    parser.add_argument("--repeats", type=int, default=5, help="series per step")
    parser.add_argument("--tunnels", type=int, default=4, help="recordings fed at once")
    parser.add_argument("--flood-mb", type=int, default=128, help="MB fed, all recordings")
    parser.add_argument("--rates", default="25,50,100,200,400,800", help="MB/s fed in all")
    parser.add_argument("--folder", default=None, help="where the files go (a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-recording-writer-", dir=args.folder or ".") as d:
        store = FileRecordingStore(Path(d), EnvelopeSecretStore(secrets.token_bytes(32)))
        print(
            f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
            file=sys.stderr,
        )
        print(f"**One 60 KiB chunk ({args.repeats} series of {args.chunks} chunks)**\n")
        print("| step | wall ms per chunk (best / median) | CPU ms per chunk (best / median) |")
        print("|---|---|---|")
        for name, series in chunk_costs(store, args.chunks, args.repeats):
            walls, cpus = [w for w, _ in series], [c for _, c in series]
            print(
                f"| {name} | {min(walls):.3f} / {statistics.median(walls):.3f} "
                f"| {min(cpus):.3f} / {statistics.median(cpus):.3f} |"
            )
        print(
            f"\n**The writer process: {args.tunnels} recordings fed {args.flood_mb} MB in all "
            "at a paced rate**\n"
        )
        print(
            "| asked, MB/s | fed, MB/s | kept, MB | truncated | hand-over CPU per MB, ms (in the "
            "relay's loop) | writer CPU per MB, ms (user + system) |"
        )
        print("|---|---|---|---|---|---|")
        for rate, figures in asyncio.run(floods(Path(d), args)):
            print(
                f"| {rate:.0f} | {figures['fed']:.0f} | {figures['kept']:.1f} of "
                f"{figures['of']:.1f} | {figures['truncated']:.0f} | {figures['relay']:.3f} "
                f"| {figures['user'] + figures['system']:.2f} "
                f"({figures['user']:.2f} + {figures['system']:.2f}) |"
            )
        print(f"load average after: {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
