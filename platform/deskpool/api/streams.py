"""Long-lived answers of the API (event streams, downloads) end when their caller loses access.

A handler that streams runs its writing through :func:`guarded`: the stream is registered with
the process's :class:`~deskpool.revocation.watch.AccessWatch` under the caller, with the rule of
what the caller must keep for it to go on. When the watch finds the caller no longer keeps it
(disabled, the permission taken away, by whatever change), the writing is cancelled and the
connection is cut: reset, so that not even the bytes already in the socket's buffers reach the
client.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiohttp import web

from deskpool.api.context import Call
from deskpool.revocation.watch import Keeps, access_watch, until_lost

T = TypeVar("T")

#: ``SO_LINGER`` on, with no lingering: closing the socket resets the connection.
_RESET = struct.pack("ii", 1, 0)


def cut(request: web.Request) -> None:
    """Reset the connection of ``request`` now, dropping what is still buffered for the client."""
    transport = request.transport
    if transport is None:
        return
    raw = transport.get_extra_info("socket")
    if raw is not None:
        with contextlib.suppress(OSError):
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    transport.abort()


async def guarded(
    call: Call, kind: str, keeps: Keeps, write: Callable[[], Awaitable[T]]
) -> tuple[bool, T | None]:
    """Run ``write()`` while the caller keeps what ``keeps`` asks; cut the connection when not.

    :param kind: what the stream is, for the log (``live_events``, ``recording_download``).
    :returns: ``(True, result)`` when the writing finished, ``(False, None)`` when the caller
        lost access (the connection is cut: the handler returns its response as it is).
    """
    user_id = uuid.UUID(str(call.caller.id))
    with access_watch(call.runtime).watching(user_id, kind, keeps) as watch:
        finished, result = await until_lost(watch, write())
    if not finished:
        cut(call.request)
    return finished, result
