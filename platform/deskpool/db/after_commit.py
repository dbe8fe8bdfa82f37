"""In-memory changes that wait for the transaction whose data they reflect to commit.

A process keeps some state in memory beside the database (the highest license watermark it
saw, say). Changing it inside a transaction that later rolls back (a connection cut while it
waited on a lock, a statement that failed) leaves memory ahead of the database, and the process
then judges the database by something that never happened. :class:`AfterCommit` holds such
changes until the transaction commits:

- :meth:`AfterCommit.transaction` opens a transaction (a savepoint when nested in one it
  opened); the changes made inside it are applied once the outermost one has committed, and
  dropped if it, or the savepoint they were made in, rolls back.
- :meth:`AfterCommit.apply` applies a change at once on a connection outside any transaction,
  holds it in a transaction opened by :meth:`AfterCommit.transaction`, and drops it in a
  transaction someone else opened (whose outcome is not known here): dropping only ever forgets,
  which is safe for what is kept this way. A change that only shows what was read (a metric)
  may say so (``foreign="apply"``): in a transaction opened elsewhere it is applied at once.

A commit whose answer was lost (the connection cut while ``COMMIT`` was in flight) raises, so its
changes are dropped though the database may hold them: memory is then behind the database,
never ahead, and the next read catches up.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

import asyncpg

Change = Callable[[], None]


class AfterCommit:
    """Changes to memory held until their transaction commits (one per owner of the memory)."""

    def __init__(self) -> None:
        # By connection (its id: pool proxies cannot be weakly referenced; an entry lives only
        # while its transaction block runs), a stack of change lists: one per open (sub)
        # transaction, outermost first.
        self._open: dict[int, list[list[Change]]] = {}

    @contextlib.asynccontextmanager
    async def transaction(self, connection: asyncpg.Connection) -> AsyncIterator[None]:
        """A transaction (or savepoint) whose changes are applied once the outermost commits."""
        key = id(connection)
        stack = self._open.get(key)
        foreign = stack is None and connection.is_in_transaction()
        if stack is None:
            stack = self._open[key] = []
        stack.append([])
        try:
            async with connection.transaction():
                yield
        except BaseException:
            stack.pop()
            if not stack:
                del self._open[key]
            raise
        changes = stack.pop()
        if stack:
            stack[-1].extend(changes)  # a savepoint released: its changes join the outer ones
            return
        del self._open[key]
        if foreign:
            return  # inside a transaction opened elsewhere: whether it commits is not known here
        for change in changes:
            change()

    def apply(
        self, connection: asyncpg.Connection, change: Change, *, foreign: str = "drop"
    ) -> None:
        """Apply ``change`` now, once the transaction commits, or never (see the module).

        :param foreign: in a transaction opened elsewhere, ``drop`` the change or ``apply`` it.
        """
        stack = self._open.get(id(connection))
        if stack is not None:
            stack[-1].append(change)
        elif not connection.is_in_transaction() or foreign == "apply":
            change()
