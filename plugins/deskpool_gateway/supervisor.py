"""What one gateway process does for all its tunnels: timeouts, heartbeats, disconnects, drain.

One sweep a second checks every open tunnel against its limits (cheaper than a timer per
message): the idle timeout and the maximum duration (the shorter of the pool's policy and the
gateway's ceiling), the browser's silence (guacamole-common-js pings every 500 ms and
``Guacamole.Client`` sends ``nop`` every 5 s, so 15 s of silence is a vanished browser) and the
daemon's (guacd sends ``nop`` after 5 s of silence). Heartbeats renew the gateway's lease and
report each session's bytes and activity through the broker; disconnect requests from the broker
close the matching tunnel at once.

Client policies (issue 36): every tunnel's streams go through a
:class:`~deskpool_gateway.transfers.StreamGuard`. When the broker is a
:class:`~deskpool.sessions.tunnel.ClientPolicySource` (the platform's is), the policies of the
open tunnels' pools are read every :data:`POLICY_INTERVAL` seconds and a changed one replaces
the tunnel's at once (a change reaches an open tunnel within 2 s, without a reconnect), and the
transfers the guards report are audited through it in batches, every second and when a tunnel
ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from deskpool.client_policy.model import ClientPolicy, Transfer, offered
from deskpool.guacamole import Status
from deskpool.revocation.model import Holding
from deskpool.revocation.watch import AccessWatch, Watch
from deskpool.sessions.tunnel import (
    ClientPolicySource,
    SessionBroker,
    SessionEndReason,
    TunnelCounters,
    TunnelGrant,
)
from deskpool_gateway.metrics import GatewayMetrics
from deskpool_gateway.recording_writer import RecordingWriter
from deskpool_gateway.relay import Tunnel
from deskpool_gateway.settings import GatewaySettings
from deskpool_gateway.transfers import StreamGuard
from deskpool_gateway.watermarks import follow_watermark

__all__ = ["TunnelSupervisor"]

log = logging.getLogger(__name__)

#: Seconds of silence from a browser (or the daemon) after which its tunnel is closed.
RECEIVE_TIMEOUT = 15.0
#: Seconds between two sweeps.
SWEEP_INTERVAL = 1.0
#: Seconds tunnels closed at shutdown get to finish closing.
CLOSE_GRACE = 5.0
#: Seconds between two reads of the open tunnels' client policies (and audits of transfers).
POLICY_INTERVAL = 1.0


class TunnelSupervisor:
    """The open tunnels of one gateway process and the tasks that watch them.

    :param settings: the gateway's settings.
    :param broker: the platform's session broker.
    :param metrics: the gateway's metrics.
    :param gateway_id: this process's id (``host:pid:random``).
    :param recordings: the recording writer of recorded tunnels.
    :param access: the process's access watch (the platform's broker): every tunnel registers
        with it, and one whose user no longer keeps it closes as access revoked, whatever took
        the access away (the disconnect requests say so too, when the change asked for them).
    """

    def __init__(
        self,
        settings: GatewaySettings,
        broker: SessionBroker,
        metrics: GatewayMetrics,
        gateway_id: str,
        recordings: RecordingWriter,
        access: AccessWatch | None = None,
    ) -> None:
        self.settings = settings
        self.access = access
        #: The access watch's registration of each open tunnel (with :attr:`access`).
        self.watches: dict[UUID, Watch] = {}
        self.recordings = recordings
        self.broker = broker
        self.metrics = metrics
        self.gateway_id = gateway_id
        self.tunnels: dict[UUID, Tunnel] = {}
        #: Tunnels between the upgrade and the end of the handshake.
        self.opening = 0
        self.accepting = True
        self._tasks: list[asyncio.Task[None]] = []
        #: Transfers reported by the tunnels' guards, not yet audited, by session.
        self._transfers: dict[UUID, list[Transfer]] = {}
        self._empty = asyncio.Event()
        self._empty.set()

    @property
    def heartbeat_interval(self) -> float:
        """A third of the lease, or what the broker asks for."""
        interval: Any = getattr(self.broker, "heartbeat_interval", None)
        return float(interval) if interval else self.settings.lease / 3

    def start(self) -> None:
        """Start the sweep, the heartbeats and the disconnect listener."""
        self._tasks = [
            asyncio.create_task(self._sweep(), name="gateway-sweep"),
            asyncio.create_task(self._heartbeats(), name="gateway-heartbeat"),
            asyncio.create_task(self._disconnects(), name="gateway-disconnects"),
            asyncio.create_task(self._client_policies(), name="gateway-client-policies"),
        ]

    # ------------------------------------------------------------------------------ tunnels
    def add(self, tunnel: Tunnel) -> None:
        """Count ``tunnel`` as open."""
        grant = tunnel.grant
        self.tunnels[grant.session_id] = tunnel
        if self.access is not None:
            pool_id, read_only = grant.pool_id, grant.read_only

            def keeps(holding: Holding) -> bool:
                return holding.keeps_session(pool_id, read_only=read_only)

            self.watches[grant.session_id] = self.access.register(grant.user_id, "tunnel", keeps)
        self._empty.clear()
        self.metrics.open_tunnels.set(len(self.tunnels))

    def guard(self, grant: TunnelGrant, policy: ClientPolicy) -> StreamGuard:
        """The guard of ``grant``'s tunnel under ``policy``; what it reports gets audited."""
        session_id = grant.session_id

        def report(transfer: Transfer) -> None:
            self.metrics.transfers.labels(transfer.kind.value, transfer.outcome).inc()
            self._transfers.setdefault(session_id, []).append(transfer)

        return StreamGuard(policy, report)

    async def _client_policies(self) -> None:
        while True:
            await asyncio.sleep(POLICY_INTERVAL)
            await self.follow_policies()
            await self.follow_watermarks()
            await self.audit_transfers()

    async def follow_policies(self) -> None:
        """Read the open tunnels' pools' client policies; apply those that changed."""
        source = self.broker
        if not isinstance(source, ClientPolicySource) or not self.tunnels:
            return
        tunnels = list(self.tunnels.values())
        try:
            policies = await source.client_policies(list({t.grant.pool_id for t in tunnels}))
        except Exception as error:
            log.warning("could not read client policies (%s); retrying", type(error).__name__)
            return
        for tunnel in tunnels:
            policy, guard = policies.get(tunnel.grant.pool_id), tunnel.guard
            if policy is None or guard is None:
                continue
            target = tunnel.grant.target
            narrowed = offered(policy, target.protocol, target.parameters)
            if narrowed != guard.policy:
                log.info("tunnel %s: its pool's client policy changed", tunnel.session_id)
                guard.policy = narrowed

    async def follow_watermarks(self) -> None:
        """Bring each open tunnel's watermark to its policy and the current minute."""
        now = datetime.now(UTC)
        for tunnel in list(self.tunnels.values()):
            guard = tunnel.guard
            policy = guard.policy if guard is not None else tunnel.grant.client_policy
            await follow_watermark(tunnel, policy, now)

    async def audit_transfers(self, session_id: UUID | None = None) -> None:
        """Audit the transfers reported so far (of ``session_id`` only, when given)."""
        source = self.broker
        ids = list(self._transfers) if session_id is None else [session_id]
        for sid in ids:
            transfers = self._transfers.pop(sid, None)
            if not transfers or not isinstance(source, ClientPolicySource):
                continue
            try:
                await source.record_transfers(sid, transfers)
            except Exception as error:
                log.warning(
                    "could not audit %d transfer(s) of session %s: %s",
                    len(transfers),
                    sid,
                    type(error).__name__,
                )

    async def connected(self, tunnel: Tunnel, connection_id: str) -> None:
        """Tell the broker the daemon's connection id (failures are logged, not fatal)."""
        try:
            await self.broker.session_connected(
                tunnel.grant.session_id, connection_id=connection_id
            )
        except Exception as error:
            log.warning(
                "could not record the connection of session %s: %s",
                tunnel.session_id,
                type(error).__name__,
            )

    async def first_frame(self, grant: TunnelGrant) -> None:
        """Tell the broker the daemon drew its first frame (failures are logged, not fatal)."""
        try:
            await self.broker.first_frame(grant.session_id)
        except Exception as error:
            log.warning(
                "could not record the first frame of session %s: %s",
                grant.session_id,
                type(error).__name__,
            )

    async def finish(self, tunnel: Tunnel) -> None:
        """``tunnel`` ended: record it and forget it."""
        self.tunnels.pop(tunnel.grant.session_id, None)
        watch = self.watches.pop(tunnel.grant.session_id, None)
        if watch is not None and self.access is not None:
            self.access.unregister(watch)
        self.metrics.open_tunnels.set(len(self.tunnels))
        reason = tunnel.end_reason or SessionEndReason.CLIENT_CLOSED
        duration = time.monotonic() - tunnel.opened
        self.metrics.session_seconds.labels(reason.value).observe(duration)
        log.info(
            "tunnel %s ended after %.0f s: %s (status %s)",
            tunnel.session_id,
            duration,
            reason.value,
            int(tunnel.status or 0),
        )
        await self.ended_early(tunnel.grant, reason, tunnel.counters)
        await self.audit_transfers(tunnel.grant.session_id)
        if not self.tunnels:
            self._empty.set()

    async def ended_early(
        self, grant: TunnelGrant, reason: SessionEndReason, counters: TunnelCounters
    ) -> None:
        """Close the session record of ``grant`` (failures are logged; the lease corrects)."""
        try:
            await self.broker.session_ended(grant.session_id, reason, counters)
        except Exception as error:
            log.warning(
                "could not record the end of session %s: %s", grant.session_id, type(error).__name__
            )

    # ------------------------------------------------------------------------------ watching
    def check(self, tunnel: Tunnel, now: float) -> None:
        """Close ``tunnel`` if one of its limits is reached, or its user lost access."""
        if tunnel.ended:
            return
        watch = self.watches.get(tunnel.grant.session_id)
        if watch is not None and watch.is_lost:
            self.disconnect(tunnel.grant.session_id, SessionEndReason.ACCESS_REVOKED)
        elif tunnel.max_duration and now - tunnel.opened >= tunnel.max_duration:
            tunnel.close(Status.SESSION_CLOSED, SessionEndReason.MAX_DURATION)
        elif tunnel.idle_timeout and now - tunnel.last_input >= tunnel.idle_timeout:
            tunnel.close(Status.SESSION_TIMEOUT, SessionEndReason.IDLE_TIMEOUT)
        elif now - tunnel.last_browser >= RECEIVE_TIMEOUT:
            tunnel.close(Status.CLIENT_TIMEOUT, SessionEndReason.CLIENT_CLOSED)
        elif now - tunnel.last_daemon >= RECEIVE_TIMEOUT:
            tunnel.close(Status.UPSTREAM_TIMEOUT, SessionEndReason.DAEMON_ERROR)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL)
            now = time.monotonic()
            for tunnel in list(self.tunnels.values()):
                self.check(tunnel, now)

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            await self.heartbeat()

    async def heartbeat(self) -> None:
        """Renew the lease and report every open session's counters (the sessions relayed).

        A session the broker answers it ended and cannot be reopened is closed.
        """
        counters = {sid: tunnel.counters for sid, tunnel in self.tunnels.items()}
        try:
            closing = await self.broker.heartbeat(self.gateway_id, counters)
        except Exception as error:
            log.warning("gateway heartbeat failed (%s); retrying", type(error).__name__)
            return
        for request in closing or ():
            self.disconnect(request.session_id, request.reason)

    async def _disconnects(self) -> None:
        while True:
            try:
                async for request in self.broker.disconnect_requests(self.gateway_id):
                    self.disconnect(request.session_id, request.reason)
            except Exception as error:
                log.warning(
                    "disconnect requests failed (%s); listening again", type(error).__name__
                )
            await asyncio.sleep(1.0)

    def disconnect(
        self, session_id: UUID, reason: SessionEndReason = SessionEndReason.ADMIN_DISCONNECT
    ) -> bool:
        """Close the tunnel of ``session_id`` if this process holds it.

        Access taken away closes with ``CLIENT_FORBIDDEN`` (the browser shows it was refused),
        any other request with ``SESSION_CLOSED``.
        """
        tunnel = self.tunnels.get(session_id)
        if tunnel is None:
            return False
        log.info("tunnel %s: disconnect requested (%s)", tunnel.session_id, reason.value)
        status = (
            Status.CLIENT_FORBIDDEN
            if reason is SessionEndReason.ACCESS_REVOKED
            else Status.SESSION_CLOSED
        )
        tunnel.close(status, reason)
        return True

    # ------------------------------------------------------------------------------ stopping
    async def drain(self, grace: float) -> None:
        """Stop accepting; wait ``grace`` seconds for tunnels to end, then close the rest."""
        self.accepting = False
        if self.tunnels:
            log.info("draining %d tunnel(s) for up to %.0f s", len(self.tunnels), grace)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await self._empty.wait()
        for tunnel in list(self.tunnels.values()):
            tunnel.close(Status.UPSTREAM_UNAVAILABLE, SessionEndReason.GATEWAY_SHUTDOWN)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_GRACE):
                await self._empty.wait()

    async def stop(self) -> None:
        """Stop the background tasks and the recording writer, and give up the lease."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.recordings.stop()
        release: Any = getattr(self.broker, "release", None)
        if release is not None:
            try:
                await release(self.gateway_id)
            except Exception as error:
                log.warning("could not release the gateway's lease: %s", type(error).__name__)
