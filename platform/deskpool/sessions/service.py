"""Session use cases: open a desktop with a token, reconnect, shadow, disconnect, log off.

One function per use case; each validates, changes, audits and enqueues in one transaction.
The API handlers, the worker's session task and the gateway's broker
(:mod:`deskpool.sessions.broker`) call these, so a rule lives in one place. What they share
lives beside them: the connection tokens they issue (:mod:`deskpool.sessions.tokens`) and the
timing of a logon (:mod:`deskpool.sessions.logon_timing`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
from redis.exceptions import RedisError

from deskpool.audit import record_audit_event
from deskpool.client_policy.model import ClientPolicy, offered
from deskpool.db.rows import Db
from deskpool.desktops import store as store_desktops
from deskpool.desktops.allocation import (
    DesktopNotReady,
)
from deskpool.desktops.jobs import PROVISION, REBUILD, enqueue_desktop_job
from deskpool.desktops.states import Allocated, PowerUp, Released, SessionClosed
from deskpool.errors import Conflict, Forbidden, NotFound, ValidationFailed
from deskpool.events import AuditEvent
from deskpool.identity.principal import Principal
from deskpool.licensing.sessions import check_can_open_session
from deskpool.live.publishers import publish_desktop
from deskpool.pools import store as store_pools
from deskpool.pools import store_entitlements
from deskpool.pools.model import Desktop, DesktopState, Pool
from deskpool.runtime import Runtime
from deskpool.sessions import store, store_logons, store_policies
from deskpool.sessions.growth import grow_for_user
from deskpool.sessions.logon_timing import mark_phase, timed_logon
from deskpool.sessions.logons import LogonPhase, LogonRecord
from deskpool.sessions.model import (
    DEFAULT_POLICY,
    PolicyChange,
    SessionPolicy,
    SessionRecord,
    validate_policy,
)
from deskpool.sessions.tokens import (
    _RETRY,
    issue_token,
    resolve_target,
    tunnel_url,
)
from deskpool.sessions.tunnel import DesktopTarget, SessionEndReason
from deskpool.starts import store as starts
from deskpool.starts.model import choose_start

log = logging.getLogger(__name__)

#: Who the automatic actions of sessions are recorded as.
SYSTEM_ACTOR = "system:sessions"

#: Builds the audit event of a change: ``(action, resource_type, resource_id, details)``.
AuditOf = Callable[[str, str, str | None, dict[str, Any]], AuditEvent]

#: Told, in the allocating transaction, of a free desktop about to be handed out through the
#: database; never raises. The composition fills it in (the API gives
#: :func:`deskpool.outage_brokering.service.withhold`, which takes the desktop out of the
#: outage snapshot's ready desktops before the commit).
Withhold = Callable[[Runtime, Desktop], Awaitable[None]]


async def withhold(runtime: Runtime, desktop: Desktop) -> None:
    """Tell the seam (:data:`Withhold`) of a free desktop about to be handed out."""
    await _withhold(runtime, desktop)


async def _withhold_nothing(runtime: Runtime, desktop: Desktop) -> None:
    """What a process that brokers nothing during an outage does."""


_withhold: Withhold = _withhold_nothing


def install_withhold(withhold: Withhold) -> None:
    """Fill the seam in (at composition)."""
    global _withhold
    _withhold = withhold


class AccessRevoked(Forbidden):
    """The caller holds the desktop but may no longer open its pool (403)."""

    code = "access_revoked"
    title = "Access revoked"


class SessionNotOpen(Conflict):
    """The session has ended, or cannot be joined yet (409)."""

    code = "session_not_open"
    title = "Session not open"


def system_audit(
    action: str, resource_type: str, resource_id: str | None, details: dict[str, Any]
) -> AuditEvent:
    """An audit event of an automatic action of sessions."""
    return AuditEvent(
        action=action,
        actor=SYSTEM_ACTOR,
        resource_type=resource_type,
        resource_id=resource_id,
        outcome="success",
        occurred_at=datetime.now(UTC),
        details=details,
    )


@dataclass(frozen=True, slots=True)
class DesktopConnection:
    """A desktop handed to a user and the token that opens its tunnel (never log ``token``)."""

    desktop: Desktop
    token: str
    url: str
    protocol: str
    expires_at: datetime
    #: The pool records the session: the user is told before the desktop appears.
    recorded: bool = False
    #: What may cross between the desktop and the browser, narrowed to what the desktop's
    #: protocol offers: the console says in words what is turned off.
    client: ClientPolicy | None = None

    def __repr__(self) -> str:
        return f"DesktopConnection({self.desktop.name}, {self.protocol}, <token hidden>)"


@dataclass(frozen=True, slots=True)
class PendingConnection:
    """A desktop being started for the user (start on connect): no token yet.

    The user's live events carry the desktop's state changes; once it is ``in_use`` (handed
    to him by the worker that started it), a new connection
    (:func:`reconnect_desktop`) opens it, continuing the same logon.
    """

    desktop: Desktop
    requested_at: datetime
    logon_id: uuid.UUID
    #: The desktop is being built for the user (the pool grew), rather than powered on.
    building: bool = False


#: What opening a desktop answers: a connection, or a desktop being started for the user.
Opened = DesktopConnection | PendingConnection


# ------------------------------------------------------------------------------ policies


async def pool_policies(db: Db, pool_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, SessionPolicy]:
    """The session policy of each pool (the default for a pool that never set one)."""
    return await store_policies.policies_of(db, pool_ids)


def checked_policy(change: PolicyChange, base: SessionPolicy | None = None) -> SessionPolicy:
    """``base`` (default: the default policy) with ``change``, validated.

    :raises ValidationFailed: a member is out of range (pointers under ``/session_policy``).
    """
    policy = change.applied_to(base or DEFAULT_POLICY)
    errors = validate_policy(policy)
    if errors:
        raise ValidationFailed(errors)
    return policy


async def set_pool_policy(
    connection: asyncpg.Connection, pool_id: uuid.UUID, change: PolicyChange
) -> SessionPolicy:
    """Change the members ``change`` sets of a pool's session policy; return the result.

    :raises ValidationFailed: see :func:`checked_policy`.
    """
    policy = checked_policy(change, await store_policies.get_policy(connection, pool_id))
    await store_policies.put_policy(connection, pool_id, policy)
    return policy


# ------------------------------------------------------------------------------ connection


async def connect_desktop(
    runtime: Runtime,
    url: str,
    user_id: uuid.UUID,
    desktop: Desktop,
    pool: Pool,
    logon: uuid.UUID,
    policy: SessionPolicy | None = None,
) -> DesktopConnection:
    if policy is None:
        policy = await store_policies.get_policy(runtime.db, pool.id)
    target = await resolve_target(runtime, desktop, pool, policy)
    async with runtime.db.acquire() as connection, connection.transaction():
        # The guest answered (resolve_target): recorded with the token, one commit for both.
        await mark_phase(runtime, connection, logon, LogonPhase.GUEST_READY)
        token, expires_at = await issue_token(
            runtime, connection, user_id=user_id, desktop=desktop, target=target, logon_id=logon
        )
        await mark_phase(runtime, connection, logon, LogonPhase.TOKEN_ISSUED)
        # A start on connect ends with the token; a logon it had that is not this one waits
        # no more (the user opened the pool again rather than connecting).
        start = await starts.remove_start(connection, desktop.id)
        if start is not None and start.logon_id not in (None, logon):
            await store_logons.fail_logon(connection, start.logon_id, "superseded")
    return DesktopConnection(
        desktop,
        token,
        url,
        target.protocol,
        expires_at,
        recorded=policy.recording.enabled,
        client=offered(policy.client, target.protocol, target.parameters),
    )


# ------------------------------------------------------------------------------ logon timing


async def _audit_allocation(
    connection: asyncpg.Connection, audit: AuditOf, desktop: Desktop, user: str
) -> None:
    event = audit(
        "desktop.allocate",
        "desktops",
        str(desktop.id),
        {"pool_id": str(desktop.pool_id), "user_id": user},
    )
    await record_audit_event(connection, event)


async def may_open(db: Db, principal: Principal, pool_id: uuid.UUID) -> bool:
    """Whether the caller may open desktops of the pool: ``pools:manage`` or an entitlement."""
    if principal.may("pools:manage"):
        return True
    return await store_entitlements.is_entitled(db, pool_id, principal.id, principal.group_ids)


async def start_for_user(
    runtime: Runtime,
    connection: asyncpg.Connection,
    pool: Pool,
    user_id: uuid.UUID,
    logon: uuid.UUID,
    audit: AuditOf,
    *,
    desktop_id: uuid.UUID | None = None,
) -> PendingConnection | None:
    """Start a desktop for the user (start on connect), in the caller's transaction.

    The desktop :func:`deskpool.starts.model.choose_start` picks is reserved to the user: a
    powered-off one is powered up for him (``PowerUp(user)``, its ``desktop.provision`` job
    enqueued), one already on its way to ready for him is waited for. When none can be, an
    open (no ``desktop_id``) of a pool that may grow reserves a desktop being built to him
    (:func:`deskpool.sessions.growth.grow_for_user`). The start names the
    logon, which records ``allocated`` now; the worker that makes the desktop ready hands it
    over (:func:`deskpool.provisioning.starts.hand_over`). Requests of one user in one pool are
    serialized by the allocation's lock, and a free desktop is locked ``SKIP LOCKED``, so
    nobody else gets it.

    :param desktop_id: start only this desktop the user holds (reconnecting to it).
    :returns: the pending connection, or ``None`` when nothing can be started.
    :raises LicenseLimitReached: one more session would go beyond the license (rolled back).
    :raises NoDesktopAvailable: the pool would grow, but is at its maximum.
    """
    user = str(user_id)
    await starts.lock_user_in_pool(connection, pool.id, user)
    current = await store_pools.get_pool(connection, pool.id) or pool
    found = await starts.candidates(connection, pool.id, user)
    choice = choose_start(current, found, user, held_only=desktop_id is not None)
    if choice is None and desktop_id is None:
        choice = await grow_for_user(runtime, connection, current, found, user)
    if choice is None or desktop_id not in (None, choice.desktop.id):
        return None
    desktop = choice.desktop
    if choice.power_up:
        desktop = await store_desktops.apply_event(
            connection, desktop.id, PowerUp(user), pool=current
        )
        await enqueue_desktop_job(connection, PROVISION, desktop)
    start, replaced = await starts.put_start(
        connection, desktop_id=desktop.id, pool_id=pool.id, user_id=user_id, logon_id=logon
    )
    if replaced is not None:
        await store_logons.fail_logon(connection, replaced, "superseded")
    await record_audit_event(
        connection,
        audit(
            "desktop.start_on_connect",
            "desktops",
            str(desktop.id),
            {
                "pool_id": str(pool.id),
                "user_id": user,
                "state": str(desktop.state),
                "powered_up": choice.power_up,
                "grown": choice.grown,
            },
        ),
    )
    # Over the license's session limit the start is rolled back (409); late, as in an open.
    await check_can_open_session(connection, runtime.licensing, desktop.id)
    await mark_phase(runtime, connection, logon, LogonPhase.ALLOCATED, desktop_id=desktop.id)
    return PendingConnection(desktop, start.requested_at, logon, building=choice.grown)


async def reconnect_desktop(
    runtime: Runtime, principal: Principal, desktop_id: uuid.UUID, audit: AuditOf
) -> Opened:
    """A new connection token to a desktop the caller holds.

    A persistent desktop the caller was logged off from (``ready``, still assigned) is
    allocated to them again first. One that rests powered off is started for them, and one on
    its way to ready for them is waited for: a :class:`PendingConnection` is answered
    (:func:`start_for_user`). A desktop handed to the caller by a start on connect carries on
    the start's logon.

    :raises NotFound: no such desktop, or it is not the caller's.
    :raises DesktopNotReady: it failed, or is being deleted.
    """
    user = str(principal.id)
    desktop = await store_desktops.get_desktop(runtime.db, desktop_id)
    if desktop is None or desktop.assigned_user != user:
        raise NotFound(f"You hold no desktop with the id {desktop_id}.")
    pool = await store_pools.get_pool(runtime.db, desktop.pool_id)
    if pool is None:
        raise NotFound(f"You hold no desktop with the id {desktop_id}.")
    if not await may_open(runtime.db, principal, pool.id):
        # The desktop is still assigned (a persistent one waits for its user's entitlement to
        # come back), but opening it needs the entitlement now.
        raise AccessRevoked(
            f"You may no longer open the desktops of the pool of desktop {desktop.name}."
        )
    url = tunnel_url(runtime)
    start = await starts.start_of(runtime.db, desktop_id)
    # A desktop started for the caller: this request carries on the logon that asked for it.
    continued = start.logon_id if start is not None and str(start.user_id) == user else None
    async with timed_logon(
        runtime,
        user_id=uuid.UUID(user),
        pool_id=pool.id,
        desktop_id=desktop_id,
        continued=continued,
    ) as logon:
        async with runtime.db.acquire() as connection, connection.transaction():
            await check_can_open_session(connection, runtime.licensing, desktop_id)
        if desktop.state is DesktopState.READY:
            async with runtime.db.acquire() as connection, connection.transaction():
                desktop = await store_desktops.apply_event(
                    connection, desktop_id, Allocated(user), pool=pool
                )
                await _audit_allocation(connection, audit, desktop, user)
        if desktop.state is not DesktopState.IN_USE:
            async with runtime.db.acquire() as connection, connection.transaction():
                pending = await start_for_user(
                    runtime, connection, pool, uuid.UUID(user), logon, audit, desktop_id=desktop_id
                )
            if pending is not None:
                await publish_desktop(runtime, pending.desktop)
                return pending
            # Nothing to wait for: it may have been handed over since it was read.
            desktop = await store_desktops.get_desktop(runtime.db, desktop_id) or desktop
            if desktop.state is not DesktopState.IN_USE or desktop.assigned_user != user:
                raise DesktopNotReady(
                    f"your desktop {desktop.name} is {desktop.state}; try again when it is ready",
                    headers=_RETRY,
                )
        # A desktop already the user's counts as allocated once its state is checked.
        await mark_phase(runtime, runtime.db, logon, LogonPhase.ALLOCATED)
        return await connect_desktop(runtime, url, uuid.UUID(user), desktop, pool, logon)


async def shadow_session(
    runtime: Runtime, principal: Principal, session_id: uuid.UUID, audit: AuditOf
) -> tuple[SessionRecord, DesktopConnection]:
    """A token that joins an open session read-only (an administrator watching a user).

    :raises NotFound: no such session. :raises SessionNotOpen: it ended, is itself a
        read-only view, or its tunnel has not finished the handshake.
    """
    session = await store.get_session(runtime.db, session_id)
    if session is None:
        raise NotFound(f"No session has the id {session_id}.")
    url = tunnel_url(runtime)
    if not session.is_open or session.read_only or session.connection_id is None:
        raise SessionNotOpen(
            f"session {session_id} cannot be joined: it "
            + (
                "has ended"
                if not session.is_open
                else "is a read-only view"
                if session.read_only
                else "has not connected to its desktop yet"
            )
        )
    desktop = await store_desktops.get_desktop(runtime.db, session.desktop_id)
    if desktop is None:
        raise SessionNotOpen(f"the desktop of session {session_id} is gone")
    target = DesktopTarget(protocol=session.protocol, hostname="", port=0)
    viewer = uuid.UUID(str(principal.id))
    async with runtime.db.acquire() as connection, connection.transaction():
        token, expires_at = await issue_token(
            runtime,
            connection,
            user_id=viewer,
            desktop=desktop,
            target=target,
            shadow_of=session.id,
        )
        await record_audit_event(
            connection,
            audit(
                "session.shadow",
                "sessions",
                str(session.id),
                {"desktop_id": str(desktop.id), "user_id": str(session.user_id)},
            ),
        )
    return session, DesktopConnection(desktop, token, url, session.protocol, expires_at)


# ------------------------------------------------------------------------------ sessions


async def get_session(runtime: Runtime, session_id: uuid.UUID) -> SessionRecord:
    """The session ``session_id``. :raises NotFound: there is none."""
    session = await store.get_session(runtime.db, session_id)
    if session is None:
        raise NotFound(f"No session has the id {session_id}.")
    return session


async def get_session_detail(
    runtime: Runtime, session_id: uuid.UUID
) -> tuple[SessionRecord, LogonRecord | None]:
    """The session ``session_id`` and the logon that opened it. :raises NotFound: none."""
    session = await get_session(runtime, session_id)
    return session, await store_logons.logon_of_session(runtime.db, session_id)


async def list_sessions(
    runtime: Runtime,
    *,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None,
    where: store.SessionFilter,
) -> list[SessionRecord]:
    """Sessions newest first (see :func:`deskpool.sessions.store.list_sessions`)."""
    return await store.list_sessions(runtime.db, limit=limit, after=after, where=where)


def disconnect_channel(gateway_id: str) -> str:
    """The Redis channel a gateway listens on for the sessions it must close."""
    return f"deskpool:gateway:{gateway_id}:disconnect"


def disconnect_message(session: SessionRecord) -> str:
    """What :func:`publish_disconnect` sends: the session's id, then the reason asked."""
    return f"{session.id} {session.disconnect_reason or SessionEndReason.ADMIN_DISCONNECT}"


