"""The snapshot in Redis of what brokering needs, kept while the database answers.

:func:`refresh_snapshot` (run by the worker every ``OUTAGE_SNAPSHOT_INTERVAL``, and at once
after a change that took access away) reads from the database each pool's entitlements and
session limits, the desktops that can be handed out (free, ready, clean) or reconnected to
(in use by their user) with their connection targets (asked of the cluster's driver once per
VM, sealed by the secret store), the desktops counted against the license's sessions and the
license's limit, and every remembered principal as the database says now (disabled, groups,
permissions). It installs all of it in one Redis transaction, and only if no act was journaled
and no access was taken away meanwhile (``WATCH``): a refresh never overwrites a claim.

Principals are remembered as they sign in (:class:`PrincipalMemory`, the authenticator's
memory); a change that takes access away marks the snapshot stale (:func:`mark_access_changed`,
called by revocation after every such change), and a stale snapshot serves nobody until it is
refreshed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Collection
from datetime import UTC, datetime

import redis.asyncio as redis
from redis.exceptions import RedisError
from redis.typing import EncodableT, FieldT

from deskpool.auth import VerifiedToken
from deskpool.errors import DeskpoolError, ServiceUnavailable
from deskpool.identity import store as identity_store
from deskpool.identity.kinds import principal_kind
from deskpool.identity.principal import Principal
from deskpool.identity.sign_in import resolve_effective
from deskpool.licensing.model import Resource
from deskpool.licensing.service import current_judgement
from deskpool.outage_brokering import store
from deskpool.outage_brokering.claims import install_holders_and_ready, now_ms
from deskpool.outage_brokering.model import (
    TARGET_SECRET_KIND,
    Keys,
    RememberedPrincipal,
    SnapshotDesktop,
    SnapshotPool,
    Status,
    held_key,
    subject_key,
)
from deskpool.pools import store as store_pools
from deskpool.pools.model import Desktop, DesktopState, Pool
from deskpool.runtime import Runtime
from deskpool.secrets import SecretContext
from deskpool.sessions import store_policies
from deskpool.sessions.model import SessionPolicy, target_from_json, target_to_json
from deskpool.sessions.tokens import resolve_target
from deskpool.sessions.tunnel import DesktopTarget

log = logging.getLogger(__name__)

#: Targets asked of drivers at once by one refresh.
TARGETS_AT_ONCE = 8


class SnapshotStale(ServiceUnavailable):
    """Access was taken away since the snapshot was refreshed: nothing is served from it."""

    code = "dependency_unavailable"
    title = "A dependency is unavailable"


def keys_of(runtime: Runtime) -> Keys:
    """The snapshot's keys in ``runtime``'s Redis."""
    return Keys(str(runtime.config["KVSTORE_KEY_PREFIX"]))


def target_context(desktop_id: uuid.UUID) -> SecretContext:
    """The secret context a snapshot's desktop target is sealed for."""
    return SecretContext.of(TARGET_SECRET_KIND, desktop_id, "target")


def open_target(runtime: Runtime, desktop: SnapshotDesktop) -> DesktopTarget:
    """The desktop's connection target, unsealed."""
    plain = runtime.secret_store.decrypt(
        bytes.fromhex(desktop.sealed_target), target_context(desktop.id)
    )
    return target_from_json(json.loads(plain))


async def is_fresh(kv: redis.Redis, keys: Keys, user_id: str | None = None) -> bool:
    """Whether the snapshot was read after the last change that took access away.

    With ``user_id``: also after the last one that concerned him.
    """
    epoch, refreshed = await kv.mget(keys.epoch, keys.refreshed_epoch)
    if refreshed is None or epoch != refreshed:
        return False
    return user_id is None or not await kv.hexists(keys.revoked, user_id)


async def stale(kv: redis.Redis, keys: Keys) -> bool:
    """Whether a change took access away since the snapshot was read (from anyone)."""
    epoch, refreshed = await kv.mget(keys.epoch, keys.refreshed_epoch)
    return refreshed is None or epoch != refreshed or bool(await kv.hlen(keys.revoked))


async def mark_access_changed(runtime: Runtime, users: Collection[uuid.UUID] | None) -> None:
    """A change may have taken access from ``users`` (``None``: from anyone).

    Nothing is served from the snapshot to them (to anyone, for ``None``) until it is read
    again.
    """
    kv, keys = runtime.kv, keys_of(runtime)
    try:
        if users is None:
            await kv.incr(keys.epoch)
        elif users:
            revocation = await kv.incr(keys.revocations)
            await kv.hset(keys.revoked, mapping={str(user): revocation for user in users})
    except (RedisError, OSError) as error:
        log.warning("could not mark the outage snapshot stale: %s", type(error).__name__)


