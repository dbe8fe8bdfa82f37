"""What the gateway needs from the platform to open, keep and close one tunnel.

The gateway (``plugins/deskpool_gateway``) speaks WebSocket to the browser and the Guacamole
protocol to the desktop daemon; everything it knows about users, desktops and sessions comes
through :class:`SessionBroker`. The platform implements the broker over PostgreSQL and Redis
(:mod:`deskpool.sessions.service`); the gateway's own tests may use an in-memory one.

The browser never supplies connection parameters: :class:`DesktopTarget` is what the *server*
resolved (through the cluster's driver) when it issued the token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable
from uuid import UUID

from deskpool.client_policy.model import DEFAULT_CLIENT_POLICY, ClientPolicy, Transfer

__all__ = [
    "ClientPolicySource",
    "DesktopTarget",
    "DisconnectRequest",
    "RecordingSink",
    "SessionBroker",
    "SessionEndReason",
    "TokenRejected",
    "TunnelCounters",
    "TunnelGrant",
]


@dataclass(frozen=True)
class DesktopTarget:
    """How the desktop daemon reaches a desktop: the ``select`` protocol and its arguments.

    :param protocol: ``rdp`` or ``vnc`` (the Guacamole protocol name sent in ``select``).
    :param hostname: address of the desktop as the daemon sees it.
    :param port: the desktop's protocol port.
    :param parameters: further connection arguments by their Guacamole name (``username``,
        ``password``, ``security``, ``ignore-cert``...). Values may be secrets: never log them.
    """

    protocol: str
    hostname: str
    port: int
    parameters: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"DesktopTarget({self.protocol}://{self.hostname}:{self.port}, <parameters hidden>)"


@dataclass(frozen=True)
class TunnelGrant:
    """A redeemed connection token: who may open which desktop, and how to reach it.

    ``session_id`` is the session record created by the redemption; the gateway reports the
    session's life under that id.
    """

    session_id: UUID
    user_id: UUID
    desktop_id: UUID
    pool_id: UUID
    target: DesktopTarget
    #: Display name shown by the desktop (the user's name) and the desktop's VM name.
    user_display_name: str
    desktop_name: str
    #: Session policy limits in seconds (``None``: no limit).
    idle_timeout: float | None = None
    max_duration: float | None = None
    #: True when an administrator joins an existing session read-only (shadowing).
    read_only: bool = False
    #: For shadowing: the daemon connection id (``$...``) of the session being joined, and
    #: that session (its user is told he is watched).
    join_connection_id: str | None = None
    shadow_of: UUID | None = None
    #: The session's recording when the pool records sessions (the gateway writes its chunks
    #: through the broker's ``record_chunks``), and whether the user's key events go in it.
    recording_id: UUID | None = None
    record_keys: bool = False
    #: The pool's client policy when the token was redeemed (the gateway narrows it to what
    #: the protocol offers, and follows its changes through :class:`ClientPolicySource`).
    client_policy: ClientPolicy = DEFAULT_CLIENT_POLICY
    #: The user's email and the browser's address, for the watermark.
    user_email: str = ""


class TokenRejected(Exception):
    """A connection token that cannot be redeemed; ``reason`` is stable and safe to show.

    Reasons: ``unknown`` (forged or never issued), ``used`` (replayed), ``expired``,
    ``desktop_gone`` (deleted or reassigned since), ``access_revoked`` (the user was disabled,
    or lost the entitlement or permission the token was issued under), ``unavailable``
    (database down).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SessionEndReason(StrEnum):
    """Why a tunnel ended, as recorded on the session."""

    CLIENT_CLOSED = "client_closed"
    DESKTOP_CLOSED = "desktop_closed"
    ADMIN_DISCONNECT = "admin_disconnect"
    IDLE_TIMEOUT = "idle_timeout"
    MAX_DURATION = "max_duration"
    DAEMON_ERROR = "daemon_error"
    GATEWAY_SHUTDOWN = "gateway_shutdown"
    GATEWAY_LOST = "gateway_lost"
    #: The user logged off from the desktop (the console's "Log off"): it is logged off at once.
    USER_LOGOFF = "user_logoff"
    #: An administrator took away what allowed the session (the user was disabled, or lost the
    #: entitlement to the pool or the permission to watch): the user is logged off at once.
    ACCESS_REVOKED = "access_revoked"


