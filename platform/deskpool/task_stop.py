"""Stopping a background task for certain, even when something inside it swallowed a cancel.

``task.cancel()`` followed by ``await task`` hangs for ever when code under the task catches
the ``CancelledError`` and carries on (a library's cleanup path can do this on Python 3.11);
the task then loops on in the *cancelling* state. A worker stopped a moment after it started
was seen doing exactly this in its outage snapshot loop (SIGTERM, then no exit within 60 s).
:func:`cancel_until_done` cancels again at every turn until the task has ended, so the next
``await`` of a loop that swallowed one cancel receives the next.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)

#: How long a cancelled task is given to end before it is cancelled again.
RETRY_SECONDS = 0.2


async def cancel_until_done(task: asyncio.Task[Any] | None, *, patience: float = 10.0) -> None:
    """Cancel ``task`` and wait for it to end, cancelling again while it has not.

    Returns when the task has ended (its result or exception is consumed), or after
    ``patience`` seconds with a warning naming it (a task that ignores every cancel).
    """
    if task is None:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while not task.done():
        task.cancel()
        remaining = deadline - loop.time()
        if remaining <= 0:
            log.warning("task %s did not end after %.0f s of cancelling", task.get_name(), patience)
            return
        await asyncio.wait({task}, timeout=min(RETRY_SECONDS, remaining))
    if not task.cancelled():
        task.exception()  # consumed: it was logged where it happened, or the task is gone


async def cancel_all_until_done(tasks: list[asyncio.Task[Any]], *, patience: float = 10.0) -> None:
    """:func:`cancel_until_done` for each of ``tasks``, side by side."""
    await asyncio.gather(*(cancel_until_done(task, patience=patience) for task in tasks))