# ------------------------------------------------------------------------------ principals


#: How long a principal this process wrote is not written again while it signs in unchanged.
#: Meanwhile the worker's refresh keeps every remembered principal as the database says; the
#: bound covers a Redis that lost what it held.
REWRITE_AFTER_SECONDS = 300.0
#: Principals kept as written, at most (the longest unwritten are forgotten first).
WRITTEN_KEPT = 100_000
#: Seconds the writer gathers the principals of sign-ins before writing them in one pipeline.
GATHER_SECONDS = 0.05


class PrincipalMemory:
    """The authenticator's memory of principals (:mod:`deskpool.identity.authenticator`).

    Principals are written in the background, those of the sign-ins made while a write is on
    its way in the next one: a cold sign-in waits for no Redis round trip, and a burst of
    them costs a few writes (each one pipeline of two ``HSET``), not one each. A principal
    this process wrote less than :data:`REWRITE_AFTER_SECONDS` ago, exactly as it signs in
    now, is not written again: its JSON and its write were a tenth of a busy api's time.
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.keys = keys_of(runtime)
        #: Principals to write: user id -> the principal.
        self._pending: dict[str, Principal] = {}
        #: Principals written: user id -> the principal and when (``time.monotonic``).
        self._written: dict[str, tuple[Principal, float]] = {}
        self._writer: asyncio.Task[None] | None = None

    async def remember(self, principal: Principal) -> None:
        """Keep ``principal`` as of this sign-in (best effort, written in the background)."""
        written = self._written.get(principal.id)
        if (
            written is not None
            and written[0] == principal
            and time.monotonic() - written[1] < REWRITE_AFTER_SECONDS
        ):
            return
        self._pending[principal.id] = principal
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write(), name="principal-memory")

    async def written(self) -> None:
        """Wait until every principal remembered so far is written (or failed to be)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def _write(self) -> None:
        while self._pending:
            # Gathered for a moment: cold sign-ins arrive one by one, and writing each alone
            # made one pipeline per sign-in (5 % of a busy api).
            await asyncio.sleep(GATHER_SECONDS)
            batch, self._pending = self._pending, {}
            try:
                async with self.runtime.kv.pipeline(transaction=False) as pipe:
                    pipe.hset(
                        self.keys.principals,
                        mapping={
                            user: RememberedPrincipal(principal).to_json()
                            for user, principal in batch.items()
                        },
                    )
                    pipe.hset(
                        self.keys.subjects,
                        mapping={
                            subject_key(p.issuer, p.subject, p.kind): user
                            for user, p in batch.items()
                        },
                    )
                    await pipe.execute()
            except (RedisError, OSError) as error:
                log.warning("could not remember principals for outages: %s", type(error).__name__)
                continue
            self._remember_written(batch)

    def _remember_written(self, batch: dict[str, Principal]) -> None:
        now = time.monotonic()
        for user, principal in batch.items():
            self._written.pop(user, None)  # to the end: the oldest write is forgotten first
            self._written[user] = (principal, now)
        while len(self._written) > WRITTEN_KEPT:
            del self._written[next(iter(self._written))]

    async def recall(self, token: VerifiedToken) -> Principal | None:
        """The principal of a known user as the snapshot holds it (``None``: not known).

        :raises SnapshotStale: access was taken away since the snapshot was refreshed.
        """
        kind = principal_kind(token.subject, token.claims)
        kv = self.runtime.kv
        user_id = await kv.hget(self.keys.subjects, subject_key(token.issuer, token.subject, kind))
        if user_id is None:
            return None
        raw = await kv.hget(self.keys.principals, user_id)
        if raw is None:
            return None
        remembered = RememberedPrincipal.from_json(raw)
        if not remembered.matches(token.groups, token.roles):
            return None
        if not await is_fresh(kv, self.keys, remembered.principal.id):
            raise SnapshotStale(
                "The database is unavailable, and access changed just before: retry it."
            )
        return remembered.principal


async def principal_of(runtime: Runtime, user_id: uuid.UUID) -> Principal | None:
    """A remembered principal by its user id."""
    raw = await runtime.kv.hget(keys_of(runtime).principals, str(user_id))
    return None if raw is None else RememberedPrincipal.from_json(raw).principal


