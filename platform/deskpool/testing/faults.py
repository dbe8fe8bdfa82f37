"""Fault injection for tests: the database connection cut at the Nth statement of some work.

:class:`StatementCut` stands in for a runtime's connection pool (``runtime._db``; see
:func:`cutting_statements`): every connection acquired through it counts the statements sent
on it (asyncpg's query loggers, so ``BEGIN``, savepoints and ``COMMIT`` count too), and the
connection is terminated once statement number ``at`` has been answered, so the statement that
follows it (whatever the code does next: another query, the ``COMMIT``) meets a dead connection,
as it would when PostgreSQL restarts or an operator runs ``pg_terminate_backend``. With ``at``
0 the connection is cut as soon as it is acquired. Run the work once with a cut at every
statement, 0, 1, 2, ... until a run no longer meets one (:attr:`StatementCut.cut` stays false),
and wait for :meth:`StatementCut.settled` before reading what the database holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg

from deskpool.testing.processes import until


class StatementCut:
    """A connection pool whose connections are cut after statement number ``at``.

    :param pool: the real pool.
    :param at: how many statements are answered before the cut (over every connection acquired).
    """

    def __init__(self, pool: asyncpg.Pool, at: int) -> None:
        self.pool = pool
        self.at = at
        #: The statements sent so far, in order.
        self.statements: list[str] = []
        #: Whether the cut was made.
        self.cut = False
        #: The server process of the connection cut (see :meth:`settled`).
        self.server_pid: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection of the real pool, watched until it is released."""
        async with self.pool.acquire() as connection:

            def logged(record: Any) -> None:
                self.statements.append(record.query)
                if len(self.statements) == self.at:
                    self._cut(connection)

            connection.add_query_logger(logged)
            if self.at == 0:
                self._cut(connection)
            try:
                yield connection
            finally:
                with contextlib.suppress(asyncpg.InterfaceError):
                    connection.remove_query_logger(logged)

    def _cut(self, connection: asyncpg.Connection) -> None:
        if self.cut:
            return
        try:
            pid = connection.get_server_pid()
            connection.terminate()
        except asyncpg.InterfaceError:
            return  # released already: the work was done before the cut
        self.cut, self.server_pid = True, pid

    async def settled(self, connection: asyncpg.Connection) -> None:
        """Wait until the server has finished with the cut connection.

        It commits or rolls back what it was doing: a ``COMMIT`` sent just before the cut may
        still be applied after the client saw the connection die.
        """

        async def gone() -> bool:
            return not await connection.fetchval(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", self.server_pid
            )

        if self.server_pid is not None:
            await until(gone, f"the server ended the cut connection's process {self.server_pid}")


@contextlib.contextmanager
def cutting_statements(runtime: Any, at: int) -> Iterator[StatementCut]:
    """Make ``runtime`` use a :class:`StatementCut` of its pool while the block runs."""
    cut = StatementCut(runtime.db, at)
    runtime._db = cut
    try:
        yield cut
    finally:
        runtime._db = cut.pool