@dataclass(frozen=True)
class DisconnectRequest:
    """A session someone asked to close, and why (the reason the record will show)."""

    session_id: UUID
    reason: SessionEndReason = SessionEndReason.ADMIN_DISCONNECT


@dataclass
class TunnelCounters:
    """Bytes relayed each way and the time of the last user input, for heartbeats."""

    bytes_to_desktop: int = 0
    bytes_to_browser: int = 0
    last_activity: float = 0.0


class SessionBroker(Protocol):
    """The platform side of the gateway; every method is safe to call from any gateway process.

    The gateway component makes its broker with ``deskpool.sessions.broker.broker_factory``
    (``broker_factory(runtime)``). It also uses two optional members when a broker has them:
    ``heartbeat_interval`` (seconds between :meth:`heartbeat` calls; otherwise a third of
    ``GATEWAY_LEASE_DURATION``) and ``async release(gateway_id)`` (called once at shutdown,
    after every tunnel ended). A grant with a ``recording_id`` is recorded only when the broker
    is a :class:`RecordingSink` too.
    """

    async def redeem(self, token: str, *, gateway_id: str) -> TunnelGrant:
        """Redeem a connection token exactly once and start its session record.

        :raises TokenRejected: the token is unknown, used, expired, or its desktop is gone.
        """

    async def session_connected(self, session_id: UUID, *, connection_id: str) -> None:
        """The daemon answered ``ready``: record its connection id (for shadowing)."""

    async def first_frame(self, session_id: UUID) -> None:
        """The daemon drew its first frame (something drawn, then ``sync``): the logon is done."""

    async def heartbeat(
        self, gateway_id: str, counters: Mapping[UUID, TunnelCounters]
    ) -> Sequence[DisconnectRequest] | None:
        """Renew this gateway's lease and record each open session's bytes and activity.

        ``counters`` names every session the gateway relays. What is returned are sessions of
        those the gateway must close (the broker found they ended and cannot be reopened).
        """

    async def session_ended(
        self, session_id: UUID, reason: SessionEndReason, counters: TunnelCounters
    ) -> None:
        """Close the session record (idempotent); the desktop's ``in_session`` follows."""

    def disconnect_requests(self, gateway_id: str) -> AsyncIterator[DisconnectRequest]:
        """Sessions an administrator (or a policy, or a revocation) asked this gateway to close.

        A session may come more than once; :attr:`DisconnectRequest.reason` says why
        (``access_revoked`` closes with ``CLIENT_FORBIDDEN``, anything else ``SESSION_CLOSED``).
        """


@runtime_checkable
class RecordingSink(Protocol):
    """Where the gateway accounts for a session's recording (the platform's broker is one).

    The chunks themselves are kept by the recording store in the gateway's recording writer
    process (:mod:`deskpool_gateway.recording_writer`); the sink counts them once they are.
    """

    async def count_chunks(
        self, recording_id: UUID, first_index: int, sizes: Sequence[int]
    ) -> None:
        """Chunks ``first_index``, ``first_index + 1``... are kept: count them in the recording.

        ``sizes`` are their plaintext bytes. Counting the same chunks again (a retry) changes
        nothing; only counted chunks are ever read back.
        """

    async def recording_ended(self, recording_id: UUID, *, truncated: bool) -> None:
        """No more chunks come; ``truncated`` when recording stopped before the session."""


@runtime_checkable
class ClientPolicySource(Protocol):
    """Where the gateway reads pools' client policies and reports transfers.

    The platform's broker is one; a gateway whose broker is not one enforces the grant's
    policy as it was when the token was redeemed.
    """

    async def client_policies(self, pool_ids: Sequence[UUID]) -> Mapping[UUID, ClientPolicy]:
        """The current client policy of each of ``pool_ids``."""

    async def record_transfers(self, session_id: UUID, transfers: Sequence[Transfer]) -> None:
        """Audit ``transfers`` (clipboard, files, print jobs, refused streams) of a session."""
