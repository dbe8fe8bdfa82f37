"""Writing the journal of an outage into the database when it returns: in order, once.

:func:`replay_journal` reads the journal from its oldest entry and applies each in a
transaction of its own that also records the entry's id in ``outage_journal``: an entry found
there was applied already and is skipped, so an entry is applied once whoever replays it, and
however often (a replay cut short by the database going away again resumes where it stopped).
One replay runs at a time (a session-level advisory lock), so entries are applied in their
order. An applied entry leaves the journal.

What each act writes, with the time it happened:

- ``allocate``: the desktop is allocated to the user (``Allocated``), audited
  ``desktop.allocate`` (with ``during_outage`` and the ``journal_entry``), and the logon is
  recorded (asked and allocated); ``reconnect``: the logon only (and the allocation when a
  persistent desktop the user was logged off from is his again);
- ``token_issued``, ``session_connected``, ``first_frame``: the logon's phase (and the
  session's connection);
- ``session_start``: the session under the id the gateway gave the tunnel, the logon's
  ``tunnel_opened``, the desktop ``in_session``, audited ``session.start``;
- ``audit``: the audit event (a refused call) as it was, at its time;
- ``session_end``: the session ends as the gateway said
  (:func:`deskpool.sessions.ending.end_session`, with its audit event and the pool's rule after
  a disconnect).

A desktop that was no longer the user's to take when the act is written (changed by other
means meanwhile) is not taken from whoever has it: the act is recorded with its outcome
(``outage_journal.outcome``) and audited ``outage.conflict``. One entry that fails for
another reason is recorded as failed and the replay goes on.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import asyncpg

from deskpool.audit import record_audit_event
from deskpool.desktops import store as store_desktops
from deskpool.desktops.states import Allocated, SessionOpened
from deskpool.events import AuditEvent
from deskpool.outage_brokering import claims, store
from deskpool.outage_brokering.model import Act, ActKind, audit_of
from deskpool.outage_brokering.snapshot import keys_of
from deskpool.outage_brokering.store import set_outcome
from deskpool.outages import DATABASE, outage_of
from deskpool.pools import store as store_pools
from deskpool.pools.model import DesktopState
from deskpool.runtime import Runtime
from deskpool.sessions.ending import end_session
from deskpool.sessions.tunnel import SessionEndReason, TunnelCounters

log = logging.getLogger(__name__)

#: Entries read from the journal at once.
BATCH = 200
#: The advisory lock one replay holds.
REPLAY_LOCK = "deskpool.outage_brokering.replay"


def _event(
    act: Act, action: str, resource_type: str, resource_id: str, **details: Any
) -> AuditEvent:
    return AuditEvent(
        action=action,
        actor=act.fields.get("user_id", "system:outage_brokering"),
        resource_type=resource_type,
        resource_id=resource_id,
        outcome="success" if action != "outage.conflict" else "failure",
        occurred_at=act.at,
        details={**details, "during_outage": True, "journal_entry": act.entry_id},
    )


async def replay_journal(runtime: Runtime) -> int:
    """Apply the journal's entries to the database; how many were applied now."""
    kv, keys = runtime.kv, keys_of(runtime)
    applied = 0
    async with runtime.db.acquire() as connection:
        locked = await connection.fetchval(
            "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", REPLAY_LOCK
        )
        if not locked:
            return 0
        try:
            while True:
                entries = await kv.xrange(keys.journal, count=BATCH) or []
                if not entries:
                    break
                for entry_id, fields in entries:
                    act = Act.of_entry(entry_id or "", fields or {})
                    if await _apply_once(runtime, connection, act):
                        applied += 1
                    await kv.xdel(keys.journal, act.entry_id)
        finally:
            await connection.execute(
                "SELECT pg_advisory_unlock(hashtextextended($1, 0))", REPLAY_LOCK
            )
    if applied:
        log.info("outage journal: %d act(s) written to the database", applied)
    return applied


async def _apply_once(runtime: Runtime, connection: asyncpg.Connection, act: Act) -> bool:
    """Apply ``act`` unless it was; whether it was applied now."""
    try:
        if act.kind is ActKind.SESSION_END:
            # Ending is idempotent and runs in a transaction of its own.
            await _end(runtime, act)
            async with connection.transaction():
                return await store.mark_applied(connection, act.entry_id, str(act.kind))
        async with connection.transaction():
            if not await store.mark_applied(connection, act.entry_id, str(act.kind)):
                return False
            outcome = await APPLY[act.kind](connection, act)
            if outcome:
                await set_outcome(connection, act.entry_id, outcome)
                await record_audit_event(
                    connection,
                    _event(
                        act,
                        "outage.conflict",
                        "desktops",
                        act.fields.get("desktop_id", ""),
                        kind=str(act.kind),
                        outcome=outcome,
                    ),
                )
        return True
    except Exception as error:
        if outage_of(error) == DATABASE:
            raise
        log.warning("outage journal: entry %s (%s) failed: %s", act.entry_id, act.kind, error)
        async with connection.transaction():
            if await store.mark_applied(connection, act.entry_id, str(act.kind)):
                await set_outcome(connection, act.entry_id, f"failed: {type(error).__name__}")
        return True


