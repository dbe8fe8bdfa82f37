"""The rules of desktop sessions, with no I/O: policies, tokens, redemption and logoff.

- A pool's :class:`SessionPolicy` says which protocol its desktops are shown with, what happens
  after a disconnect (log off at once, never, or after ``logoff_delay``), and the idle and
  maximum session lengths the gateway enforces.
- A connection token is 32 random bytes (URL-safe text); only its SHA-256 (:func:`token_key`)
  is stored, next to the sealed :class:`~deskpool.sessions.tunnel.DesktopTarget`. A forged
  token finds nothing; a stolen database row does not give the token back.
- :func:`rejection_reason` decides whether a token may still be redeemed, and
  :func:`logoff_due` whether a disconnected desktop is logged off now.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from deskpool.client_policy.model import (
    DEFAULT_CLIENT_POLICY,
    ClientPolicy,
    ClientPolicyChange,
    validate_client_policy,
)
from deskpool.errors import FieldError
from deskpool.pools.model import Desktop, DesktopState
from deskpool.recordings.model import NO_RECORDING, RecordingPolicy
from deskpool.sessions.tunnel import DesktopTarget, SessionEndReason
from deskpool.unset import UNSET, Unset, given

#: The longest delay, idle timeout or session length a policy accepts (one week, in seconds).
MAX_POLICY_SECONDS = 7 * 24 * 3600

#: Bytes of randomness in a connection token.
TOKEN_BYTES = 32


class DisplayProtocol(StrEnum):
    """How a pool's desktops are shown; ``auto`` is RDP for Windows and VNC for Linux."""

    AUTO = "auto"
    RDP = "rdp"
    VNC = "vnc"


class AfterDisconnect(StrEnum):
    """What happens to a desktop when its user's session ends."""

    #: The user is logged off at once (a non-persistent desktop is then rebuilt).
    LOGOFF_IMMEDIATELY = "logoff_immediately"
    #: The desktop waits ``logoff_delay`` seconds for its user to come back, then logs off.
    LOGOFF_AFTER_DELAY = "logoff_after_delay"
    #: The user stays logged on until an administrator or the user ends it.
    NEVER = "never"


