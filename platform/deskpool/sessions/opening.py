"""Opening a pool's desktop: a desktop and a connection token in a handful of round trips.

The use case behind ``POST /api/v1/me/pools/{id}/desktop`` (issue 39): the SQL is
:mod:`deskpool.sessions.store_opening`'s, the rules are the allocation's
(:mod:`deskpool.desktops.allocation`), the state machine's and the license's; what an opening
shares with reconnecting (start on connect, asking the driver for a desktop with no recorded
address) is :mod:`deskpool.sessions.service`'s.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from datetime import UTC, datetime

import asyncpg

from deskpool.client_policy.model import offered
from deskpool.db.bounded import statement_bound
from deskpool.desktops import store_allocation
from deskpool.desktops.allocation import (
    DesktopNotReady,
    NoDesktopAvailable,
    allocation_candidates,
    choose_desktop,
    held_desktops,
)
from deskpool.desktops.states import Allocated, transition
from deskpool.errors import DeskpoolError, NotFound
from deskpool.identity.principal import Principal
from deskpool.licensing.sessions import check_opening_session
from deskpool.live.publishers import publish_desktop
from deskpool.pools import store as store_pools
from deskpool.pools.model import Pool
from deskpool.runtime import Runtime
from deskpool.sessions import store_logons, store_opening
from deskpool.sessions.logon_timing import failure_counter, observe_phase
from deskpool.sessions.logons import LogonPhase
from deskpool.sessions.service import (
    AuditOf,
    DesktopConnection,
    Opened,
    connect_desktop,
    may_open,
    start_for_user,
    withhold,
)
from deskpool.sessions.tokens import (
    open_address,
    preference_of,
    seal_token,
    token_ttl,
    tunnel_url,
)
from deskpool.sessions.tunnel import DesktopTarget
from deskpool.starts.store import GROWTH_LOCK_WAIT

log = logging.getLogger(__name__)


class _NoSuchPool(NotFound):
    """No such pool, or one the caller may not open: no logon is recorded."""


class _LockAlone(Exception):
    """The shared growth lock left the license's room uncertain: open again with it alone."""


async def open_pool_desktop(
    runtime: Runtime, principal: Principal, pool_id: uuid.UUID, audit: AuditOf
) -> Opened:
    """Hand the caller a desktop of the pool and a connection token to it.

    In a handful of round trips (issue 39; :mod:`deskpool.sessions.store_opening`): the locks
    and the pool, the candidates, one statement writing the desktop, the logon's phases, the
    token, the audit event, and the commit. The allocation follows
    :mod:`deskpool.desktops.allocation`'s rules (the user's own desktop first, else the oldest
    free ready one, locked ``SKIP LOCKED``); the license's session check is
    :func:`deskpool.licensing.sessions.check_opening_session` under the growth lock held
    until the commit. The token's target is the desktop's recorded address; a desktop with
    none has its driver asked after the allocation commits (:func:`_connect`). When no
    desktop is ready but one can be started for the caller (a powered-off one, or his own on
    its way to ready), it is, in the same transaction (:func:`start_for_user`), and a
    :class:`PendingConnection` is answered.

    :raises NotFound: no such pool, or one the caller may not open: both answer the same, so
        the answer never tells whether a pool exists.
    :raises GatewayNotConfigured: see :func:`tunnel_url` (to a caller who may open the pool).
    """
    try:
        url = tunnel_url(runtime)
    except DeskpoolError:
        # Configured or not, a pool the caller may not open answers 404: nothing is told.
        pool = await store_pools.get_pool(runtime.db, pool_id)
        if pool is None or not await may_open(runtime.db, principal, pool_id):
            raise _NoSuchPool(f"You may open no pool with the id {pool_id}.") from None
        raise
    user_id = uuid.UUID(str(principal.id))
    logon, asked_at = uuid.uuid4(), datetime.now(UTC)
    try:
        try:
            alone = runtime.licensing.sessions_near_limit
            with _bound(alone):
                return await _open(runtime, principal, pool_id, audit, url, logon, asked_at, alone)
        except _LockAlone:
            with _bound(True):
                return await _open(runtime, principal, pool_id, audit, url, logon, asked_at, True)
    except _NoSuchPool:
        raise
    except Exception as error:
        code = getattr(error, "code", None)
        reason = code if isinstance(code, str) else "error"
        failure_counter(runtime.metrics).labels(str(pool_id), reason).inc()
        try:
            await store_opening.record_failed_logon(
                runtime.db,
                logon,
                user_id=user_id,
                pool_id=pool_id,
                asked_at=asked_at,
                reason=reason,
            )
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as lost:
            log.warning("could not record the failed logon %s: %s", logon, type(lost).__name__)
        raise


def _bound(alone: bool) -> contextlib.AbstractContextManager[None]:
    """The statements' bound of an opening: with the growth lock alone, as long as it waits.

    Openings that take the license's growth lock alone (near the limit, or to start or build a
    desktop) wait for each other's commits, in the database, on the lock. Twenty users opening
    a pool with nothing ready at once queue there; on a loaded machine the last waited more
    than the 1 s ``DATABASE_STATEMENT_TIMEOUT`` and was answered 503 "database unavailable"
    with the database answering all along (seen once in a full run of the suite). Such an
    opening waits as long as one waits for the pool's growth lock (:data:`GROWTH_LOCK_WAIT`);
    sharing the lock, it only tries it (:func:`store_opening.lock_pool`) and waits for nobody.
    """
    return statement_bound(GROWTH_LOCK_WAIT) if alone else contextlib.nullcontext()