async def publish_disconnect(runtime: Runtime, session: SessionRecord) -> None:
    """Tell the session's gateway at once (best effort: it also polls the database)."""
    try:
        channel = disconnect_channel(session.gateway_id)
        await runtime.kv.publish(channel, disconnect_message(session))
    except (RedisError, OSError) as error:
        log.warning("could not publish the disconnect of session %s: %s", session.id, error)


async def disconnect_session(
    runtime: Runtime, session_id: uuid.UUID, audit: AuditOf, reason: str = "admin_disconnect"
) -> SessionRecord:
    """Ask the gateway holding the session to close it (within seconds, wherever it runs).

    :raises NotFound: no such session. :raises SessionNotOpen: it has ended.
    """
    async with runtime.db.acquire() as connection, connection.transaction():
        session = await store.request_disconnect(connection, session_id, reason)
        if session is None:
            if await store.get_session(connection, session_id) is None:
                raise NotFound(f"No session has the id {session_id}.")
            raise SessionNotOpen(f"session {session_id} has ended")
        await record_audit_event(
            connection,
            audit(
                "session.disconnect",
                "sessions",
                str(session_id),
                {"reason": reason, "gateway_id": session.gateway_id},
            ),
        )
    await publish_disconnect(runtime, session)
    return session


# ------------------------------------------------------------------------------ logoff


