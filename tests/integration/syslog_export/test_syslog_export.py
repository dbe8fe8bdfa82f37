"""The syslog export against a real rsyslog.

Every audit event, in order, as RFC 5424 over TCP with octet counting, from the database's
cursor; nothing lost while the server restarts; a new streamer goes on from the cursor.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from tests.support.rsyslog import Rsyslog

from deskpool.actor import Actor
from deskpool.runtime import Runtime
from deskpool.syslog_export.model import Origin
from deskpool.syslog_export.streamer import StreamSettings, SyslogStreamer
from deskpool.testing.processes import until

ACTOR = Actor.system("system:test")


async def record(runtime: Runtime, *names: str) -> list[int]:
    ids = []
    async with runtime.db.acquire() as connection, connection.transaction():
        for name in names:
            await ACTOR.record(connection, f"test.{name}", "tests", name)
            ids.append(await connection.fetchval("SELECT max(id) FROM audit_events"))
    return ids


def streamer(runtime: Runtime, server: Rsyslog, holder: str = "worker-a") -> SyslogStreamer:
    settings = StreamSettings(
        host="127.0.0.1",
        port=server.port,
        origin=Origin("deskpool-test"),
        holder=holder,
        batch_size=5,
        confirm_wait=0.2,
        poll_interval=0.2,
    )
    return SyslogStreamer(runtime, settings)


async def written(server: Rsyslog, ids: list[int], seconds: float = 30) -> None:
    async def all_there() -> bool:
        return set(ids) <= set(server.event_ids())

    await until(all_there, f"rsyslog wrote the events {ids}", seconds=seconds, every=0.1)


async def test_every_event_is_written_in_order_across_a_server_restart(
    pools_runtime: Runtime, rsyslog: Rsyslog
) -> None:
    first = await record(pools_runtime, *(f"a{n}" for n in range(12)))
    task = asyncio.create_task(streamer(pools_runtime, rsyslog).run())
    try:
        await written(rsyslog, first)
        lines = [line for line in rsyslog.lines() if " test.a" in line]
        assert lines[0].startswith("<86>1 ")
        assert " deskpool-test deskpool - test.a0 [deskpool@32473 " in lines[0]
        exported = [i for i in rsyslog.event_ids() if i in set(first)]
        assert exported == first  # in order

        rsyslog.stop()
        during = await record(pools_runtime, "down1", "down2", "down3")
        await asyncio.sleep(1.5)  # the streamer finds the server gone
        rsyslog.start()
        after = await record(pools_runtime, "up1")
        await written(rsyslog, during + after)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    counts = Counter(rsyslog.event_ids())
    assert all(counts[i] >= 1 for i in first + during + after)
    assert sum(counts[i] - 1 for i in counts if counts[i] > 1) <= 5  # at most a batch again


async def test_a_new_streamer_goes_on_from_the_cursor(
    pools_runtime: Runtime, rsyslog: Rsyslog
) -> None:
    before = await record(pools_runtime, "b1", "b2")
    task = asyncio.create_task(streamer(pools_runtime, rsyslog).run())
    try:
        await written(rsyslog, before)
        await asyncio.sleep(0.5)  # the cursor moved past them
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    seen = len(rsyslog.event_ids())
    later = await record(pools_runtime, "c1", "c2")
    task = asyncio.create_task(streamer(pools_runtime, rsyslog, holder="worker-b").run())
    try:
        await written(rsyslog, later)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    again = rsyslog.event_ids()[seen:]
    assert set(later) <= set(again)
    assert not set(before) & set(again)
