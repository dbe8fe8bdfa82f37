"""The gateway's recording writer process, for real: a recorder's stream reaches the row whole.

Each test starts the real writer process (the ``files`` store, the envelope encryption) from a
runtime's configuration and counts through the platform's broker in PostgreSQL, as a gateway
does; what was kept is read back through the recordings service, as a download does.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path

import pytest
from tests.support.recordings import (
    new_recording,
    until_ready,
)

from deskpool.guacamole import InstructionParser
from deskpool.recordings import service
from deskpool.runtime import Runtime
from deskpool.sessions.broker import PlatformSessionBroker
from deskpool.testing.processes import until
from deskpool.testing.pytest_plugin import opened_runtime
from deskpool_gateway.recording import Recorder
from deskpool_gateway.recording_process import CHUNK_BYTES
from deskpool_gateway.recording_writer import RecordingWriter
from deskpool_recording_files import SEGMENTS

FRAME = "3.img,1.1,2.14,1.0,9.image/png,1.0,1.0;4.sync,4.1000,1.1;"


async def _played(runtime: Runtime, recording_id: uuid.UUID) -> bytes:
    recording = await service.get_recording(runtime, recording_id)
    return b"".join([part async for part in service.chunks(runtime, recording, None)])


async def test_output_and_keys_are_one_stream_cut_in_chunks_counted_and_ended(
    recordings_environ: dict[str, str],
) -> None:
    async with opened_runtime(recordings_environ, ["gateway"]) as runtime:
        row = await new_recording(runtime, "wr-01")
        writer = RecordingWriter(runtime.config.environment(), count_interval=0.1)
        try:
            recorder = Recorder(
                await writer.open(row.id, PlatformSessionBroker(runtime)), include_keys=True
            )
            recorder.output(FRAME.encode())
            recorder.input("5.mouse,1.1,1.2,1.0;3.key,2.65,1.1;")
            blob = "4.blob,1.1,8000." + "A" * 8000 + ";"
            recorder.output((blob * 10).encode())  # more than a chunk holds: cut in two
            recorder.output(FRAME.encode())
            await recorder.close()
        finally:
            await writer.stop()
        kept = await service.get_recording(runtime, row.id)
        assert not kept.truncated
        assert kept.ended_at is not None
        stream = (await _played(runtime, row.id)).decode()
        assert len(stream) == kept.size_bytes
        assert kept.chunk_sizes == (CHUNK_BYTES, len(stream) - CHUNK_BYTES)
        instructions = InstructionParser().feed_instructions(stream)
        opcodes = ["img", "sync", "key", *["blob"] * 10, "img", "sync"]
        assert [instruction.opcode for instruction in instructions] == opcodes
        key = instructions[2]
        assert key.args[:2] == ("65", "1")
        assert key.args[2].isdigit()


async def test_without_include_keys_no_input_is_recorded(
    recordings_environ: dict[str, str],
) -> None:
    async with opened_runtime(recordings_environ, ["gateway"]) as runtime:
        row = await new_recording(runtime, "wr-02")
        writer = RecordingWriter(runtime.config.environment())
        try:
            recorder = Recorder(
                await writer.open(row.id, PlatformSessionBroker(runtime)), include_keys=False
            )
            recorder.output(b"4.sync,1.1,1.1;")
            recorder.input("3.key,2.65,1.1;")
            await recorder.close()
        finally:
            await writer.stop()
        assert await _played(runtime, row.id) == b"4.sync,1.1,1.1;"


async def test_output_waits_no_longer_than_the_chunk_interval_to_be_kept_and_counted(
    recordings_environ: dict[str, str],
) -> None:
    environ = {**recordings_environ, "RECORDINGS_CHUNK_SECONDS": "300ms"}
    async with opened_runtime(environ, ["gateway"]) as runtime:
        row = await new_recording(runtime, "wr-03")
        writer = RecordingWriter(runtime.config.environment(), count_interval=0.2)
        try:
            channel = await writer.open(row.id, PlatformSessionBroker(runtime))
            await until_ready(writer)  # the bound below is not the writer process's start
            Recorder(channel, include_keys=False).output(FRAME.encode())

            async def counted() -> bool:
                return (await service.get_recording(runtime, row.id)).chunks == 1

            # The chunk interval, the writer's sync (a second at most) and a count: no close.
            await until(counted, "the waiting output counted", seconds=10)
            assert await _played(runtime, row.id) == FRAME.encode()
            await channel.close()
        finally:
            await writer.stop()


async def test_a_killed_writer_ends_its_recordings_truncated_and_a_new_one_records(
    recordings_environ: dict[str, str],
) -> None:
    async with opened_runtime(recordings_environ, ["gateway"]) as runtime:
        broker = PlatformSessionBroker(runtime)
        first, second = await new_recording(runtime, "wr-04"), await new_recording(runtime, "wr-04")
        writer = RecordingWriter(runtime.config.environment(), restart_pause=0)
        try:
            recorder = Recorder(await writer.open(first.id, broker), include_keys=False)
            await until_ready(writer)
            recorder.output(FRAME.encode())
            await recorder.channel.close()  # kept and counted: that part survives
            again = Recorder(await writer.open(second.id, broker), include_keys=False)
            pid = writer.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)

            async def stopped() -> bool:
                return again.stopped

            await until(stopped, "the recording stopped with its writer")
            await again.close()
            assert (await service.get_recording(runtime, second.id)).truncated
            # The next recording starts a new writer.
            third = await new_recording(runtime, "wr-04")
            recorder = Recorder(await writer.open(third.id, broker), include_keys=False)
            assert writer.pid not in (None, pid)
            recorder.output(FRAME.encode())
            await recorder.close()
        finally:
            await writer.stop()
        assert not (await service.get_recording(runtime, third.id)).truncated
        assert await _played(runtime, third.id) == FRAME.encode()
        assert await _played(runtime, first.id) == FRAME.encode()


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
async def test_a_writer_whose_gateway_died_writes_everything_it_was_handed(
    recordings_environ: dict[str, str], tmp_path: Path, reset: bool
) -> None:
    """The writer writes what it was handed, and ends well, however the socket ended.

    ``reset``: the gateway's end closes with the writer's replies unread, so the writer reads
    ECONNRESET instead of the end of the stream (what a gateway killed on a loaded machine
    left: the writer stopped on ConnectionResetError and exited 1).
    """
    async with opened_runtime(recordings_environ, ["gateway"]) as runtime:
        row = await new_recording(runtime, "wr-05")
        writer = RecordingWriter(runtime.config.environment())
        channel = await writer.open(row.id, PlatformSessionBroker(runtime))
        await until_ready(writer)
        running = writer._writer
        assert running is not None
        assert running.transport is not None
        process = running.process
        if reset:  # the writer's replies to these messages stay unread
            running.transport.pause_reading()
        stream = ("4.blob,1.1,8000." + "B" * 8000 + ";").encode() * 20
        for at in range(0, len(stream), 5000):
            channel.put(stream[at : at + 5000])
        await asyncio.sleep(0)  # the messages of this turn go out
        if reset:
            await asyncio.sleep(1)  # the writer read them and replied
        running.transport_lost()  # as if the gateway were killed: the socket just ends
        assert await asyncio.wait_for(process.wait(), 30) == 0
        await writer.stop()
        segments = (tmp_path / str(row.id) / SEGMENTS).read_bytes()
        assert b"blob" not in segments  # sealed
        chunks = [runtime.recording_store.get_chunk(str(row.id), index) for index in range(3)]
        assert b"".join(chunks) == stream
