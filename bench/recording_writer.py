"""The recording writer alone: what one chunk costs, and the fastest stream one recorder keeps.

No gateway, no network, no database: the ``files`` recording store (real envelope encryption,
real files under ``--folder``, by default a temporary folder on the repository's disk) and the
gateway's real :class:`~deskpool_gateway.recording.Recorder`.

1. **Per chunk** (60 KiB of display stream, the recorder's chunk size): the wall and CPU time
   (the process's, every thread) of each step the recording path takes for a chunk, best and
   median of ``--repeats`` series of ``--chunks`` chunks: sealing it in memory; writing it the
   way the store did before segments (a file per chunk: create, write, ``fsync``, rename); and
   appending it to the recording's segment file in one :meth:`put_chunks` call of 1, 4, 16 or
   32 chunks (one ``fsync`` per call); and an ``asyncio.to_thread`` round trip (the handoff
   from the event loop, once per call).
2. **One recorder under a flood**: the recorder fed ``--flood-mb`` MB of display stream at each
   of ``--rates`` MB/s (60 KiB messages, the loop yielding after each, as the relay does after
   each send), its sink writing into the store through a thread (the platform broker's row
   update left out). It gives how much it recorded and whether it stopped (``truncated``: its
   queue filled), for two writers: one chunk per call (the writer before) and the recorder's
   own (every waiting chunk in one call). Both append to the segment file and sync each call;
   the file-per-chunk write of the layout before is in the first table.

Run from the repository root::

    .venv/bin/python bench/recording_writer.py            # about 30 s here
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
from deskpool_envelope.store import EnvelopeSecretStore
from deskpool_gateway import recording
from deskpool_gateway.recording import CHUNK_BYTES, Recorder
from deskpool_recording_files import SECRET_KIND, FileRecordingStore

BATCHES = (1, 4, 16, 32)


def display_stream(size: int) -> str:
    """``size`` characters of ``blob`` instructions (base64-like payload)."""
    payload = secrets.token_urlsafe(6000)[:8000]
    instruction = f"4.blob,1.1,{len(payload)}.{payload};"
    return (instruction * (size // len(instruction) + 1))[:size]


def per_chunk(seconds: Callable[[], tuple[float, float]], chunks: int) -> tuple[float, float]:
    """(wall, cpu) milliseconds per chunk of one series."""
    wall, cpu = seconds()
    return wall / chunks * 1000, cpu / chunks * 1000


def timed(work: Callable[[], None]) -> tuple[float, float]:
    """Wall and process CPU seconds of ``work``."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def put_file_per_chunk(store: FileRecordingStore, key: str, index: int, data: bytes) -> None:
    """The store's write before segments: a sealed file per chunk (create, fsync, rename)."""
    folder = store.root / key
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    sealed = store.secrets.encrypt(data, SecretContext.of(SECRET_KIND, key, f"chunk_{index}"))
    temporary = folder / f".{index:08d}.tmp"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(sealed)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, folder / f"{index:08d}.chunk")


def chunk_costs(store: FileRecordingStore, chunks: int, repeats: int) -> list[tuple[str, list]]:
    """Each step's (wall, cpu) ms per chunk, one pair per series."""
    data = display_stream(CHUNK_BYTES).encode()
    context = SecretContext.of(SECRET_KIND, str(uuid.uuid4()), "chunk_0")
    steps: list[tuple[str, Callable[[], None]]] = [
        ("seal in memory", lambda: [store.secrets.encrypt(data, context) for _ in range(chunks)])
    ]

    def file_per_chunk() -> None:
        key = str(uuid.uuid4())
        for index in range(chunks):
            put_file_per_chunk(store, key, index, data)
        store.delete(key)

    steps.append(("seal + a file per chunk (before)", file_per_chunk))
    for batch in BATCHES:

        def segments(batch: int = batch) -> None:
            key = str(uuid.uuid4())
            for first in range(0, chunks, batch):
                store.put_chunks(key, first, [data] * min(batch, chunks - first))
            store.delete(key)

        steps.append((f"seal + append, {batch} per call (one fsync)", segments))

    def handoff() -> None:
        async def run() -> None:
            for _ in range(chunks):
                await asyncio.to_thread(int)

        asyncio.run(run())

    steps.append(("asyncio.to_thread round trip", handoff))
    return [
        (name, [per_chunk(lambda w=work: timed(w), chunks) for _ in range(repeats)])
        for name, work in steps
    ]


