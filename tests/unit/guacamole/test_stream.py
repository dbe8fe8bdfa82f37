"""Reading instructions from an asyncio stream, and handing the rest to a relay."""

from __future__ import annotations

import asyncio

import pytest

from deskpool.guacamole import Instruction, ProtocolError, Status, encode
from deskpool.guacamole.stream import InstructionReader, StreamClosed


def stream_of(*chunks: bytes, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    for chunk in chunks:
        reader.feed_data(chunk)
    if eof:
        reader.feed_eof()
    return reader


async def test_reads_instructions_split_inside_a_character_and_detaches_the_rest() -> None:
    data = (encode("args", "VERSION_1_5_0", "hostname") + encode("ready", "$ab")).encode()
    data += encode("name", "Zoë").encode() + b"4.sync,2.1"
    cut = data.index("ë".encode()) + 1
    reader = InstructionReader(stream_of(data[:cut], data[cut:], eof=False))
    assert await reader.read() == Instruction("args", ("VERSION_1_5_0", "hostname"))
    assert await reader.expect("ready") == Instruction("ready", ("$ab",))
    assert reader.detach() == encode("name", "Zoë") + "4.sync,2.1"


async def test_expect_refuses_another_opcode_but_passes_error_and_disconnect() -> None:
    reader = InstructionReader(stream_of(b"4.size,1.0;5.error,3.bad,3.519;10.disconnect;"))
    with pytest.raises(ProtocolError) as raised:
        await reader.expect("ready")
    assert raised.value.status is Status.UPSTREAM_ERROR
    assert (await reader.expect("ready")).opcode == "error"
    assert (await reader.expect("ready")).opcode == "disconnect"
    with pytest.raises(StreamClosed) as closed:
        await reader.read()
    assert not closed.value.partial


async def test_end_of_stream_inside_an_instruction_is_partial() -> None:
    reader = InstructionReader(stream_of(b"5.ready,3.$a"))
    with pytest.raises(StreamClosed) as closed:
        await reader.read()
    assert closed.value.partial