# ------------------------------------------------------------------------------ refresh


async def _principals_now(
    runtime: Runtime, keys: Keys, only: set[str] | None
) -> tuple[dict[str, str], list[str]]:
    """Remembered principals (``only`` those, when given) as the database says now.

    :returns: them, and the users that no longer exist.
    """
    if only is None:
        remembered = await runtime.kv.hgetall(keys.principals)
    else:
        users = sorted(only)
        values = await runtime.kv.hmget(keys.principals, users) if users else []
        remembered = {user: value for user, value in zip(users, values, strict=True) if value}
    now: dict[str, str] = {}
    gone: list[str] = []
    async with runtime.db.acquire() as connection:
        for raw_id, raw in remembered.items():
            user_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
            before = RememberedPrincipal.from_json(raw).principal
            user = await identity_store.get_user(connection, uuid.UUID(user_id))
            if user is None:
                gone.append(user_id)
                continue
            groups, effective = await resolve_effective(
                connection, user_id, before.claimed_groups, before.claimed_roles
            )
            principal = Principal(
                id=before.id,
                issuer=before.issuer,
                subject=before.subject,
                email=before.email,
                display_name=before.display_name,
                disabled=bool(user["disabled"]),
                groups=groups,
                claimed_groups=before.claimed_groups,
                claimed_roles=before.claimed_roles,
                effective=effective,
                kind=before.kind,
            )
            now[user_id] = RememberedPrincipal(principal).to_json()
    return now, gone


async def _targets(
    runtime: Runtime,
    desktops: list[Desktop],
    pools: dict[uuid.UUID, Pool],
    policies: dict[uuid.UUID, SessionPolicy],
    cached: dict[str, SnapshotDesktop],
) -> dict[uuid.UUID, SnapshotDesktop]:
    """Each desktop with its sealed target (asked of its driver once per VM)."""
    found: dict[uuid.UUID, SnapshotDesktop] = {}
    limit = asyncio.Semaphore(TARGETS_AT_ONCE)

    async def one(desktop: Desktop) -> None:
        known = cached.get(str(desktop.id))
        if known is not None and known.vm_id == desktop.vm_id:
            found[desktop.id] = known
            return
        pool = pools.get(desktop.pool_id)
        if pool is None or desktop.vm_id is None:
            return
        async with limit:
            try:
                target = await resolve_target(runtime, desktop, pool, policies[pool.id])
            except DeskpoolError as error:
                log.info("outage snapshot: no target for desktop %s (%s)", desktop.name, error.code)
                return
        sealed = runtime.secret_store.encrypt(
            json.dumps(target_to_json(target)).encode(), target_context(desktop.id)
        )
        found[desktop.id] = SnapshotDesktop(
            id=desktop.id,
            pool_id=desktop.pool_id,
            name=desktop.name,
            vm_id=desktop.vm_id,
            protocol=target.protocol,
            sealed_target=sealed.hex(),
            created_at=desktop.created_at,
        )

    await asyncio.gather(*(one(desktop) for desktop in desktops))
    return found


