"""A job this worker process runs, and the text a failed attempt records."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from deskpool.jobs.context import JobContext
from deskpool.jobs.model import JobKind

#: The longest error text kept with a failed attempt.
ERROR_TEXT_LIMIT = 2000


@dataclass
class RunningJob:
    """A job this process is running."""

    context: JobContext
    kind: JobKind
    started: float
    task: asyncio.Task[None] | None = None
    interrupted_by: str | None = None

    def interrupt(self, reason: str) -> None:
        """Cancel the attempt (``lease_lost`` or ``shutdown``)."""
        if self.interrupted_by is None:
            self.interrupted_by = reason
        self.context.cancelled.set()
        if self.task is not None:
            self.task.cancel()


def describe_error(error: BaseException) -> str:
    """The text recorded as a failed attempt's error."""
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return text[:ERROR_TEXT_LIMIT]