async def _open(
    runtime: Runtime,
    principal: Principal,
    pool_id: uuid.UUID,
    audit: AuditOf,
    url: str,
    logon: uuid.UUID,
    asked_at: datetime,
    alone: bool,
) -> Opened:
    user = str(principal.id)
    user_id = uuid.UUID(user)
    async with runtime.db.acquire() as connection, connection.transaction():
        locked = await store_opening.lock_pool(
            connection,
            pool_id,
            user,
            principal.group_ids,
            manager=principal.may("pools:manage"),
            growth_alone=alone,
        )
        if locked is None or not locked.entitled:
            raise _NoSuchPool(f"You may open no pool with the id {pool_id}.")
        if not locked.growth_locked:  # others wait for it alone: wait in line with them
            raise _LockAlone()
        pool, policy = locked.pool, locked.policy
        # Alone (no other opening in the way), a free desktop the worker locked a moment is
        # waited for: passed over, the only free desktop of a pool was refused 503.
        seen = await store_opening.read_candidates(
            connection, pool.id, user, preference_of(policy), skip_locked=not alone
        )
        try:
            chosen = await _choose(connection, pool, seen, user)
        except (NoDesktopAvailable, DesktopNotReady):
            # A start on connect, or a desktop built for him, takes the growth lock alone (the
            # license's desktops; its session check near the limit): holding it shared here, two
            # openings could each wait for the other's. So it runs with it alone.
            if not alone:
                raise _LockAlone() from None
            await store_logons.start_logon(
                connection, user_id=user_id, pool_id=pool.id, logon_id=logon, asked_at=asked_at
            )
            pending = await start_for_user(runtime, connection, pool, user_id, logon, audit)
            if pending is None:
                raise
        else:
            pending = None
            desktop = transition(chosen.desktop, Allocated(user), pool=pool, now=datetime.now(UTC))
            await withhold(runtime, desktop)
            usage, has_session, connections = seen.counted(chosen)
            # Shared, the room must cover the openings holding the lock now, not one per
            # connection the server allows (see check_opening_session). This one is among
            # them: none counted means the count was not made after the lock (never trusted).
            concurrent = connections if alone or locked.holders < 1 else locked.holders
            if not await check_opening_session(
                connection,
                runtime.licensing,
                seen.license,
                (usage, has_session, concurrent),
                alone=alone,
            ):
                raise _LockAlone()
            target = _known_target(runtime, chosen)
            token, issued = _token_for(runtime, target)
            event = audit(
                "desktop.allocate",
                "desktops",
                str(desktop.id),
                {"pool_id": str(desktop.pool_id), "user_id": user},
            )
            written = await store_opening.write_opening(
                connection, desktop, logon_id=logon, asked_at=asked_at, event=event, token=issued
            )
    if pending is not None:
        await publish_desktop(runtime, pending.desktop)
        return pending
    for phase, seconds in zip(_WRITTEN_PHASES, written.phases, strict=True):
        observe_phase(runtime, phase, seconds)
    if target is None or token is None or written.token_expires_at is None:
        return await connect_desktop(runtime, url, user_id, written.desktop, pool, logon, policy)
    return DesktopConnection(
        written.desktop,
        token,
        url,
        target.protocol,
        written.token_expires_at,
        recorded=policy.recording.enabled,
        client=offered(policy.client, target.protocol, target.parameters),
    )


#: The phases :func:`store_opening.write_opening` records, in its order.
_WRITTEN_PHASES = (LogonPhase.ALLOCATED, LogonPhase.GUEST_READY, LogonPhase.TOKEN_ISSUED)


async def _choose(
    connection: asyncpg.Connection, pool: Pool, seen: store_opening.Candidates, user: str
) -> store_opening.Candidate:
    """The candidate the allocation's rules give ``user`` (see :func:`allocate_desktop`).

    :raises PoolUnavailable: :raises DesktopNotReady: :raises NoDesktopAvailable: as there.
    """
    held = held_desktops(pool, [c.desktop for c in seen.held], user)
    candidates, new_assignment = allocation_candidates(pool, held, user)
    if candidates and not new_assignment:
        return next(c for c in seen.held if c.desktop.id == candidates[0].id)
    if new_assignment:
        if seen.free is not None and seen.free.desktop.is_available:
            return seen.free
        # He holds desktops none of which he gets: the free one was not read with them.
        free = await store_allocation.lock_free_desktop(connection, pool) if seen.held else None
        if free is not None:
            return store_opening.Candidate(free, held=False, address=None, has_session=False)
    choose_desktop(pool, held, user)
    raise AssertionError("choose_desktop chose a desktop allocation_candidates did not offer")


def _known_target(runtime: Runtime, chosen: store_opening.Candidate) -> DesktopTarget | None:
    """The chosen desktop's recorded address, if it has one that opens."""
    if chosen.address is None:
        return None
    return open_address(runtime, chosen.desktop.id, chosen.address)


def _token_for(
    runtime: Runtime, target: DesktopTarget | None
) -> tuple[str | None, store_opening.IssuedToken | None]:
    """A new token for ``target`` and what is stored of it (nothing without a target)."""
    if target is None:
        return None, None
    token, key, sealed = seal_token(runtime, target)
    return token, store_opening.IssuedToken(key, target.protocol, sealed, token_ttl(runtime))
