"""The platform's :class:`~deskpool.sessions.tunnel.SessionBroker`, over PostgreSQL and Redis.

Every gateway process builds one (:func:`broker_factory`) and calls it for each tunnel:

- :meth:`PlatformSessionBroker.redeem` redeems a connection token once, checks the user still
  holds the desktop, opens the sealed target and starts the session (``session.start``), in one
  transaction; the logon's later phases are written in batches (:mod:`.logon_marks`);
- :meth:`~PlatformSessionBroker.heartbeat` renews the gateway's lease (``gateway_leases``),
  records bytes and activity, and ends the sessions of gateways whose lease expired
  (``gateway_lost``), so a gateway killed with SIGKILL leaves no session open for long;
- :meth:`~PlatformSessionBroker.session_ended` closes the record, corrects ``in_session``,
  records ``session.end``, and applies the pool's after-disconnect policy;
- :meth:`~PlatformSessionBroker.disconnect_requests` yields the sessions someone asked to
  close: published on Redis, and polled from the database on a timer of its own, so a request
  made while Redis is away still arrives within :data:`DISCONNECT_POLL_INTERVAL` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
from redis.exceptions import RedisError

from deskpool.audit import record_audit_event
from deskpool.client_policy.model import ClientPolicy, Transfer
from deskpool.desktops.states import SessionOpened, transition
from deskpool.events import AuditEvent
from deskpool.identity.access import holding_of
from deskpool.kv import subscription
from deskpool.live.publishers import publish, session_event
from deskpool.pools.model import Desktop
from deskpool.recordings import store as recordings_store
from deskpool.runtime import Runtime
from deskpool.secrets import SecretDecryptionFailed, SecretsUnavailable
from deskpool.sessions import store, store_logons, store_policies, store_tokens, transfers
from deskpool.sessions.ending import end_session, session_audit_event
from deskpool.sessions.logon_marks import PhaseMarks
from deskpool.sessions.logon_timing import observe_phase
from deskpool.sessions.logons import LogonPhase
from deskpool.sessions.lost_gateways import end_lost_gateways
from deskpool.sessions.model import (
    IssuedToken,
    SessionRecord,
    UserNames,
    desktop_still_held,
    plausible_token,
    rejection_reason,
    target_from_json,
    token_key,
)
from deskpool.sessions.reassert import reassert_sessions
from deskpool.sessions.service import disconnect_channel
from deskpool.sessions.store_opening import desktop_to_open
from deskpool.sessions.tokens import token_context
from deskpool.sessions.tunnel import (
    DesktopTarget,
    DisconnectRequest,
    SessionEndReason,
    TokenRejected,
    TunnelCounters,
    TunnelGrant,
)
from deskpool.sessions.watchers import publish_watch

log = logging.getLogger(__name__)

#: How long a gateway's lease lasts without a heartbeat, by default (seconds).
DEFAULT_LEASE = 30.0
#: How often :meth:`PlatformSessionBroker.disconnect_requests` also reads the database.
DISCONNECT_POLL_INTERVAL = 5.0

_DATABASE_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)


async def _start_session(
    connection: asyncpg.Connection,
    key: bytes,
    issued: IssuedToken,
    gateway_id: str,
    desktop_id: uuid.UUID,
    pool_id: uuid.UUID,
    desktop_name: str,
    protocol: str,
    *,
    shadow_of: uuid.UUID | None = None,
    phases: list[tuple[LogonPhase, float | None]],
    desktop: Desktop | None = None,
) -> SessionRecord:
    """Record the session a redeemed token starts, tie the token to it, audit ``session.start``.

    The token's logon reaches ``tunnel_opened`` (appended to ``phases`` for the metrics).

    A session that shadows another is read-only, and its audit event names the watched one.
    """
    values = {
        "user_id": issued.user_id,
        "desktop_id": desktop_id,
        "pool_id": pool_id,
        "desktop_name": desktop_name,
        "protocol": protocol,
        "gateway_id": gateway_id,
        "read_only": shadow_of is not None,
        "shadow_of": shadow_of,
    }
    session_id = uuid.uuid4()
    details = {"protocol": protocol} if shadow_of is None else {"shadow_of": str(shadow_of)}
    event = session_audit_event("session.start", str(issued.user_id), session_id, values, **details)
    started = await store.start_session(
        connection, session_id, values, token_key=key, logon_id=issued.logon_id, event=event,
        desktop=desktop,
    )  # fmt: skip
    if issued.logon_id is not None:
        phases.append((LogonPhase.TUNNEL_OPENED, started.tunnel_opened))
    return started.session


def _refusal(issued: IssuedToken, reason: str) -> AuditEvent:
    """The audit event of a token the gateway refused for ``reason`` (once redeemed)."""
    return AuditEvent(
        action="session.refuse",
        actor=str(issued.user_id),
        resource_type="desktops",
        resource_id=str(issued.desktop_id),
        outcome="denied",
        occurred_at=datetime.now(UTC),
        details={
            "reason": reason,
            "pool_id": str(issued.pool_id),
            "user_id": str(issued.user_id),
            "shadow_of": None if issued.shadow_of is None else str(issued.shadow_of),
        },
    )


class PlatformSessionBroker:
    """The session broker of one gateway process.

    :param runtime: an opened runtime (database, key-value store, secret store).
    :param lease: seconds a gateway's lease lasts; the gateway heartbeats every third of it.
    """

    def __init__(self, runtime: Runtime, *, lease: float = DEFAULT_LEASE) -> None:
        self.runtime = runtime
        self.lease = lease
        #: When each gateway's last committed heartbeat was sent (monotonic): half a lease
        #: later its redemptions ask the database again (``store.ensure_lease``).
        self._renewed: dict[str, float] = {}
        self._connected = PhaseMarks(runtime, LogonPhase.DAEMON_CONNECTED)
        self._first_frames = PhaseMarks(runtime, LogonPhase.FIRST_FRAME)

    @property
    def heartbeat_interval(self) -> float:
        """How often the gateway should call :meth:`heartbeat`."""
        return self.lease / 3

    # -------------------------------------------------------------------------- redeem

    async def redeem(self, token: str, *, gateway_id: str) -> TunnelGrant:
        """Redeem ``token`` once and start its session (see the module's description).

        :raises TokenRejected: ``unknown``, ``used``, ``expired``, ``desktop_gone`` or
            ``unavailable`` (the database or the master key is missing).
        """
        if not plausible_token(token):
            raise TokenRejected("unknown")
        key = token_key(token)
        phases: list[tuple[LogonPhase, float | None]] = []
        leased: list[float] = []
        try:
            try:
                async with self.runtime.db.acquire() as connection, connection.transaction():
                    # A token whose desktop is gone stays redeemed: the outcome is committed.
                    outcome = await self._redeem(connection, key, gateway_id, phases, leased)
                if leased:
                    # Committed: the lease holds for half a lease from when it was asked, as
                    # after a heartbeat (a gateway's first comes a third of a lease after it
                    # starts: until then every redemption of a 9 a.m. burst asked again).
                    self._renewed[gateway_id] = max(self._renewed.get(gateway_id, 0.0), *leased)
            except TokenRejected as rejected:
                outcome = rejected.reason
            if isinstance(outcome, str):
                if outcome in ("expired", "desktop_gone"):
                    await store_logons.fail_token_logon(self.runtime.db, key, f"token_{outcome}")
                raise TokenRejected(outcome)
        except _DATABASE_ERRORS as error:
            log.warning("cannot redeem a connection token: %s", type(error).__name__)
            raise TokenRejected("unavailable") from None
        for phase, seconds in phases:
            observe_phase(self.runtime, phase, seconds)
        await publish(runtime=self.runtime, event=session_event("opened", outcome))
        if outcome.shadow_of is not None:
            await publish_watch(self.runtime, outcome.shadow_of)
        return outcome

    async def _redeem(
        self,
        connection: asyncpg.Connection,
        key: bytes,
        gateway_id: str,
        phases: list[tuple[LogonPhase, float | None]],
        leased: list[float],
    ) -> TunnelGrant | str:
        """The grant, or the reason a redeemed token opens nothing.

        When the gateway's lease was asked for, when (monotonic) is appended to ``leased``.
        """
        redeemed = await store_tokens.redeem_token(connection, key)
        if redeemed is None:
            issued = await store_tokens.get_token(connection, key)
            now = await connection.fetchval("SELECT now()")
            raise TokenRejected(rejection_reason(issued, now) or "used")
        issued, names = redeemed.issued, redeemed.names
        target = self._open_target(redeemed.sealed_target, key)
        # Access is judged now, not at issue: a user disabled since, or who lost the entitlement
        # (a shadow: sessions:manage), opens nothing. His row was share-locked by the redemption.
        holding = await holding_of(connection, issued.user_id, locked=True)
        if not holding.keeps_session(issued.pool_id, read_only=issued.shadow_of is not None):
            await record_audit_event(connection, _refusal(issued, "access_revoked"))
            return "access_revoked"
        renewed = self._renewed.get(gateway_id)
        if renewed is None or time.monotonic() - renewed >= self.lease / 2:
            leased.append(time.monotonic())
            await store.ensure_lease(connection, gateway_id, self.lease)
        if issued.shadow_of is not None:
            return await self._join(connection, key, issued, names, target, gateway_id)
        desktop, pool, policy = await desktop_to_open(connection, issued.desktop_id, issued.pool_id)
        if desktop is None or pool is None or not desktop_still_held(desktop, issued.user_id):
            return "desktop_gone"
        opened = desktop  # in session already (another tunnel): nothing to write
        if not desktop.in_session:
            opened = transition(desktop, SessionOpened(), pool=pool, now=datetime.now(UTC))
        session = await _start_session(
            connection,
            key,
            issued,
            gateway_id,
            desktop.id,
            pool.id,
            desktop.name,
            issued.protocol,
            phases=phases,
            desktop=None if opened == desktop else opened,
        )
        recording = None
        if policy.recording.enabled:
            recording = await recordings_store.insert_recording(
                connection,
                session_id=session.id,
                pool_id=pool.id,
                user_id=issued.user_id,
                desktop_name=desktop.name,
                include_keys=policy.recording.include_keys,
                store=str(self.runtime.config["RECORDING_STORE"]),
            )
        return TunnelGrant(
            session_id=session.id,
            user_id=issued.user_id,
            desktop_id=desktop.id,
            pool_id=pool.id,
            target=target,
            user_display_name=names.display,
            desktop_name=desktop.name,
            idle_timeout=None if policy.idle_timeout is None else float(policy.idle_timeout),
            max_duration=(
                None if policy.max_session_duration is None else float(policy.max_session_duration)
            ),
            recording_id=None if recording is None else recording.id,
            record_keys=policy.recording.include_keys,
            client_policy=policy.client,
            user_email=names.email,
        )

    async def _join(
        self,
        connection: asyncpg.Connection,
        key: bytes,
        issued: IssuedToken,
        names: UserNames,
        target: DesktopTarget,
        gateway_id: str,
    ) -> TunnelGrant | str:
        """Redeem a shadowing token: a read-only session joined to an open one."""
        assert issued.shadow_of is not None
        watched = await store.get_session(connection, issued.shadow_of)
        if watched is None or not watched.is_open or watched.connection_id is None:
            return "desktop_gone"
        session = await _start_session(
            connection,
            key,
            issued,
            gateway_id,
            watched.desktop_id,
            watched.pool_id,
            watched.desktop_name,
            watched.protocol,
            shadow_of=watched.id,
            phases=[],
        )
        return TunnelGrant(
            session_id=session.id,
            user_id=issued.user_id,
            desktop_id=watched.desktop_id,
            pool_id=watched.pool_id,
            target=target,
            user_display_name=names.display,
            desktop_name=watched.desktop_name,
            read_only=True,
            join_connection_id=watched.connection_id,
            shadow_of=watched.id,
            client_policy=(await store_policies.get_policy(connection, watched.pool_id)).client,
            user_email=names.email,
        )

    def _open_target(self, sealed: bytes, key: bytes) -> DesktopTarget:
        try:
            plain = self.runtime.secret_store.decrypt(sealed, token_context(key))
        except SecretsUnavailable:
            raise TokenRejected("unavailable") from None
        except SecretDecryptionFailed:
            raise TokenRejected("unknown") from None
        return target_from_json(json.loads(plain))

    # -------------------------------------------------------------------------- client policy

    async def client_policies(
        self, pool_ids: Sequence[uuid.UUID]
    ) -> Mapping[uuid.UUID, ClientPolicy]:
        """The current client policy of each of ``pool_ids`` (the gateway follows changes)."""
        return await transfers.client_policies(self.runtime.db, pool_ids)

    async def record_transfers(self, session_id: uuid.UUID, seen: Sequence[Transfer]) -> None:
        """Audit the transfers the gateway saw on a session (``session.transfer``)."""
        await transfers.record_transfers(self.runtime, session_id, seen)

    # -------------------------------------------------------------------------- recording

    async def count_chunks(
        self, recording_id: uuid.UUID, first_index: int, sizes: Sequence[int]
    ) -> None:
        """Count chunks the gateway's recording writer kept in the row (one update)."""
        await recordings_store.add_chunks(self.runtime.db, recording_id, first_index, sizes)

    async def recording_ended(self, recording_id: uuid.UUID, *, truncated: bool) -> None:
        """Mark the recording ended (``truncated`` when it stopped before the session)."""
        await recordings_store.finish_recording(self.runtime.db, recording_id, truncated=truncated)

    # -------------------------------------------------------------------------- life

    async def session_connected(self, session_id: uuid.UUID, *, connection_id: str) -> None:
        """The daemon answered ``ready``: record its connection id (for shadowing)."""
        seconds = await self._connected.mark(session_id, connection_id)
        observe_phase(self.runtime, LogonPhase.DAEMON_CONNECTED, seconds)

    async def first_frame(self, session_id: uuid.UUID) -> None:
        """The daemon drew its first frame: the session's logon is complete."""
        seconds = await self._first_frames.mark(session_id)
        observe_phase(self.runtime, LogonPhase.FIRST_FRAME, seconds)

    async def heartbeat(
        self, gateway_id: str, counters: Mapping[uuid.UUID, TunnelCounters]
    ) -> list[DisconnectRequest]:
        """Reassert, renew the lease, record counters; the relayed sessions to close.

        The lease first (a session reopened without a lease would be an orphan's), then the
        sessions relayed (``counters``) that ended as lost are reopened or handed back
        (:mod:`deskpool.sessions.reassert`); then the sessions of lost gateways end.
        """
        sent = time.monotonic()
        async with self.runtime.db.acquire() as connection, connection.transaction():
            await store.renew_lease(connection, gateway_id, self.lease)
            await store.record_counters(connection, gateway_id, counters)
        self._renewed[gateway_id] = sent
        closing = await reassert_sessions(self.runtime, gateway_id, list(counters))
        await end_lost_gateways(self.runtime)
        return closing

    async def session_ended(
        self, session_id: uuid.UUID, reason: SessionEndReason, counters: TunnelCounters
    ) -> None:
        """Close the session record (idempotent); ``in_session`` and the policy follow."""
        await end_session(self.runtime, session_id, reason, counters)

    async def release(self, gateway_id: str) -> None:
        """A gateway stopping cleanly: end what it still holds and drop its lease."""
        self._renewed.pop(gateway_id, None)
        async with self.runtime.db.acquire() as connection:
            ids = await store.open_session_ids_of_gateway(connection, gateway_id)
        for session_id in ids:
            await end_session(self.runtime, session_id, SessionEndReason.GATEWAY_SHUTDOWN, None)
        async with self.runtime.db.acquire() as connection:
            await store.drop_lease(connection, gateway_id)

    async def disconnect_requests(self, gateway_id: str) -> AsyncIterator[DisconnectRequest]:
        """Sessions of this gateway someone asked to close (a session may come more than once).

        Two sources, each on its own task so that neither waits on the other: the database,
        read every :data:`DISCONNECT_POLL_INTERVAL` seconds whether or not Redis answers (and
        at once when the Redis subscription comes back, for what was published meanwhile),
        and the gateway's Redis channel, for a request the moment it is made.
        """
        requests: asyncio.Queue[DisconnectRequest] = asyncio.Queue()
        poll_now = asyncio.Event()
        tasks = [
            asyncio.create_task(
                self._poll_disconnects(gateway_id, requests, poll_now),
                name=f"disconnects-poll-{gateway_id}",
            ),
            asyncio.create_task(
                self._listen_disconnects(gateway_id, requests, poll_now),
                name=f"disconnects-listen-{gateway_id}",
            ),
        ]
        try:
            while True:
                yield await requests.get()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _poll_disconnects(
        self,
        gateway_id: str,
        requests: asyncio.Queue[DisconnectRequest],
        poll_now: asyncio.Event,
    ) -> None:
        """Read the pending requests from the database on a timer of its own."""
        while True:
            poll_now.clear()
            try:
                pending = await store.pending_disconnects(self.runtime.db, gateway_id)
            except _DATABASE_ERRORS as error:
                log.warning("disconnect requests of %s: %s; polling again", gateway_id, error)
            else:
                for session_id, reason in pending:
                    requests.put_nowait(DisconnectRequest(session_id, _end_reason(reason)))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DISCONNECT_POLL_INTERVAL):
                    await poll_now.wait()

    async def _listen_disconnects(
        self,
        gateway_id: str,
        requests: asyncio.Queue[DisconnectRequest],
        poll_now: asyncio.Event,
    ) -> None:
        """Hear the requests published on the gateway's channel; resubscribe when Redis fails."""
        channel = disconnect_channel(gateway_id)
        lost = False
        while True:
            try:
                async with subscription(self.runtime.kv, channel) as pubsub:
                    if lost:
                        # Requests published while the subscription was away are in the
                        # database: read them now rather than at the next poll.
                        lost = False
                        poll_now.set()
                    while True:
                        message = await pubsub.get_message(
                            ignore_subscribe_messages=True, timeout=DISCONNECT_POLL_INTERVAL
                        )
                        if message is not None:
                            requested = _disconnect_request(message.get("data"))
                            if requested is not None:
                                requests.put_nowait(requested)
            except (RedisError, OSError) as error:
                if not lost:
                    log.warning(
                        "disconnect requests of %s: Redis failed (%s); the database is still "
                        "polled every %.0f s, resubscribing",
                        gateway_id,
                        error,
                        DISCONNECT_POLL_INTERVAL,
                    )
                lost = True
                await asyncio.sleep(1.0)