#: Ends the user did not cause: they never log off at once (the user gets the delay to return).
INFRASTRUCTURE_ENDS = frozenset(
    {
        SessionEndReason.GATEWAY_LOST,
        SessionEndReason.GATEWAY_SHUTDOWN,
        SessionEndReason.DAEMON_ERROR,
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionPolicy:
    """A pool's session policy.

    :ivar protocol: the display protocol of the pool's desktops.
    :ivar after_disconnect: what happens when a session ends.
    :ivar logoff_delay: seconds a disconnected desktop waits for its user (for
        ``logoff_after_delay``, and after an end the user did not cause).
    :ivar idle_timeout: seconds without user input before the session is disconnected.
    :ivar max_session_duration: seconds a session may last before it is disconnected.
    :ivar recording: whether the gateway records the pool's sessions (and the user's keys).
    :ivar client: what may cross between the desktop and the browser (issue 36).
    """

    protocol: DisplayProtocol = DisplayProtocol.AUTO
    after_disconnect: AfterDisconnect = AfterDisconnect.LOGOFF_AFTER_DELAY
    logoff_delay: int = 600
    idle_timeout: int | None = None
    max_session_duration: int | None = None
    recording: RecordingPolicy = NO_RECORDING
    client: ClientPolicy = DEFAULT_CLIENT_POLICY

    def as_json(self) -> dict[str, Any]:
        """The policy as the API shows it."""
        return {
            "protocol": str(self.protocol),
            "after_disconnect": str(self.after_disconnect),
            "logoff_delay": self.logoff_delay,
            "idle_timeout": self.idle_timeout,
            "max_session_duration": self.max_session_duration,
            "recording": self.recording.as_json(),
            "client": self.client.as_json(),
        }


#: A change that leaves a pool's client policy as it is.
NO_CLIENT_CHANGE = ClientPolicyChange()

#: The policy of a pool that never set one.
DEFAULT_POLICY = SessionPolicy()


@dataclass(frozen=True, kw_only=True)
class PolicyChange:
    """Members of a pool's session policy to set; those left :data:`UNSET` stay as they are."""

    protocol: DisplayProtocol | Unset = UNSET
    after_disconnect: AfterDisconnect | Unset = UNSET
    logoff_delay: int | Unset = UNSET
    idle_timeout: int | Unset | None = UNSET
    max_session_duration: int | Unset | None = UNSET
    recording_enabled: bool | Unset = UNSET
    recording_include_keys: bool | Unset = UNSET
    client: ClientPolicyChange = NO_CLIENT_CHANGE

    def applied_to(self, base: SessionPolicy) -> SessionPolicy:
        """``base`` with the members this change sets."""
        members = given(self)
        members["client"] = self.client.applied_to(base.client)
        recording = base.recording
        if "recording_enabled" in members or "recording_include_keys" in members:
            recording = RecordingPolicy(
                enabled=members.pop("recording_enabled", recording.enabled),
                include_keys=members.pop("recording_include_keys", recording.include_keys),
            )
        return replace(base, recording=recording, **members)


def validate_policy(policy: SessionPolicy, prefix: str = "/session_policy") -> list[FieldError]:
    """Return the invalid fields of ``policy`` as JSON pointers under ``prefix``."""
    errors: list[FieldError] = []
    if not 0 <= policy.logoff_delay <= MAX_POLICY_SECONDS:
        errors.append(
            FieldError(f"{prefix}/logoff_delay", f"must be between 0 and {MAX_POLICY_SECONDS}")
        )
    for name in ("idle_timeout", "max_session_duration"):
        value = getattr(policy, name)
        if value is not None and not 1 <= value <= MAX_POLICY_SECONDS:
            errors.append(
                FieldError(f"{prefix}/{name}", f"must be between 1 and {MAX_POLICY_SECONDS}")
            )
    errors.extend(validate_client_policy(policy.client, f"{prefix}/client"))
    return errors


def preferred_protocol(policy: SessionPolicy) -> str | None:
    """The protocol a pool asks its desktops' driver for (``None``: the driver's default).

    ``auto`` leaves the choice to the driver, which shows Windows guests with RDP and other
    guests with its default (VNC for the simulator and Proxmox).
    """
    return None if policy.protocol is DisplayProtocol.AUTO else str(policy.protocol)


# ------------------------------------------------------------------------------ tokens


#: What a token issued from the outage snapshot starts with (``.`` is no character of the
#: random part): a gateway looks in Redis only for those (see :func:`issued_from_snapshot`).
SNAPSHOT_TOKEN_PREFIX = "o."


def new_token(*, from_snapshot: bool = False) -> str:
    """A new connection token: URL-safe text of :data:`TOKEN_BYTES` random bytes.

    :param from_snapshot: issued from the outage snapshot (kept in Redis, not the database):
        it starts with :data:`SNAPSHOT_TOKEN_PREFIX`.
    """
    token = secrets.token_urlsafe(TOKEN_BYTES)
    return SNAPSHOT_TOKEN_PREFIX + token if from_snapshot else token


def issued_from_snapshot(token: str) -> bool:
    """Whether ``token`` was issued from the outage snapshot (else by the database)."""
    return token.startswith(SNAPSHOT_TOKEN_PREFIX)


def token_key(token: str) -> bytes:
    """What is stored of a token: its SHA-256 (the token itself is never stored or logged)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def plausible_token(token: str) -> bool:
    """Whether ``token`` could be one this server issued (a cheap check before any lookup)."""
    random_part = token.removeprefix(SNAPSHOT_TOKEN_PREFIX)
    return 20 <= len(random_part) <= 100 and all(c.isalnum() or c in "-_" for c in random_part)


def target_to_json(target: DesktopTarget) -> dict[str, Any]:
    """The sealed form of a target (parameters may hold credentials)."""
    return {
        "protocol": target.protocol,
        "hostname": target.hostname,
        "port": target.port,
        "parameters": dict(target.parameters),
    }


def target_from_json(document: Mapping[str, Any]) -> DesktopTarget:
    """Read what :func:`target_to_json` wrote."""
    return DesktopTarget(
        protocol=str(document["protocol"]),
        hostname=str(document["hostname"]),
        port=int(document["port"]),
        parameters={str(k): str(v) for k, v in dict(document.get("parameters") or {}).items()},
    )


@dataclass(frozen=True, slots=True)
class UserNames:
    """How a user is shown on their desktop, and their email for the watermark."""

    #: Display name, else email, else subject (the id when the user is unknown).
    display: str
    #: Empty when unknown.
    email: str


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A connection token as it was issued (the stored row, without the sealed target)."""

    user_id: UUID
    desktop_id: UUID
    pool_id: UUID
    protocol: str
    expires_at: datetime
    redeemed_at: datetime | None
    shadow_of: UUID | None = None
    #: The logon the token belongs to (``None``: a read-only view).
    logon_id: UUID | None = None


def rejection_reason(token: IssuedToken | None, now: datetime) -> str | None:
    """Why ``token`` cannot be redeemed now (``None``: it can).

    ``unknown`` when no token has that key, ``used`` once redeemed, ``expired`` past its
    expiry (see :class:`~deskpool.sessions.tunnel.TokenRejected`).
    """
    if token is None:
        return "unknown"
    if token.redeemed_at is not None:
        return "used"
    if token.expires_at <= now:
        return "expired"
    return None


def desktop_still_held(desktop: Desktop | None, user_id: UUID) -> bool:
    """Whether the user still holds ``desktop`` (not deleted, reassigned or taken back)."""
    return (
        desktop is not None
        and desktop.state is DesktopState.IN_USE
        and desktop.assigned_user == str(user_id)
    )


# ------------------------------------------------------------------------------ logoff


def logs_off_at_end(policy: SessionPolicy, reason: SessionEndReason) -> bool:
    """Whether a session ending for ``reason`` logs its user off at once."""
    if reason in (SessionEndReason.USER_LOGOFF, SessionEndReason.ACCESS_REVOKED):
        return True
    return (
        policy.after_disconnect is AfterDisconnect.LOGOFF_IMMEDIATELY
        and reason not in INFRASTRUCTURE_ENDS
    )


#: A desktop whose last session ended ``gateway_lost`` is not logged off sooner than this after
#: it: a gateway that is alive (its lease ran out while the database was away) reopens the
#: session with its next heartbeat, every third of a lease (:mod:`deskpool.sessions.reassert`).
GATEWAY_LOST_GRACE = timedelta(seconds=60)


def logoff_due(
    policy: SessionPolicy,
    *,
    disconnected_since: datetime,
    last_end_reason: SessionEndReason | None,
    now: datetime,
) -> bool:
    """Whether a desktop in use with no open session is logged off now.

    :param disconnected_since: when the desktop last had a session end, a token issued, or
        its user allocated (whichever is latest).
    :param last_end_reason: why its last session ended (``None``: it had none since).
    """
    if last_end_reason in (SessionEndReason.USER_LOGOFF, SessionEndReason.ACCESS_REVOKED):
        return True
    if policy.after_disconnect is AfterDisconnect.NEVER:
        return False
    waited = now - disconnected_since
    delay = timedelta(seconds=policy.logoff_delay)
    if last_end_reason is SessionEndReason.GATEWAY_LOST:
        delay = max(delay, GATEWAY_LOST_GRACE)
    if policy.after_disconnect is AfterDisconnect.LOGOFF_IMMEDIATELY and (
        last_end_reason is not None and last_end_reason not in INFRASTRUCTURE_ENDS
    ):
        return True
    return waited >= delay


def over_limits(
    policy: SessionPolicy, *, started_at: datetime, last_activity_at: datetime, now: datetime
) -> SessionEndReason | None:
    """Whether an open session is past its pool's maximum length or idle timeout."""
    if policy.max_session_duration is not None and now - started_at >= timedelta(
        seconds=policy.max_session_duration
    ):
        return SessionEndReason.MAX_DURATION
    if policy.idle_timeout is not None and now - last_activity_at >= timedelta(
        seconds=policy.idle_timeout
    ):
        return SessionEndReason.IDLE_TIMEOUT
    return None


# ------------------------------------------------------------------------------ the tunnel URL


def tunnel_url_problem(url: str, app_env: str) -> str | None:
    """Why ``GATEWAY_PUBLIC_WS_URL`` cannot be handed to browsers (``None``: it can).

    It must be set, and ``wss://`` unless ``APP_ENV`` is ``development``.
    """
    if not url:
        return (
            "GATEWAY_PUBLIC_WS_URL is not set: browsers have no gateway to connect to. Set it "
            "to the public wss:// URL of the gateway tunnel."
        )
    if urlsplit(url).scheme != "wss" and app_env != "development":
        return (
            f"GATEWAY_PUBLIC_WS_URL must be a wss:// URL outside development (APP_ENV is "
            f"{app_env!r}); connection tokens are never sent over a clear-text tunnel."
        )
    return None


# ------------------------------------------------------------------------------ records


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRecord:
    """One tunnel's session as it is stored.

    :ivar read_only: an administrator's read-only view of another session (``shadow_of``).
    :ivar gateway_id: the gateway process that holds (or held) the tunnel.
    :ivar connection_id: the desktop daemon's connection id, once the handshake finished.
    :ivar disconnect_requested_at: when someone asked for the session to be closed.
    """

    id: UUID
    user_id: UUID
    desktop_id: UUID
    pool_id: UUID
    desktop_name: str
    protocol: str
    read_only: bool
    shadow_of: UUID | None
    gateway_id: str
    connection_id: str | None
    started_at: datetime
    connected_at: datetime | None
    last_activity_at: datetime
    ended_at: datetime | None
    end_reason: str | None
    bytes_to_desktop: int
    bytes_to_browser: int
    disconnect_requested_at: datetime | None
    disconnect_reason: str | None

    @property
    def is_open(self) -> bool:
        """Whether the tunnel is (as far as deskpool knows) still open."""
        return self.ended_at is None


@dataclass(frozen=True, slots=True, kw_only=True)
class Watcher:
    """An administrator's open read-only view of one of a user's sessions (he is told)."""

    session_id: UUID
    watched_session_id: UUID
    desktop_name: str
    watcher_name: str
    since: datetime
