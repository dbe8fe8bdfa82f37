"""A connection given back to the pool costs no reset round trip (issue 39, item 2).

asyncpg's default release sends ``SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *;
RESET ALL`` every time: one round trip per ``acquire``, 12 % of the api in the login storm.
Every component's pool (``connect_pool``) undoes only what the platform can leave behind: an
open transaction, and a task's statement bound. Counted in the statement log of a private
server (:mod:`tests.support.statement_log`). And what a type is, asked of the database once for
all of a pool's connections, not once by each.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import asyncpg
import pytest
from tests.support.statement_log import LoggedDatabase

from deskpool.db import connect_pool
from deskpool.db.bounded import statement_bound

_RESETS = ("RESET ALL", "UNLISTEN", "pg_advisory_unlock_all", "CLOSE ALL")


@pytest.fixture(scope="module")
def migrated_database_url(logged: LoggedDatabase) -> str:
    return logged.url


@pytest.mark.parametrize("bounded", [True, False], ids=["bounded", "operators"])
async def test_a_release_sends_nothing_when_nothing_is_left(
    logged: LoggedDatabase, make_config: Callable[..., Any], bounded: bool
) -> None:
    config = make_config(DATABASE_MAX_CONNS="1").config
    pool = await connect_pool(config, bounded=bounded)
    try:
        async with pool.acquire() as connection:
            await connection.fetchval("SELECT 41")  # prepared once, before the count
        mark = logged.log.mark()
        for _ in range(3):
            async with pool.acquire() as connection:
                assert await connection.fetchval("SELECT 41") == 41
        counted = logged.log.since(mark)
    finally:
        await pool.close()

    # Three acquires, three statements: nothing sent on release.
    assert [s.text for s in counted] == ["SELECT 41"] * 3, counted.texts()


async def test_a_transaction_left_open_is_rolled_back_and_a_bound_given_back(
    logged: LoggedDatabase, make_config: Callable[..., Any]
) -> None:
    pool = await connect_pool(make_config(DATABASE_MAX_CONNS="1").config)
    try:
        default = await pool.fetchval("SHOW statement_timeout")
        mark = logged.log.mark()
        connection = await pool.acquire()
        transaction = connection.transaction()
        await transaction.start()
        await connection.execute("CREATE TEMP TABLE left_behind (n int)")
        await pool.release(connection)
        with statement_bound(123.0):
            async with pool.acquire() as connection:
                assert await connection.fetchval("SHOW statement_timeout") == "123s"
        async with pool.acquire() as connection:
            after = await connection.fetchval("SHOW statement_timeout")
            missing = await connection.fetchval("SELECT to_regclass('pg_temp.left_behind')")
        counted = logged.log.since(mark)
    finally:
        await pool.close()

    assert after == default
    assert missing is None  # the open transaction was rolled back on release
    texts = [s.text for s in counted]
    assert "ROLLBACK" in texts
    assert "RESET statement_timeout" in texts
    assert not [t for t in texts if any(reset in t for reset in _RESETS)], counted.texts()


class _LoopWork:
    """Tasks started and timers scheduled on the running loop while counting."""

    def __init__(self) -> None:
        self.tasks = 0
        self.timers = 0

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        factory = loop.get_task_factory()

        def task(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Future[Any]:
            self.tasks += 1
            return asyncio.Task(coro, loop=loop, **kwargs)

        loop.set_task_factory(task)
        try:
            with mock.patch.object(loop, "call_at", wraps=loop.call_at) as timer:
                yield
            self.timers += timer.call_count
        finally:
            loop.set_task_factory(factory)


async def test_a_free_connection_is_taken_and_given_back_without_a_wait_of_its_own(
    logged: LoggedDatabase, make_config: Callable[..., Any]
) -> None:
    # Every request takes and gives back a connection, often several: asyncpg's acquire under
    # the pool's bounded turn (a timeout and a timer to push it on) and its release (a task
    # shielding it) were 12 to 15 % of the api's Python time in the cold GET /me (py-spy
    # --gil). A free connection needs no turn, one with nothing to undo no task.
    pool = await connect_pool(make_config(DATABASE_MAX_CONNS="2").config)
    try:
        async with pool.acquire() as connection:
            await connection.fetchval("SELECT 41")  # connected and prepared before the count
        taking, giving_back = _LoopWork(), _LoopWork()
        with taking.counting():
            connection = await pool.acquire()
        assert await connection.fetchval("SELECT 41") == 41
        with giving_back.counting():
            await pool.release(connection)
        async with pool.acquire() as connection:  # given back whole: usable again
            assert await connection.fetchval("SELECT 42") == 42
    finally:
        await pool.close()

    assert (taking.tasks, taking.timers) == (0, 0)
    # The one timer: asyncpg's own, closing the connection once idle for too long.
    assert (giving_back.tasks, giving_back.timers) == (0, 1)


async def test_the_pools_connections_learn_a_type_from_the_database_once(
    logged: LoggedDatabase, make_config: Callable[..., Any]
) -> None:
    # asyncpg asks the database what a type is (a recursive catalog query, about 5 ms of
    # planning, between two JIT settings) on each connection, the first time a statement of
    # that connection uses it: at 9 a.m. about 60 times in a storm, as the pools open their
    # connections (issue 39). The pool's connections ask once.
    pool = await connect_pool(make_config(DATABASE_MAX_CONNS="3").config)
    try:
        mark = logged.log.mark()
        held = [await pool.acquire() for _ in range(3)]
        try:
            for connection in held:
                ids = await connection.fetchval("SELECT $1::uuid[]", [])
                assert ids == []
            counted = logged.log.since(mark)
        finally:
            for connection in held:
                await pool.release(connection)
    finally:
        await pool.close()

    asked = [s for s in counted if s.kind != "parse" and "typeinfo_tree" in s.text]
    assert len(asked) == 1, counted.texts()


async def test_a_type_changed_under_the_pool_is_learnt_again(
    logged: LoggedDatabase, make_config: Callable[..., Any]
) -> None:
    # asyncpg drops what its connections know of types when a row no longer matches it (a
    # migration altered the type): every connection of the pool then asks again.
    admin = await asyncpg.connect(logged.url)
    pool = await connect_pool(make_config(DATABASE_MAX_CONNS="2").config)
    try:
        await admin.execute("DROP TYPE IF EXISTS changing; CREATE TYPE changing AS (a int)")
        async with pool.acquire() as connection:
            assert tuple(await connection.fetchval("SELECT ROW(1)::changing")) == (1,)
        await admin.execute("ALTER TYPE changing ADD ATTRIBUTE b text")
        first, second = await pool.acquire(), await pool.acquire()
        try:
            with contextlib.suppress(asyncpg.OutdatedSchemaCacheError):
                await first.fetchval("SELECT ROW(1, 'x')::changing")
            for connection in (first, second):
                row = await connection.fetchval("SELECT ROW(1, 'x')::changing")
                assert tuple(row) == (1, "x")
        finally:
            await pool.release(first)
            await pool.release(second)
    finally:
        await pool.close()
        await admin.execute("DROP TYPE IF EXISTS changing")
        await admin.close()
