"""Request and response schemas of the session resources: sessions, logons, connections, policies.

A pool's session policy (read and written with the pool), a session and the logon that opened
it, the connection a desktop is opened with (or the start under way), a log-off and a shadow.
The handlers are in :mod:`deskpool.api.resources.sessions`; the pool handlers use the policy
and connection schemas too (:mod:`deskpool.api.resources.pool_schemas`,
:mod:`deskpool.api.resources.pools`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from marshmallow import Schema, fields, validate

from deskpool.api.pagination import PageQuery
from deskpool.api.resources.client_policy_schemas import (
    ClientPolicyInputSchema,
    ClientPolicySchema,
)
from deskpool.api.resources.labels import email_field, name_field, pool_name_field
from deskpool.api.routes import ResponseSpec
from deskpool.messages.model import MAX_BODY
from deskpool.sessions.logons import PHASES, LogonPhase
from deskpool.sessions.model import MAX_POLICY_SECONDS, AfterDisconnect, DisplayProtocol
from deskpool.sessions.tunnel import SessionEndReason

_STATES = ["open", "ended"]
_END_REASONS = [reason.value for reason in SessionEndReason]


class ConnectionSchema(Schema):
    """How the browser opens the desktop's tunnel."""

    token = fields.String(
        required=True,
        metadata={
            "description": (
                "Single-use connection token: the browser's tunnel sends it to the gateway "
                "(`token` connect parameter). Never log it."
            )
        },
    )
    url = fields.String(
        required=True,
        metadata={"description": "Public URL of the gateway tunnel (`GATEWAY_PUBLIC_WS_URL`)."},
    )
    protocol = fields.String(
        required=True, metadata={"description": "The desktop's protocol: `rdp` or `vnc`."}
    )
    expires_at = fields.AwareDateTime(
        required=True, metadata={"description": "The token is refused after this instant."}
    )
    recorded = fields.Boolean(
        required=True,
        metadata={
            "description": (
                "The pool records its sessions: the console tells the user before the desktop "
                "appears (a read-only view is never recorded)."
            )
        },
    )
    client = fields.Nested(
        ClientPolicySchema,
        metadata={
            "description": (
                "What may cross between this desktop and the browser (the pool's client "
                "policy narrowed to what the desktop's protocol offers), so the console says "
                "what is turned off before the user tries (absent for a read-only view)."
            )
        },
    )


class MyDesktopRefSchema(Schema):
    """The caller's desktop, as opening or logging off answers it (each describes its state)."""

    id = fields.String(required=True)
    name = fields.String(required=True)
    pool_id = fields.String(required=True)


class DesktopConnectionSchema(MyDesktopRefSchema):
    """The caller's desktop and the connection token that opens it."""

    state = fields.String(
        required=True, metadata={"description": "The desktop's state (`in_use`)."}
    )
    connection = fields.Nested(ConnectionSchema, required=True)


class StartingSchema(Schema):
    """A desktop being started for the caller (start on connect)."""

    requested_at = fields.AwareDateTime(
        required=True, metadata={"description": "When the caller asked for the desktop."}
    )
    logon_id = fields.String(
        required=True,
        metadata={"description": "The logon that waits for the desktop (its timing carries on)."},
    )
    building = fields.Boolean(
        required=True,
        metadata={
            "description": (
                "The desktop is being built for the caller (the pool had none ready or powered "
                "off and grew by one, or one on its way was reserved to him), rather than "
                "powered on: it takes the time of a provisioning."
            )
        },
    )


class PendingConnectionSchema(MyDesktopRefSchema):
    """The desktop being started for the caller: no connection yet."""

    state = fields.String(
        required=True,
        metadata={
            "description": (
                "The desktop's state: `starting`, `waiting_for_agent`... (`in_use` once it is "
                "handed to the caller)."
            )
        },
    )
    starting = fields.Nested(StartingSchema, required=True)


#: The answer of an open that started a desktop for the caller (start on connect).
PENDING_CONNECTION = ResponseSpec(
    "No desktop was ready: one is being started for the caller and reserved to him (start on "
    "connect). The caller's live events (`GET /api/v1/events`) carry its `desktop.state` "
    "changes; once it is `in_use`, `POST /api/v1/me/desktops/{desktop_id}/connection` answers "
    "its connection (asking earlier answers 202 again).",
    PendingConnectionSchema,
)

