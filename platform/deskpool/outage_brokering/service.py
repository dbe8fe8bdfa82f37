"""Opening a desktop, through the database or, while it is away, from the snapshot in Redis.

:func:`open_pool_desktop` and :func:`reconnect_desktop` are the API's opening path. They run
:mod:`deskpool.sessions.service`'s use cases; when the database is away (lost or refusing
connections, :func:`database_unreachable`; a statement that only timed out is a 503), or
while acts of an outage wait to be written to it (the journal is not empty: Redis is then the
truth, and the database would hand out a desktop Redis already gave), they serve from the
snapshot instead (:func:`open_from_snapshot`):

- the pool must be in the snapshot (otherwise 503 with ``Retry-After``: it may be newer than
  the snapshot, and only the database could tell it from no pool) and the caller entitled to
  it (as the database would judge, with his groups as of the snapshot) or hold
  ``pools:manage``; otherwise 404, as ever;
- a pool that records its sessions is not brokered (recording needs the database): 503;
- the desktop is claimed in Redis (:func:`deskpool.outage_brokering.claims.claim`): the one
  the caller holds in the pool, or a ready one nobody holds; none: 503
  ``no_desktop_available``; over the license's sessions: 409 ``license_limit_reached``;
- a connection token is issued in Redis for ``SESSION_TOKEN_TTL``, its target the one the
  snapshot sealed; the logon and the token are journaled.

A desktop handed out through the database leaves the snapshot's ready desktops at once
(:func:`deskpool.outage_brokering.claims.note_handed_out`).
"""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
from asyncpg.exceptions import QueryCanceledError
from redis.exceptions import RedisError

from deskpool.db.bounded import DatabaseNotAnswering
from deskpool.desktops.allocation import NoDesktopAvailable
from deskpool.errors import NotFound, ServiceUnavailable
from deskpool.identity.principal import Principal
from deskpool.licensing.model import LicenseLimitReached
from deskpool.outage_brokering import claims
from deskpool.outage_brokering.model import ActKind, SnapshotDesktop, SnapshotPool, text_of
from deskpool.outage_brokering.snapshot import SnapshotStale, keys_of, open_target
from deskpool.outages import DATABASE, outage_of
from deskpool.pools.model import Desktop
from deskpool.runtime import Runtime
from deskpool.sessions import opening
from deskpool.sessions import service as sessions
from deskpool.sessions.model import new_token, target_to_json, token_key
from deskpool.sessions.service import AuditOf, DesktopConnection, Opened
from deskpool.sessions.tokens import token_context, token_ttl, tunnel_url

log = logging.getLogger(__name__)

_RETRY = {"Retry-After": "2"}
_DATABASE_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)


def database_unreachable(error: BaseException) -> bool:
    """Whether ``error`` says the database is away (lost, refusing), not merely slow.

    A statement that timed out (the client's bound, the server's ``statement_timeout``, or the
    pool's pause after one: :class:`~deskpool.db.bounded.DatabaseNotAnswering`) is no reason to
    broker from the snapshot: the database may have committed the very opening whose answer
    did not come, and a busy database is still the truth. The caller gets 503 with
    ``Retry-After`` instead. Brokering from the snapshot during a login storm handed desktops
    the database had already given (the login-storm benchmark: up to 22 desktops with two
    users in a round).
    """
    if outage_of(error) != DATABASE:
        return False
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, TimeoutError | QueryCanceledError | DatabaseNotAnswering):
            return False
        current = current.__cause__ or current.__context__
    return True


class PoolNotBrokered(ServiceUnavailable):
    """The database is away and this pool cannot be brokered without it (recorded, or unknown)."""

    code = "dependency_unavailable"
    title = "A dependency is unavailable"


async def _journal_waits(runtime: Runtime) -> bool:
    """Whether acts of an outage wait to be written (``False`` when Redis does not answer)."""
    try:
        return await claims.pending(runtime.kv, keys_of(runtime)) > 0
    except (RedisError, OSError):
        return False


async def _note(runtime: Runtime, opened: Opened, user_id: str) -> None:
    """A desktop handed out through the database leaves the snapshot's ready ones."""
    if not isinstance(opened, DesktopConnection):
        return
    desktop = opened.desktop
    try:
        await claims.note_handed_out(
            runtime.kv,
            keys_of(runtime),
            desktop_id=desktop.id,
            pool_id=desktop.pool_id,
            user_id=user_id,
        )
    except (RedisError, OSError) as error:
        log.warning("could not note a desktop handed out in Redis: %s", type(error).__name__)


async def withhold(runtime: Runtime, desktop: Desktop) -> None:
    """A free desktop about to be handed out through the database leaves the ready ones.

    Called in the allocating transaction (:func:`deskpool.sessions.service.install_withhold`),
    so that no outage that begins before the snapshot hears of the allocation hands the
    desktop out again; when the transaction rolls back, the next refresh puts it back (after
    :data:`~deskpool.outage_brokering.model.TAKEN_FOR_MS`).
    """
    try:
        await claims.withhold(runtime.kv, keys_of(runtime), desktop.id, desktop.pool_id)
    except (RedisError, OSError) as error:
        log.warning("could not withhold a desktop in Redis: %s", type(error).__name__)


