"""The gateway's session broker, which also redeems tokens issued from the snapshot.

:class:`OutageSessionBroker` is the platform's broker
(:class:`deskpool.sessions.broker.PlatformSessionBroker`) with one more source of tokens: a
token issued while the database was away lives in Redis and is taken once (``GETDEL``); it
says so (:func:`deskpool.sessions.model.issued_from_snapshot`), so only such a token is looked
for there. Its redemption judges access on the snapshot (the user remembered,
not disabled, still entitled to the pool or holding ``pools:manage``, the snapshot fresh, the
desktop still his there) and starts the session under an id of the gateway's own, journaled
(``session_start``). What the gateway then reports of such a session (its connection, first
frame and end) is journaled too until the session is in the database (the journal was
replayed), so every act reaches the database in order.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from redis.exceptions import RedisError

from deskpool.outage_brokering import claims
from deskpool.outage_brokering.model import ActKind, SnapshotPool, text_of
from deskpool.outage_brokering.snapshot import is_fresh, keys_of, principal_of
from deskpool.runtime import Runtime
from deskpool.secrets import SecretDecryptionFailed, SecretsUnavailable
from deskpool.sessions import store
from deskpool.sessions.broker import DEFAULT_LEASE, PlatformSessionBroker, lease_of
from deskpool.sessions.model import (
    issued_from_snapshot,
    plausible_token,
    target_from_json,
    token_key,
)
from deskpool.sessions.tokens import token_context
from deskpool.sessions.tunnel import (
    SessionEndReason,
    TokenRejected,
    TunnelCounters,
    TunnelGrant,
)

log = logging.getLogger(__name__)


class OutageSessionBroker(PlatformSessionBroker):
    """The platform's broker, redeeming tokens issued from the snapshot as well."""

    def __init__(self, runtime: Runtime, *, lease: float = DEFAULT_LEASE) -> None:
        super().__init__(runtime, lease=lease)
        self.keys = keys_of(runtime)
        #: Sessions started from the snapshot and not yet seen in the database.
        self.journaled: set[uuid.UUID] = set()

    async def redeem(self, token: str, *, gateway_id: str) -> TunnelGrant:
        """A token from the snapshot, else the database's (see the module's description)."""
        if not plausible_token(token):
            raise TokenRejected("unknown")
        if not issued_from_snapshot(token):
            # The database's: no round trip to Redis (a thousand redemptions at 9 a.m.).
            return await super().redeem(token, gateway_id=gateway_id)
        key = token_key(token)
        try:
            record = await claims.take_token(self.runtime.kv, self.keys, key)
        except (RedisError, OSError):
            raise TokenRejected("unavailable") from None
        if record is None:
            raise TokenRejected("unknown")  # the database never had it either
        return await self._redeem_from_snapshot(key, record, gateway_id)

    async def _redeem_from_snapshot(
        self, key: bytes, record: dict[str, Any], gateway_id: str
    ) -> TunnelGrant:
        kv = self.runtime.kv
        user_id = uuid.UUID(record["user_id"])
        desktop_id, pool_id = uuid.UUID(record["desktop_id"]), uuid.UUID(record["pool_id"])
        principal = await principal_of(self.runtime, user_id)
        raw_pool = await kv.hget(self.keys.pools, str(pool_id))
        pool = None if raw_pool is None else SnapshotPool.from_json(raw_pool)
        if principal is None or pool is None or not pool.may_open(principal):
            raise TokenRejected("access_revoked")
        if not await is_fresh(kv, self.keys, str(user_id)):
            raise TokenRejected("unavailable")
        holder = await kv.hget(self.keys.holders, str(desktop_id))
        if holder is None or text_of(holder) != str(user_id):
            raise TokenRejected("desktop_gone")
        try:
            plain = self.runtime.secret_store.decrypt(
                bytes.fromhex(record["sealed_target"]), token_context(key)
            )
        except SecretsUnavailable:
            raise TokenRejected("unavailable") from None
        except SecretDecryptionFailed:
            raise TokenRejected("unknown") from None
        session_id = uuid.uuid4()
        await claims.journal(
            kv,
            self.keys,
            ActKind.SESSION_START,
            session_id=session_id,
            logon_id=record["logon_id"],
            user_id=user_id,
            desktop_id=desktop_id,
            pool_id=pool_id,
            desktop_name=record["desktop_name"],
            protocol=record["protocol"],
            gateway_id=gateway_id,
        )
        self.journaled.add(session_id)
        return TunnelGrant(
            session_id=session_id,
            user_id=user_id,
            desktop_id=desktop_id,
            pool_id=pool_id,
            target=target_from_json(json.loads(plain)),
            user_display_name=principal.display_name or principal.email or "",
            desktop_name=record["desktop_name"],
            idle_timeout=pool.idle_timeout,
            max_duration=pool.max_duration,
        )

    async def _in_database(self, session_id: uuid.UUID) -> bool:
        """Whether a session started from the snapshot is in the database now."""
        if session_id not in self.journaled:
            return True
        try:
            found = await store.get_session(self.runtime.db, session_id) is not None
        except Exception:  # the database is away: the act is journaled
            return False
        if found:
            self.journaled.discard(session_id)
        return found

    async def session_connected(self, session_id: uuid.UUID, *, connection_id: str) -> None:
        """Record (or journal) the daemon's connection id."""
        if await self._in_database(session_id):
            await super().session_connected(session_id, connection_id=connection_id)
            return
        await claims.journal(
            self.runtime.kv,
            self.keys,
            ActKind.SESSION_CONNECTED,
            session_id=session_id,
            connection_id=connection_id,
        )

    async def first_frame(self, session_id: uuid.UUID) -> None:
        """Record (or journal) the first frame."""
        if await self._in_database(session_id):
            await super().first_frame(session_id)
            return
        await claims.journal(self.runtime.kv, self.keys, ActKind.FIRST_FRAME, session_id=session_id)

    async def session_ended(
        self, session_id: uuid.UUID, reason: SessionEndReason, counters: TunnelCounters
    ) -> None:
        """End (or journal the end of) the session."""
        if await self._in_database(session_id):
            await super().session_ended(session_id, reason, counters)
            return
        await claims.journal(
            self.runtime.kv,
            self.keys,
            ActKind.SESSION_END,
            session_id=session_id,
            reason=str(reason),
            bytes_to_desktop=counters.bytes_to_desktop,
            bytes_to_browser=counters.bytes_to_browser,
        )
        self.journaled.discard(session_id)


def broker_factory(runtime: Runtime, *, lease: float | None = None) -> OutageSessionBroker:
    """The broker a gateway process uses (``GATEWAY_LEASE_DURATION`` when declared)."""
    return OutageSessionBroker(runtime, lease=lease_of(runtime) if lease is None else lease)