class StoreSink:
    """The bench broker's recording calls: the store's write in a thread, no database."""

    def __init__(self, store: FileRecordingStore) -> None:
        self.store = store
        self.calls = 0
        self.recorded = 0

    async def record_chunks(
        self, recording_id: uuid.UUID, first_index: int, chunks: Sequence[bytes]
    ) -> None:
        """Write the chunks in a thread (one append, one sync)."""
        await asyncio.to_thread(self.store.put_chunks, str(recording_id), first_index, chunks)
        self.calls += 1
        self.recorded += sum(len(data) for data in chunks)

    async def recording_ended(self, recording_id: uuid.UUID, *, truncated: bool) -> None:
        """Nothing to mark."""


async def flood(
    store: FileRecordingStore, megabytes: int, rate: float, batch: int
) -> dict[str, float]:
    """Feed one recorder ``megabytes`` MB at ``rate`` MB/s at most; what it kept."""
    recording.BATCH_CHUNKS = batch
    sink = StoreSink(store)
    recorder = Recorder(uuid.uuid4(), sink, include_keys=False, chunk_seconds=2)
    message = display_stream(CHUNK_BYTES)
    count = megabytes * 1_000_000 // len(message)
    recorder.start()
    wall, cpu = time.perf_counter(), time.process_time()
    for number in range(count):
        recorder.output(message)
        ahead = wall + (number + 1) * len(message) / (rate * 1e6) - time.perf_counter()
        await asyncio.sleep(max(ahead, 0))
    fed = time.perf_counter() - wall
    await recorder.close()
    cpu = time.process_time() - cpu
    store.delete(str(recorder.recording_id))
    total = count * len(message)
    return {
        "fed MB/s": total / fed / 1e6,
        "recorded MB": sink.recorded / 1e6,
        "of MB": total / 1e6,
        "truncated": float(recorder.truncated),
        "calls": sink.calls,
        "cpu ms/MB": cpu * 1000 / (sink.recorded / 1e6) if sink.recorded else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=300, help="chunks per series")
    parser.add_argument("--repeats", type=int, default=5, help="series per step")
    parser.add_argument("--flood-mb", type=int, default=32, help="MB one recorder is fed")
    parser.add_argument("--rates", default="25,50,100,200,400,800", help="MB/s one recorder is fed")
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
        print(f"\n**One recorder fed {args.flood_mb} MB at a paced rate**\n")
        print(
            "| writer | asked, MB/s | fed, MB/s | recorded, MB | truncated | store calls "
            "(one sync each) | CPU ms per MB recorded (the feeding loop too) |"
        )
        print("|---|---|---|---|---|---|---|")
        rates = [float(rate) for rate in args.rates.split(",")]
        writers = (
            ("a chunk per call (as before)", 1),
            (
                f"the waiting chunks per call (at most {recording.BATCH_CHUNKS})",
                recording.BATCH_CHUNKS,
            ),
        )
        for label, batch in writers:
            for rate in rates:
                figures = asyncio.run(flood(store, args.flood_mb, rate, batch))
                print(
                    f"| {label} | {rate:.0f} | {figures['fed MB/s']:.0f} "
                    f"| {figures['recorded MB']:.1f} of {figures['of MB']:.1f} "
                    f"| {'yes' if figures['truncated'] else 'no'} | {figures['calls']:.0f} "
                    f"| {figures['cpu ms/MB']:.2f} |"
                )
        print(f"load average after: {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
