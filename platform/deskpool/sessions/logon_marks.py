"""A gateway's logon phases, written in batches: one statement for the marks that wait (issue 39).

Each tunnel a gateway opens reaches two phases of its logon within milliseconds of each other:
the daemon answered (``daemon_connected``, with the daemon's connection id on the session) and
it drew its first frame. Written one by one, each was a statement and a flushed commit of its
own: at 9 a.m., two thousand of each per thousand users, beside the redemptions they follow.

A :class:`PhaseMarks` writes one phase. A mark is written at once when nothing is being
written; while a statement is under way, the marks that arrive wait for it and then go
together in the next (:func:`deskpool.sessions.store_logons.mark_sessions_reached`). Nobody
waits longer than one statement before his own starts, and each caller still gets his own
answer (the phase's seconds) or his statement's error: a batch the database refuses is
written again mark by mark, so a mark it cannot take fails alone. When a phase is recorded,
the time it waited in the batch is taken off: the logon says when the phase was reached, not
when it was written.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

from deskpool.runtime import Runtime
from deskpool.sessions import store_logons
from deskpool.sessions.logons import LogonPhase


@dataclass(slots=True)
class _Mark:
    session_id: uuid.UUID
    connection_id: str | None
    #: When the phase was reached (``time.monotonic()``).
    reached: float
    answer: asyncio.Future[float | None]


class PhaseMarks:
    """Records ``phase`` on the logons of sessions, a batch of marks per statement."""

    def __init__(self, runtime: Runtime, phase: LogonPhase) -> None:
        self._runtime = runtime
        self._phase = phase
        self._waiting: list[_Mark] = []
        self._writer: asyncio.Task[None] | None = None

    async def mark(self, session_id: uuid.UUID, connection_id: str | None = None) -> float | None:
        """Record the phase of the logon of ``session_id``, reached now.

        :returns: the seconds since the phase before, or ``None`` when nothing was recorded
            (no such logon, or it failed or drew already).
        :raises: what the statement raised (the database is away, say).
        """
        answer: asyncio.Future[float | None] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Mark(session_id, connection_id, time.monotonic(), answer))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())
        return await answer

    async def _write(self) -> None:
        """Write what waits, a batch at a time, until nothing does."""
        while self._waiting:
            batch, self._waiting = self._waiting, []
            try:
                await self._write_batch(batch)
            except BaseException:  # cancelled (the process stops): nobody is left waiting
                for waiting in batch + self._waiting:
                    waiting.answer.cancel()
                raise

    async def _write_batch(self, batch: list[_Mark]) -> None:
        """One statement for ``batch``; when it fails, each mark alone, so one fails alone."""
        try:
            seconds = await self._statement(batch)
        except Exception as error:
            if len(batch) == 1:
                _answer(batch[0], error=error)
                return
            for waiting in batch:  # a value the database refuses fails its own mark only
                try:
                    alone = await self._statement([waiting])
                except Exception as refused:
                    _answer(waiting, error=refused)
                else:
                    _answer(waiting, alone.get(waiting.session_id))
            return
        for waiting in batch:
            _answer(waiting, seconds.get(waiting.session_id))

    async def _statement(self, batch: list[_Mark]) -> dict[uuid.UUID, float]:
        now = time.monotonic()
        marks = [(m.session_id, m.connection_id, now - m.reached) for m in batch]
        return await store_logons.mark_sessions_reached(self._runtime.db, self._phase, marks)


def _answer(mark: _Mark, seconds: float | None = None, *, error: Exception | None = None) -> None:
    """Tell the caller of ``mark`` (unless he stopped waiting)."""
    if mark.answer.done():
        return
    if error is not None:
        mark.answer.set_exception(error)
    else:
        mark.answer.set_result(seconds)