async def refresh_snapshot(runtime: Runtime, *, every_principal: bool = True) -> bool:
    """Read what brokering needs from the database and install it in Redis.

    Every remembered principal is read again when ``every_principal``; otherwise only those
    a change took access from since the last read (the others keep what they were given,
    which a change that takes nothing away cannot make wrong).

    :returns: whether it was installed (``False``: an act was journaled or access was taken
        away meanwhile, or no master key seals targets; the next refresh tries again).
    """
    if runtime.secret_store.current_key_id is None:
        return False
    kv, keys = runtime.kv, keys_of(runtime)
    await kv.setnx(keys.epoch, 0)
    read_from_ms = now_ms()
    acts_before, epoch_before, revocations_before = await kv.mget(
        keys.acts, keys.epoch, keys.revocations
    )
    async with runtime.db.acquire() as connection, connection.transaction():
        pool_rows = await store.pools(connection)
        pools = {
            row.id: pool
            for row in pool_rows
            if (pool := await store_pools.get_pool(connection, row.id)) is not None
        }
        policies = await store_policies.policies_of(connection, list(pools))
        desktops = await store.servable_desktops(connection)
        counted = await store.counted_desktops(connection)
        judgement = await current_judgement(connection, runtime.licensing)
    only = None
    if not every_principal:
        marked = await kv.hkeys(keys.revoked)
        only = {user.decode() if isinstance(user, bytes) else str(user) for user in marked}
    principals, gone = await _principals_now(runtime, keys, only)
    cached = {
        (k.decode() if isinstance(k, bytes) else str(k)): SnapshotDesktop.from_json(v)
        for k, v in (await kv.hgetall(keys.desktops)).items()
    }
    targets = await _targets(runtime, desktops, pools, policies, cached)
    limit = judgement.limits.of(Resource.SESSIONS)
    snapshot_pools = {
        row.id: SnapshotPool(
            id=row.id,
            name=row.name,
            entitled_users=row.entitled_users,
            entitled_groups=row.entitled_groups,
            recorded=policies[row.id].recording.enabled if row.id in policies else True,
            idle_timeout=_seconds(policies[row.id].idle_timeout) if row.id in policies else None,
            max_duration=(
                _seconds(policies[row.id].max_session_duration) if row.id in policies else None
            ),
        )
        for row in pool_rows
    }
    enabled = {row.id for row in pool_rows if row.state == "enabled"}
    holders: list[tuple[str, str, str]] = []
    ready: dict[uuid.UUID, list[str]] = {}
    for desktop in desktops:
        if desktop.id not in targets:
            continue
        if desktop.state is DesktopState.IN_USE and desktop.assigned_user:
            holders.append(
                (
                    str(desktop.id),
                    desktop.assigned_user,
                    held_key(desktop.assigned_user, desktop.pool_id),
                )
            )
        elif desktop.pool_id in enabled:
            ready.setdefault(desktop.pool_id, []).append(str(desktop.id))
    async with kv.pipeline(transaction=True) as pipe:
        # Not the withheld desktops: what openings withhold meanwhile is read at the EXEC.
        await pipe.watch(keys.acts, keys.epoch, keys.revoked)
        if await pipe.get(keys.acts) != acts_before or await pipe.get(keys.epoch) != epoch_before:
            return False
        old_pools = await pipe.hkeys(keys.pools)
        # Revocations the database showed when it was read are in this snapshot.
        seen = int(revocations_before or 0)
        revoked = [
            user
            for user, revocation in (await pipe.hgetall(keys.revoked)).items()
            if int(revocation) <= seen
        ]
        pipe.multi()
        for old in old_pools:
            pipe.delete(keys.ready(old.decode() if isinstance(old, bytes) else str(old)))
        pipe.delete(keys.pools, keys.desktops, keys.counted, keys.license)
        if snapshot_pools:
            pipe.hset(
                keys.pools,
                mapping={str(kept.id): kept.to_json() for kept in snapshot_pools.values()},
            )
        if targets:
            pipe.hset(
                keys.desktops,
                mapping={str(desktop): entry.to_json() for desktop, entry in targets.items()},
            )
        if counted:
            pipe.sadd(keys.counted, *(str(d) for d in counted))
        pipe.hset(keys.license, "limit", "" if limit is None else str(limit))
        if principals:
            principal_fields: dict[FieldT, EncodableT] = dict(principals.items())
            pipe.hset(keys.principals, mapping=principal_fields)
        if gone:
            pipe.hdel(keys.principals, *gone)
        if revoked:
            pipe.hdel(keys.revoked, *revoked)
        pipe.set(keys.refreshed_epoch, epoch_before or b"0")
        pipe.set(keys.refreshed_at, datetime.now(UTC).isoformat())
        install_holders_and_ready(
            pipe, keys, read_from_ms=read_from_ms, holders=holders, ready=ready
        )
        try:
            await pipe.execute()
        except redis.WatchError:
            return False
    return True


def _seconds(value: int | None) -> float | None:
    return None if value is None else float(value)


async def read_status(kv: redis.Redis, prefix: str) -> Status:
    """What the snapshot under ``prefix`` holds, in brief."""
    keys = Keys(prefix)
    pools = [p.decode() if isinstance(p, bytes) else str(p) for p in await kv.hkeys(keys.pools)]
    ready = {pool: int(await kv.scard(keys.ready(pool))) for pool in pools}
    holders = {
        (k.decode() if isinstance(k, bytes) else str(k)): (
            v.decode() if isinstance(v, bytes) else str(v)
        )
        for k, v in (await kv.hgetall(keys.holders)).items()
    }
    refreshed_at = await kv.get(keys.refreshed_at)
    fresh = refreshed_at is not None and not await stale(kv, keys)
    return Status(ready, holders, fresh, int(await kv.xlen(keys.journal)))