def _end_reason(reason: str | None) -> SessionEndReason:
    """The end reason a disconnect was asked for (an admin's disconnect when unknown)."""
    try:
        return SessionEndReason(reason or SessionEndReason.ADMIN_DISCONNECT)
    except ValueError:
        return SessionEndReason.ADMIN_DISCONNECT


def _disconnect_request(data: Any) -> DisconnectRequest | None:
    """A message of :func:`deskpool.sessions.service.publish_disconnect`: ``<id> [<reason>]``."""
    text = data.decode() if isinstance(data, bytes) else str(data)
    session, _, reason = text.partition(" ")
    try:
        return DisconnectRequest(uuid.UUID(session), _end_reason(reason))
    except ValueError:
        return None


def lease_of(runtime: Runtime) -> float:
    """``GATEWAY_LEASE_DURATION`` when the process declared it, else :data:`DEFAULT_LEASE`."""
    config = runtime.config
    if "GATEWAY_LEASE_DURATION" in config:
        return config.duration("GATEWAY_LEASE_DURATION")
    return DEFAULT_LEASE


def broker_factory(runtime: Runtime, *, lease: float | None = None) -> PlatformSessionBroker:
    """The broker a gateway process uses (``GATEWAY_LEASE_DURATION`` when declared)."""
    return PlatformSessionBroker(runtime, lease=lease_of(runtime) if lease is None else lease)
