"""PostgreSQL's own statement log, to count the round trips and flushed commits of a use case.

A test module that counts requests the fixture :func:`logged` (a plugin of the suite's
``conftest.py``) and overrides the fixture of its database's URL (``migrated_database_url``,
``module_database_url``...) with ``logged.url``: a migrated database (:func:`logged_database`) on a
private server (:class:`deskpool.testing.postgres_server.PrivatePostgres`, never the shared
one) whose every statement is logged (``log_statement = all``, ``log_min_duration_statement =
0``) with the backend's pid and transaction id in each line's prefix (``%m [%p] %x``). Then
:meth:`StatementLog.since` reads what the server logged after a :meth:`StatementLog.mark`:

- a **round trip** is a statement executed (``statement:`` for the simple protocol,
  ``execute <name>:`` for the extended one) or a statement prepared (asyncpg's ``parse``, a
  round trip of its own); a statement's bind travels with its execute;
- a **flushed commit** is a transaction that was given a transaction id (it wrote): the
  distinct non-zero ``%x`` of the lines (a read-only transaction commits without a flush).
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from deskpool.testing.postgres_server import DATABASE, PrivatePostgres

#: The prefix of every line: time, backend pid, transaction id (0: none).
LINE_PREFIX = "%m [%p] %x "
_LINE = re.compile(r"^\S+ \S+ \S+ \[(?P<pid>\d+)\] (?P<xid>\d+) LOG:  (?P<message>.*)$")
_EXECUTED = re.compile(r"^(statement: |execute [^:]*: )(?P<text>.*)$", re.DOTALL)
_PARSED = re.compile(r"^duration: [\d.]+ ms  parse [^:]*: (?P<text>.*)$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Logged:
    """One statement the server logged: executed, or prepared (``parse``)."""

    pid: int
    xid: int
    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class Counted:
    """What a stretch of the log holds."""

    statements: list[Logged]
    xids: set[int]

    @property
    def round_trips(self) -> int:
        """Statements executed plus statements prepared."""
        return len(self.statements)

    @property
    def flushed_commits(self) -> int:
        """Transactions that were given a transaction id."""
        return len(self.xids)

    def texts(self) -> list[str]:
        """Each statement's kind and first 120 characters, for an assertion's message."""
        return [f"{s.kind} [{s.pid}/{s.xid}] {' '.join(s.text.split())[:120]}" for s in self]

    def __iter__(self) -> Iterator[Logged]:
        return iter(self.statements)


class StatementLog:
    """The log file of a private server that logs every statement."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        """Where the log ends now."""
        return self.path.stat().st_size

    def since(self, mark: int, *, settle: float = 0.3) -> Counted:
        """What was logged after ``mark`` (after waiting ``settle`` seconds for the writes)."""
        time.sleep(settle)
        with self.path.open("rb") as log:
            log.seek(mark)
            text = log.read().decode(errors="replace")
        entries: list[tuple[int, int, str]] = []
        for line in text.splitlines():
            match = _LINE.match(line)
            if match is not None:
                entries.append((int(match["pid"]), int(match["xid"]), match["message"]))
            elif line.startswith("\t") and entries:
                pid, xid, message = entries[-1]
                entries[-1] = (pid, xid, f"{message}\n{line.strip()}")
        statements: list[Logged] = []
        xids: set[int] = set()
        for pid, xid, message in entries:
            if xid:
                xids.add(xid)
            executed = _EXECUTED.match(message)
            if executed is not None:
                statements.append(Logged(pid, xid, "execute", executed["text"]))
                continue
            parsed = _PARSED.match(message)
            if parsed is not None:
                statements.append(Logged(pid, xid, "parse", parsed["text"]))
        return Counted(statements, xids)


@dataclass(frozen=True, slots=True)
class LoggedDatabase:
    """A migrated database on a server that logs every statement."""

    url: str
    log: StatementLog


async def _prepare(server: PrivatePostgres) -> None:
    from deskpool.db import migrate

    await server.create()
    await server.start()
    admin = await asyncpg.connect(server.url("postgres"))
    try:
        await admin.execute(f"CREATE DATABASE {DATABASE}")
        await admin.execute(f"ALTER SYSTEM SET log_line_prefix = '{LINE_PREFIX}'")
        await admin.execute("ALTER SYSTEM SET log_statement = 'all'")
        await admin.execute("ALTER SYSTEM SET log_min_duration_statement = 0")
        await admin.execute("SELECT pg_reload_conf()")
    finally:
        await admin.close()
    deadline = time.monotonic() + 30
    while True:
        connection = await asyncpg.connect(server.url())
        try:
            if await connection.fetchval("SHOW log_statement") == "all":
                await migrate(connection)
                return
        finally:
            await connection.close()
        if time.monotonic() > deadline:
            raise RuntimeError("the private server did not take log_statement = all")
        await asyncio.sleep(0.1)


def logged_database() -> Iterator[LoggedDatabase]:
    """Start the private server, migrate its database, yield it; stop it after."""
    with tempfile.TemporaryDirectory(prefix="deskpool-statements-") as directory:
        server = PrivatePostgres(Path(directory))
        asyncio.run(_prepare(server))
        try:
            yield LoggedDatabase(server.url(), StatementLog(Path(directory) / "server.log"))
        finally:
            try:
                asyncio.run(server.stop())
            except RuntimeError as error:
                print(f"the private server did not stop: {error}")


@pytest.fixture(scope="module")
def logged() -> Iterator[LoggedDatabase]:
    """The test module's logged database (:func:`logged_database`)."""
    yield from logged_database()


async def statements_of(connection: asyncpg.Connection, call: Any) -> tuple[Any, list[str]]:
    """What ``call()`` returned and the statements it sent on ``connection``.

    No server log: asyncpg's query logger, for a use case run on a connection it is given.
    """
    sent: list[str] = []

    def logged(record: Any) -> None:
        sent.append(record.query)

    connection.add_query_logger(logged)
    try:
        result = await call()
        await asyncio.sleep(0)  # the logger is called soon after each statement
        return result, sent
    finally:
        connection.remove_query_logger(logged)