async def close_desktop_session(
    connection: asyncpg.Connection, desktop_id: uuid.UUID
) -> Desktop | None:
    """Set ``in_session`` false when no user tunnel is open to the desktop any more."""
    if await store.has_open_session(connection, desktop_id):
        return None
    desktop = await store_desktops.get_desktop(connection, desktop_id, for_update=True)
    if desktop is None or not desktop.in_session:
        return desktop
    if desktop.state is not DesktopState.IN_USE:
        await connection.execute(
            "UPDATE desktops SET in_session = false, updated_at = now() WHERE id = $1", desktop_id
        )
        return desktop
    return await store_desktops.apply_event(connection, desktop_id, SessionClosed())


async def log_off(
    connection: asyncpg.Connection, desktop_id: uuid.UUID, why: str, audit: AuditOf = system_audit
) -> Desktop | None:
    """Log the user of a desktop in use off, if no tunnel is open to it; ``None`` otherwise.

    A persistent desktop becomes ``ready`` and stays its user's; a non-persistent one is
    rebuilt (``refreshing``, with its ``desktop.rebuild`` job) before anyone else gets it.
    """
    async with connection.transaction():
        desktop = await store_desktops.get_desktop(connection, desktop_id, for_update=True)
        if desktop is None or desktop.state is not DesktopState.IN_USE:
            return None
        if await store.has_open_session(connection, desktop_id):
            return None
        after = await store_desktops.apply_event(connection, desktop_id, Released())
        if after.state is DesktopState.REFRESHING:
            await enqueue_desktop_job(connection, REBUILD, after)
        await record_audit_event(
            connection,
            audit(
                "desktop.logoff",
                "desktops",
                str(desktop_id),
                {"user_id": desktop.assigned_user, "reason": why, "state": str(after.state)},
            ),
        )
    return after
