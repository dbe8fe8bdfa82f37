"""The simulator's guacd faults: a connection's process that dies, an RDP login refused."""

from __future__ import annotations

import asyncio
import time

import pytest
from tests.integration.desktopd.test_simulator import INFO, TARGET, daemon_socket, until

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.desktopd.faults import LoginRefusal
from deskpool.guacamole import Instruction, encode
from deskpool.guacamole.handshake import perform_handshake
from deskpool.guacamole.stream import InstructionReader, StreamClosed

RDP_TARGET = {"hostname": "win-01", "port": "3389", "username": "ada", "password": "wrong"}


async def read_all(reader: InstructionReader, seen: list[Instruction], within: float) -> None:
    """Read into ``seen`` until the socket closes or ``within`` seconds passed."""
    async with asyncio.timeout(within):
        while True:
            seen.append(await reader.read())


async def rest(reader: InstructionReader) -> list[Instruction]:
    """Everything the daemon sends until its socket closes."""
    seen: list[Instruction] = []
    with pytest.raises(StreamClosed):
        await read_all(reader, seen, 10)
    return seen


async def test_a_connection_whose_process_dies_closes_without_a_word(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    async with daemon_socket(desktop_daemon) as (reader, writer):
        done = await perform_handshake(reader, writer, "vnc", TARGET, INFO, within=5)
        await until(reader, "sync")
        writer.write((encode("key", ord("h"), 1) + encode("key", ord("i"), 1)).encode())
        await until(reader, "sync")
        assert desktop_daemon.connections[done.connection_id].screen.typed == "hi"
        (user,) = desktop_daemon.kill_connection(done.connection_id)
        after = await rest(reader)
        assert {i.opcode for i in after} <= {"img", "blob", "end", "sync", "nop"}, after
        assert user.killed
        assert not user.disconnected
        assert done.connection_id not in desktop_daemon.connections
    # The remote desktop kept the session: the next connection to it shows what was typed.
    async with daemon_socket(desktop_daemon) as (reader, writer):
        again = await perform_handshake(reader, writer, "vnc", TARGET, INFO, within=5)
        await until(reader, "sync")
        assert desktop_daemon.connections[again.connection_id].screen.typed == "hi"


async def test_a_refused_rdp_login_sends_a_lone_sync_and_draws_nothing(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    desktop_daemon.refuse_logins = LoginRefusal()
    async with daemon_socket(desktop_daemon) as (reader, writer):
        await perform_handshake(reader, writer, "rdp", RDP_TARGET, INFO, within=5)
        started = time.monotonic()
        first = await reader.read()
        assert first.opcode == "sync"
        assert time.monotonic() - started < 1.0
        writer.write(encode("sync", first.args[0]).encode())  # the client acknowledges it
        later: list[Instruction] = []
        with pytest.raises(TimeoutError):
            await read_all(reader, later, 6)  # past guacd's 5 s keep-alive
        assert {i.opcode for i in later} == {"nop"}, later
        user = desktop_daemon.users[-1]
        assert not user.drawn
        assert not user.killed
        assert not user.closed


async def test_a_refused_rdp_login_that_closes_closes_without_a_word(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    desktop_daemon.refuse_logins = LoginRefusal(then="close", close_after=0.3)
    async with daemon_socket(desktop_daemon) as (reader, writer):
        await perform_handshake(reader, writer, "rdp", RDP_TARGET, INFO, within=5)
        assert [i.opcode for i in await rest(reader)] == ["sync"]
        assert desktop_daemon.users[-1].killed


async def test_only_the_refusing_desktops_rdp_logins_are_refused(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    desktop_daemon.refuse_logins = LoginRefusal(hostnames=frozenset({"win-02"}))
    async with daemon_socket(desktop_daemon) as (reader, writer):
        await perform_handshake(reader, writer, "rdp", RDP_TARGET, INFO, within=5)
        assert "img" in [i.opcode for i in await until(reader, "sync")]
    async with daemon_socket(desktop_daemon) as (reader, writer):
        await perform_handshake(reader, writer, "vnc", TARGET, INFO, within=5)
        assert "img" in [i.opcode for i in await until(reader, "sync")]