_PROTOCOLS = [item.value for item in DisplayProtocol]
_AFTER_DISCONNECT = [item.value for item in AfterDisconnect]
_POLICY_DESCRIPTIONS = {
    "protocol": (
        "The preferred protocol: `auto` (the driver's choice: RDP for Windows, VNC for others), "
        "`rdp` or `vnc`; a guest that offers only one is shown with it."
    ),
    "after_disconnect": (
        "When a session ends: `logoff_immediately` (a non-persistent desktop is then rebuilt), "
        "`logoff_after_delay` (after `logoff_delay` seconds without the user coming back), "
        "`never`. An end the user did not cause (gateway lost or stopped, daemon error) always "
        "waits `logoff_delay`."
    ),
    "logoff_delay": "Seconds a disconnected desktop waits for its user before logging off.",
    "idle_timeout": "Seconds without user input before the session is disconnected; null: none.",
    "max_session_duration": "Seconds a session may last before it is disconnected; null: none.",
}


def _recording_fields(required: bool) -> dict[str, fields.Field[Any]]:
    return {
        "enabled": fields.Boolean(
            required=required,
            metadata={
                "description": (
                    "The gateway records the pool's sessions (what the desktop shows); the user "
                    "is told before the desktop appears."
                )
            },
        ),
        "include_keys": fields.Boolean(
            required=required,
            metadata={"description": "The recording holds the user's key events too."},
        ),
    }


#: A pool's recording policy, as the API shows it.
RecordingPolicySchema = Schema.from_dict(_recording_fields(True), name="RecordingPolicy")
#: Changes to a pool's recording policy.
RecordingPolicyInputSchema = Schema.from_dict(_recording_fields(False), name="RecordingPolicyInput")


def _policy_fields(required: bool) -> dict[str, fields.Field[Any]]:
    seconds = validate.Range(min=1, max=MAX_POLICY_SECONDS)
    d = _POLICY_DESCRIPTIONS
    return {
        "protocol": fields.String(
            required=required,
            validate=validate.OneOf(_PROTOCOLS),
            metadata={"description": d["protocol"]},
        ),
        "after_disconnect": fields.String(
            required=required,
            validate=validate.OneOf(_AFTER_DISCONNECT),
            metadata={"description": d["after_disconnect"]},
        ),
        "logoff_delay": fields.Integer(
            required=required,
            validate=validate.Range(min=0, max=MAX_POLICY_SECONDS),
            metadata={"description": d["logoff_delay"]},
        ),
        "idle_timeout": fields.Integer(
            required=required,
            allow_none=True,
            validate=seconds,
            metadata={"description": d["idle_timeout"]},
        ),
        "max_session_duration": fields.Integer(
            required=required,
            allow_none=True,
            validate=seconds,
            metadata={"description": d["max_session_duration"]},
        ),
        "recording": fields.Nested(
            RecordingPolicySchema if required else RecordingPolicyInputSchema,
            required=required,
            metadata={"description": "Whether the pool's sessions are recorded (issue 26)."},
        ),
        "client": fields.Nested(
            ClientPolicySchema if required else ClientPolicyInputSchema,
            required=required,
            metadata={
                "description": (
                    "What may cross between the desktop and the browser: clipboard, files, "
                    "audio, microphone, printing, and the watermark (issue 36). Enforced by "
                    "the gateway and by guacd; changes reach open sessions within 2 s."
                )
            },
        ),
    }


#: A pool's session policy, as the API shows it.
SessionPolicySchema = Schema.from_dict(_policy_fields(True), name="SessionPolicy")
#: Changes to a pool's session policy (members left out stay as they are).
SessionPolicyInputSchema = Schema.from_dict(_policy_fields(False), name="SessionPolicyInput")


class SessionSchema(Schema):
    """A remote desktop session: one tunnel through the gateway."""

    id = fields.String(required=True)
    user_id = fields.String(required=True)
    user_name = name_field("The session's user")
    user_email = email_field("The session's user")
    desktop_id = fields.String(required=True)
    desktop_name = fields.String(required=True)
    pool_id = fields.String(required=True)
    pool_name = pool_name_field()
    protocol = fields.String(required=True)
    state = fields.String(
        validate=validate.OneOf(_STATES),
        required=True,
        metadata={"description": "`open` or `ended`."},
    )
    read_only = fields.Boolean(
        required=True, metadata={"description": "An administrator's read-only view (shadowing)."}
    )
    shadow_of = fields.String(
        required=True, allow_none=True, metadata={"description": "The session being watched."}
    )
    gateway_id = fields.String(
        required=True, metadata={"description": "The gateway process holding the tunnel."}
    )
    started_at = fields.AwareDateTime(required=True)
    connected_at = fields.AwareDateTime(
        required=True,
        allow_none=True,
        metadata={"description": "When the desktop daemon finished the handshake."},
    )
    last_activity_at = fields.AwareDateTime(
        required=True, metadata={"description": "The last user input the gateway reported."}
    )
    ended_at = fields.AwareDateTime(required=True, allow_none=True)
    end_reason = fields.String(
        required=True,
        allow_none=True,
        validate=validate.OneOf(_END_REASONS),
        metadata={"description": f"Why it ended: {', '.join(f'`{r}`' for r in _END_REASONS)}."},
    )
    bytes_to_desktop = fields.Integer(required=True)
    bytes_to_browser = fields.Integer(required=True)
    disconnect_requested_at = fields.AwareDateTime(
        required=True,
        allow_none=True,
        metadata={"description": "When an administrator or a policy asked for it to close."},
    )