async def _take(connection: asyncpg.Connection, act: Act, *, allocate: bool) -> str:
    """Give the desktop to the act's user (when it is free, or his); ``""`` or what differed."""
    desktop_id, user = act.id_of("desktop_id"), act.fields["user_id"]
    desktop = await store_desktops.get_desktop(connection, desktop_id, for_update=True)
    if desktop is None:
        return "desktop gone"
    pool = await store_pools.get_pool(connection, desktop.pool_id)
    if desktop.state is DesktopState.IN_USE and desktop.assigned_user == user:
        pass
    elif (
        desktop.state is DesktopState.READY
        and desktop.assigned_user in (None, user)
        and (allocate or desktop.assigned_user == user)
    ):
        await store_desktops.apply_event(connection, desktop_id, Allocated(user), act.at, pool=pool)
        await record_audit_event(
            connection,
            _event(
                act,
                "desktop.allocate",
                "desktops",
                str(desktop_id),
                pool_id=str(desktop.pool_id),
                user_id=user,
            ),
        )
    else:
        return f"desktop {desktop.state} for {desktop.assigned_user or 'nobody'}"
    return ""


async def _allocate(connection: asyncpg.Connection, act: Act) -> str:
    outcome = await _take(connection, act, allocate=act.kind is ActKind.ALLOCATE)
    await store.insert_logon(
        connection,
        logon_id=act.id_of("logon_id"),
        user_id=act.id_of("user_id"),
        pool_id=act.id_of("pool_id"),
        desktop_id=act.id_of("desktop_id"),
        at=act.at,
    )
    return outcome


async def _token_issued(connection: asyncpg.Connection, act: Act) -> str:
    await store.mark_logon_at(connection, act.id_of("logon_id"), "token_issued_at", act.at, None)
    return ""


async def _session_start(connection: asyncpg.Connection, act: Act) -> str:
    session_id, user_id = act.id_of("session_id"), act.id_of("user_id")
    session = await store.insert_session_at(
        connection,
        session_id=session_id,
        user_id=user_id,
        desktop_id=act.id_of("desktop_id"),
        pool_id=act.id_of("pool_id"),
        desktop_name=act.fields["desktop_name"],
        protocol=act.fields["protocol"],
        gateway_id=act.fields["gateway_id"],
        at=act.at,
    )
    if session is None:
        return "session exists"
    logon_id = act.optional_id("logon_id")
    if logon_id is not None:
        await store.mark_logon_at(connection, logon_id, "tunnel_opened_at", act.at, session_id)
    await record_audit_event(
        connection,
        _event(
            act,
            "session.start",
            "sessions",
            str(session_id),
            desktop_id=str(session.desktop_id),
            pool_id=str(session.pool_id),
            user_id=str(user_id),
            gateway_id=session.gateway_id,
            read_only=False,
            protocol=session.protocol,
        ),
    )
    desktop = await store_desktops.get_desktop(connection, session.desktop_id, for_update=True)
    if (
        desktop is None
        or desktop.state is not DesktopState.IN_USE
        or desktop.assigned_user != str(user_id)
    ):
        return "desktop not the user's"
    if not desktop.in_session:
        await store_desktops.apply_event(connection, desktop.id, SessionOpened())
    return ""


async def _session_connected(connection: asyncpg.Connection, act: Act) -> str:
    session_id = act.id_of("session_id")
    await store.set_connected_at(connection, session_id, act.fields["connection_id"], act.at)
    return await _session_phase(connection, session_id, "daemon_connected_at", act)


async def _first_frame(connection: asyncpg.Connection, act: Act) -> str:
    return await _session_phase(connection, act.id_of("session_id"), "first_frame_at", act)


async def _session_phase(
    connection: asyncpg.Connection, session_id: uuid.UUID, column: str, act: Act
) -> str:
    logon_id = await store.logon_of_session(connection, session_id)
    if logon_id is not None:
        await store.mark_logon_at(connection, logon_id, column, act.at, None)
    return ""


async def _audit(connection: asyncpg.Connection, act: Act) -> str:
    await record_audit_event(connection, audit_of(act))
    return ""


async def _end(runtime: Runtime, act: Act) -> None:
    counters = TunnelCounters(
        bytes_to_desktop=int(act.fields.get("bytes_to_desktop") or 0),
        bytes_to_browser=int(act.fields.get("bytes_to_browser") or 0),
    )
    await end_session(
        runtime, act.id_of("session_id"), SessionEndReason(act.fields["reason"]), counters
    )


APPLY = {
    ActKind.ALLOCATE: _allocate,
    ActKind.RECONNECT: _allocate,
    ActKind.TOKEN_ISSUED: _token_issued,
    ActKind.SESSION_START: _session_start,
    ActKind.SESSION_CONNECTED: _session_connected,
    ActKind.FIRST_FRAME: _first_frame,
    ActKind.AUDIT: _audit,
}


async def journal_pending(runtime: Runtime) -> int:
    """How many acts wait to be written (``0`` when Redis does not answer)."""
    return await claims.pending(runtime.kv, keys_of(runtime))
