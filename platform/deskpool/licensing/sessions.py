"""The license's session check: one more session to a desktop, allowed or refused.

Sessions count per desktop (an open tunnel, or a connection token not used yet); the check runs
in the transaction that adds the session, under the growth lock (shared far from the limit),
as every growth check of :mod:`deskpool.licensing.service` does.
"""

from __future__ import annotations

import uuid

import asyncpg

from deskpool.licensing import store
from deskpool.licensing.context import LicensingContext
from deskpool.licensing.model import Judgement, Resource, Usage, room_for_concurrent
from deskpool.licensing.service import (
    _check_judged,
    _judge,
    _observe,
    _read,
    current_judgement,
)


async def check_can_open_session(
    connection: asyncpg.Connection, context: LicensingContext, desktop_id: uuid.UUID | None = None
) -> None:
    """Allow a session to ``desktop_id``, or raise ``LicenseLimitReached``.

    Sessions count per desktop (an open tunnel, or a connection token not used yet), so a
    desktop that already has one is always allowed another connection: reconnecting never
    counts twice, and nothing open is ever cut.

    Far from the limit, the check shares the growth lock (concurrent openings do not wait for
    each other): the sessions counted, plus one for every transaction that may be open on the
    server at once, must stay within the limit. Nearer, it gives the shared lock back and takes
    the growth lock alone, as every other growth check does, and counts exactly; the process
    then starts there until a check finds the room again. Either way the lock lasts until the
    caller's transaction ends: call this last in it.
    """
    if not context.sessions_near_limit:
        await store.lock_growth_shared(connection)
        judgement = await current_judgement(connection, context)
        usage, held, connections = await store.session_usage(connection, desktop_id)
        if _session_verdict(connection, context, judgement, usage, held, connections, False):
            return
        await store.unlock_growth_shared(connection)
    await store.lock_growth(connection)
    judgement = await current_judgement(connection, context)
    usage, held, connections = await store.session_usage(connection, desktop_id)
    _session_verdict(connection, context, judgement, usage, held, connections, True)


async def check_opening_session(
    connection: asyncpg.Connection,
    context: LicensingContext,
    read: store.Snapshot,
    counted: tuple[Usage, bool, int],
    *,
    alone: bool,
) -> bool:
    """:func:`check_can_open_session` on what an opening read after taking the growth lock.

    ``counted`` is :func:`store.session_usage`'s, except that with the lock shared its third
    value is the transactions that held the growth lock just after this one took it (read in
    an earlier statement than the count, :data:`store.GROWTH_LOCK_HOLDERS_SQL`) instead of
    ``max_connections``. That is exact too: of any openings adding sessions at once, take the
    one that read the holders last. Every other one took the lock before that read, so it was
    either still holding it (counted among the holders) or had committed before the count's
    snapshot (counted among the sessions); so that last one's check bounds them all. Near the
    limit the room then covers the openings really under way, not a hundred, and openings
    keep sharing the lock (issue 39's storm: the last hundred of a thousand users went one
    at a time). ``False``: the lock is shared and the room not certain (the caller opens
    again with the lock ``alone``).
    """
    judgement = _judge(connection, context, await _read(connection, context, read))
    return _session_verdict(connection, context, judgement, *counted, alone)


def _session_verdict(
    connection: asyncpg.Connection,
    context: LicensingContext,
    judgement: Judgement,
    usage: Usage,
    held: bool,
    connections: int,
    alone: bool,
) -> bool:
    room = room_for_concurrent(judgement, usage, Resource.SESSIONS, connections)
    if alone:  # far from the limit again (sessions ended): the next check shares the lock
        context.sessions_near_limit = not room
    if held or (room and not alone):
        if room:
            _observe(connection, context, judgement, usage)
        return True
    if not alone:
        return False
    _observe(connection, context, judgement, usage)
    _check_judged(context, judgement, usage, Resource.SESSIONS)
    return True