def phase_field(phases: Sequence[LogonPhase]) -> fields.String:
    """A logon phase's name, one of ``phases``."""
    names = [str(phase) for phase in phases]
    return fields.String(
        required=True,
        validate=validate.OneOf(names),
        metadata={"description": f"In order: {', '.join(f'`{p}`' for p in names)}."},
    )


class LogonPhaseSchema(Schema):
    """One phase of a logon, when it was reached."""

    phase = phase_field(PHASES)
    at = fields.AwareDateTime(required=True, metadata={"description": "When it was reached."})
    seconds = fields.Float(
        required=True,
        metadata={"description": "Seconds since the phase before it (0 for `asked`)."},
    )


class LogonSchema(Schema):
    """How the session's desktop was opened: each phase the logon reached, and the outcome."""

    id = fields.String(required=True)
    outcome = fields.String(
        required=True,
        validate=validate.OneOf(["connected", "failed", "pending"]),
        metadata={
            "description": "`connected` once the first frame was drawn, `failed`, or `pending`."
        },
    )
    phases = fields.List(
        fields.Nested(LogonPhaseSchema),
        required=True,
        metadata={
            "description": (
                "The phases reached, in order; `powered_on` appears only when the desktop was "
                "started for the user."
            )
        },
    )
    duration_seconds = fields.Float(
        required=True,
        allow_none=True,
        metadata={"description": "Seconds from the request to the first frame."},
    )
    failed_at = fields.AwareDateTime(required=True, allow_none=True)
    failure_reason = fields.String(
        required=True,
        allow_none=True,
        metadata={
            "description": (
                "Why the logon stopped: an error code (`desktop_unreachable`...), a refused "
                "token (`token_expired`, `token_desktop_gone`), or how the session ended "
                "before its first frame (`daemon_error`, `client_closed`...)."
            )
        },
    )


class SessionDetailSchema(SessionSchema):
    """A session with the timing of the logon that opened it."""

    logon = fields.Nested(
        LogonSchema,
        required=True,
        allow_none=True,
        metadata={"description": "Null for a read-only view, or a session without timing."},
    )


class LogoffSchema(MyDesktopRefSchema):
    """The caller's desktop as a log-off left it, and the sessions asked to close first."""

    state = fields.String(
        required=True,
        metadata={
            "description": (
                "The desktop's state: still `in_use` while its sessions close, then `ready` "
                "(persistent pools: still the caller's) or `refreshing` (rebuilt)."
            )
        },
    )
    closing_sessions = fields.List(
        fields.String(),
        required=True,
        metadata={"description": "The open sessions asked to close; their end logs off."},
    )


class ShadowSchema(Schema):
    """A read-only view of a live session."""

    session = fields.Nested(SessionSchema, required=True)
    connection = fields.Nested(ConnectionSchema, required=True)


class MySessionQuery(PageQuery):
    """Filters of the caller's sessions."""

    state = fields.String(
        validate=validate.OneOf(_STATES), metadata={"description": "`open` or `ended`."}
    )


class SessionQuery(MySessionQuery):
    """Filters of the session list."""

    user_id = fields.UUID(metadata={"description": "Only this user's sessions."})
    desktop_id = fields.UUID(metadata={"description": "Only sessions of this desktop."})
    pool_id = fields.UUID(metadata={"description": "Only sessions of this pool's desktops."})


def announcement_field() -> fields.String:
    """``message``: what to tell the user an administrator's action disrupts, before it is done."""
    return fields.String(
        allow_none=True,
        load_default=None,
        validate=validate.Length(max=MAX_BODY),
        metadata={
            "description": (
                "A message to the user who loses the desktop or session, sent to him (a "
                "warning his desktop views show at once) before the action is done; empty or "
                f"left out: none. At most {MAX_BODY} characters."
            )
        },
    )


class AnnouncedSchema(Schema):
    """An administrator's action on a user's session or desktop, with a message to him."""

    message = announcement_field()


class WatcherSchema(Schema):
    """An administrator watching one of the caller's sessions, read-only, now."""

    session_id = fields.String(required=True, metadata={"description": "The watcher's view."})
    watched_session_id = fields.String(
        required=True, metadata={"description": "The caller's session being watched."}
    )
    desktop_name = fields.String(required=True)
    watcher_name = fields.String(required=True, metadata={"description": "Who watches."})
    since = fields.AwareDateTime(required=True)


class MyWatchersSchema(Schema):
    """The administrators watching the caller's sessions now, longest first."""

    items = fields.List(fields.Nested(WatcherSchema), required=True)