async def open_pool_desktop(
    runtime: Runtime, principal: Principal, pool_id: uuid.UUID, audit: AuditOf
) -> Opened:
    """:func:`deskpool.sessions.opening.open_pool_desktop`, or from the snapshot."""
    if not await _journal_waits(runtime):
        try:
            opened = await opening.open_pool_desktop(runtime, principal, pool_id, audit)
        except _DATABASE_ERRORS as error:
            if not database_unreachable(error):
                raise
            log.info("the database is away: opening pool %s from the outage snapshot", pool_id)
        else:
            await _note(runtime, opened, principal.id)
            return opened
    return await open_from_snapshot(runtime, principal, pool_id)


async def reconnect_desktop(
    runtime: Runtime, principal: Principal, desktop_id: uuid.UUID, audit: AuditOf
) -> Opened:
    """:func:`deskpool.sessions.service.reconnect_desktop`, or from the snapshot."""
    if not await _journal_waits(runtime):
        try:
            return await sessions.reconnect_desktop(runtime, principal, desktop_id, audit)
        except _DATABASE_ERRORS as error:
            if not database_unreachable(error):
                raise
            log.info("the database is away: reconnecting from the outage snapshot")
    return await open_from_snapshot(runtime, principal, None, desktop_id=desktop_id)


async def open_from_snapshot(
    runtime: Runtime,
    principal: Principal,
    pool_id: uuid.UUID | None,
    *,
    desktop_id: uuid.UUID | None = None,
) -> DesktopConnection:
    """Hand the caller a desktop of ``pool_id`` (or his ``desktop_id``) from the snapshot.

    :raises NotFound: no desktop of his, or a pool the caller may not open.
    :raises PoolNotBrokered: the pool records its sessions, or the snapshot does not hold it.
    :raises NoDesktopAvailable: no ready desktop is left in the snapshot.
    :raises LicenseLimitReached: one more session would go beyond the license.
    :raises SnapshotStale: access was taken away since the snapshot was refreshed.
    """
    kv, keys = runtime.kv, keys_of(runtime)
    entry: SnapshotDesktop | None = None
    if desktop_id is not None:
        raw_desktop = await kv.hget(keys.desktops, str(desktop_id))
        holder = await kv.hget(keys.holders, str(desktop_id))
        if raw_desktop is None or holder is None or text_of(holder) != principal.id:
            raise NotFound(f"You hold no desktop with the id {desktop_id}.")
        entry = SnapshotDesktop.from_json(raw_desktop)
        pool_id = entry.pool_id
    assert pool_id is not None
    raw_pool = await kv.hget(keys.pools, str(pool_id))
    pool = None if raw_pool is None else SnapshotPool.from_json(raw_pool)
    if pool is None and desktop_id is None:
        # Newer than the snapshot, or no pool at all: only the database could say which.
        raise PoolNotBrokered(
            "The database is unavailable, and the outage snapshot does not hold this pool; "
            "retry it.",
            headers=_RETRY,
        )
    if pool is None or not pool.may_open(principal):
        if desktop_id is not None:
            raise sessions.AccessRevoked("You may no longer open the desktops of this pool.")
        raise NotFound(f"You may open no pool with the id {pool_id}.")
    if pool.recorded:
        raise PoolNotBrokered(
            "The database is unavailable, and this pool records its sessions; retry it.",
            headers=_RETRY,
        )
    url = tunnel_url(runtime)
    logon_id = uuid.uuid4()
    claimed = await claims.claim(
        kv, keys, user_id=principal.id, pool_id=pool_id, logon_id=logon_id, desktop_id=desktop_id
    )
    if claimed.outcome == "stale":
        raise SnapshotStale(
            "The database is unavailable, and access changed just before: retry it.",
            headers=_RETRY,
        )
    if claimed.outcome == "none":
        raise NoDesktopAvailable(
            f"pool {pool.name} has no desktop ready while the database is unavailable",
            headers=_RETRY,
        )
    if claimed.outcome == "not_held":
        raise NotFound(f"You hold no desktop with the id {desktop_id}.")
    if claimed.outcome == "license":
        raise LicenseLimitReached(
            f"The license allows {claimed.limit} concurrent sessions; all are in use."
        )
    assert claimed.desktop_id is not None
    if entry is None or entry.id != claimed.desktop_id:
        raw = await kv.hget(keys.desktops, str(claimed.desktop_id))
        assert raw is not None, "a claimed desktop is in the snapshot"
        entry = SnapshotDesktop.from_json(raw)
    return await _issue(runtime, principal.id, entry, logon_id, url)


async def _issue(
    runtime: Runtime, user_id: str, desktop: SnapshotDesktop, logon_id: uuid.UUID, url: str
) -> DesktopConnection:
    """A connection token to ``desktop`` kept in Redis, and its issue journaled."""
    kv, keys = runtime.kv, keys_of(runtime)
    target = open_target(runtime, desktop)
    token = new_token(from_snapshot=True)
    key = token_key(token)
    sealed = runtime.secret_store.encrypt(
        json.dumps(target_to_json(target)).encode(), token_context(key)
    )
    ttl = token_ttl(runtime)
    record = {
        "user_id": user_id,
        "desktop_id": str(desktop.id),
        "pool_id": str(desktop.pool_id),
        "desktop_name": desktop.name,
        "protocol": target.protocol,
        "logon_id": str(logon_id),
        "sealed_target": sealed.hex(),
    }
    await claims.put_token(kv, keys, key, record, ttl)
    await claims.journal(kv, keys, ActKind.TOKEN_ISSUED, logon_id=logon_id, user_id=user_id)
    return DesktopConnection(
        desktop.as_desktop(user_id),
        token,
        url,
        target.protocol,
        datetime.now(UTC) + timedelta(seconds=ttl),
    )
