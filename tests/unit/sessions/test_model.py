"""The pure rules of sessions: policies, tokens, redemption, logoff and limits."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deskpool.pools.model import Desktop, DesktopState
from deskpool.sessions.model import (
    DEFAULT_POLICY,
    MAX_POLICY_SECONDS,
    AfterDisconnect,
    DisplayProtocol,
    IssuedToken,
    PolicyChange,
    SessionPolicy,
    desktop_still_held,
    logoff_due,
    logs_off_at_end,
    new_token,
    over_limits,
    plausible_token,
    preferred_protocol,
    rejection_reason,
    target_from_json,
    target_to_json,
    token_key,
    tunnel_url_problem,
    validate_policy,
)
from deskpool.sessions.tunnel import DesktopTarget, SessionEndReason

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
R = SessionEndReason


def test_a_policy_merges_changes_over_its_base_and_validates_each_member() -> None:
    changed = PolicyChange(idle_timeout=900).applied_to(DEFAULT_POLICY)
    assert changed == SessionPolicy(idle_timeout=900)
    again = PolicyChange(protocol=DisplayProtocol.RDP).applied_to(changed)
    assert (again.protocol, again.idle_timeout) == (DisplayProtocol.RDP, 900)
    assert PolicyChange(idle_timeout=None).applied_to(again).idle_timeout is None
    assert PolicyChange().applied_to(again) == again
    assert validate_policy(DEFAULT_POLICY) == []
    bad = SessionPolicy(
        logoff_delay=-1, idle_timeout=0, max_session_duration=MAX_POLICY_SECONDS + 1
    )
    assert [error.pointer for error in validate_policy(bad)] == [
        "/session_policy/logoff_delay",
        "/session_policy/idle_timeout",
        "/session_policy/max_session_duration",
    ]


def test_auto_leaves_the_protocol_to_the_driver() -> None:
    assert preferred_protocol(DEFAULT_POLICY) is None
    assert preferred_protocol(SessionPolicy(protocol=DisplayProtocol.VNC)) == "vnc"


def test_tokens_are_random_and_only_their_hash_is_kept() -> None:
    token = new_token()
    assert plausible_token(token)
    assert new_token() != token
    assert len(token_key(token)) == 32
    assert token.encode() not in token_key(token)
    for forged in ("", "short", "x" * 101, "has spaces in it and is long enough"):
        assert not plausible_token(forged)


def test_a_target_round_trips_and_hides_its_parameters() -> None:
    target = DesktopTarget("rdp", "10.0.0.5", 3389, {"password": "s3cret", "ignore-cert": "true"})
    assert target_from_json(target_to_json(target)) == target
    assert "s3cret" not in repr(target)


def _token(**changes: Any) -> IssuedToken:
    issued = IssuedToken(
        user_id=uuid.uuid4(),
        desktop_id=uuid.uuid4(),
        pool_id=uuid.uuid4(),
        protocol="vnc",
        expires_at=NOW + timedelta(seconds=30),
        redeemed_at=None,
    )
    return replace(issued, **changes)


def test_why_a_token_cannot_be_redeemed() -> None:
    assert rejection_reason(None, NOW) == "unknown"
    assert rejection_reason(_token(redeemed_at=NOW), NOW) == "used"
    assert rejection_reason(_token(expires_at=NOW), NOW) == "expired"
    assert rejection_reason(_token(), NOW) is None


def test_a_desktop_is_still_held_only_in_use_by_the_same_user() -> None:
    user = uuid.uuid4()
    desktop = Desktop(
        id=uuid.uuid4(),
        pool_id=uuid.uuid4(),
        name="d-01",
        state=DesktopState.IN_USE,
        created_at=NOW,
        state_changed_at=NOW,
        assigned_user=str(user),
    )
    assert desktop_still_held(desktop, user)
    assert not desktop_still_held(desktop, uuid.uuid4())
    assert not desktop_still_held(None, user)
    assert not desktop_still_held(replace(desktop, state=DesktopState.REFRESHING), user)


@pytest.mark.parametrize(
    ("policy", "reason", "waited", "due"),
    [
        (AfterDisconnect.LOGOFF_IMMEDIATELY, R.CLIENT_CLOSED, 0, True),
        (AfterDisconnect.LOGOFF_IMMEDIATELY, R.ADMIN_DISCONNECT, 0, True),
        (AfterDisconnect.LOGOFF_IMMEDIATELY, R.GATEWAY_LOST, 0, False),
        (AfterDisconnect.LOGOFF_IMMEDIATELY, R.GATEWAY_LOST, 600, True),
        (AfterDisconnect.LOGOFF_IMMEDIATELY, None, 599, False),
        (AfterDisconnect.LOGOFF_AFTER_DELAY, R.CLIENT_CLOSED, 599, False),
        (AfterDisconnect.LOGOFF_AFTER_DELAY, R.CLIENT_CLOSED, 600, True),
        (AfterDisconnect.NEVER, R.CLIENT_CLOSED, 10**6, False),
    ],
)
def test_when_a_disconnected_desktop_is_logged_off(
    policy: AfterDisconnect, reason: SessionEndReason | None, waited: int, due: bool
) -> None:
    rules = SessionPolicy(after_disconnect=policy, logoff_delay=600)
    since = NOW - timedelta(seconds=waited)
    assert logoff_due(rules, disconnected_since=since, last_end_reason=reason, now=NOW) is due


def test_ends_the_user_did_not_cause_never_log_off_at_once() -> None:
    immediately = SessionPolicy(after_disconnect=AfterDisconnect.LOGOFF_IMMEDIATELY)
    assert logs_off_at_end(immediately, R.CLIENT_CLOSED)
    assert logs_off_at_end(immediately, R.IDLE_TIMEOUT)
    for reason in (R.GATEWAY_LOST, R.GATEWAY_SHUTDOWN, R.DAEMON_ERROR):
        assert not logs_off_at_end(immediately, reason)
    assert not logs_off_at_end(DEFAULT_POLICY, R.CLIENT_CLOSED)


def test_sessions_past_their_limits() -> None:
    rules = SessionPolicy(idle_timeout=600, max_session_duration=3600)
    fresh = {"started_at": NOW, "last_activity_at": NOW, "now": NOW}
    assert over_limits(rules, **fresh) is None
    assert over_limits(DEFAULT_POLICY, **{**fresh, "started_at": NOW - timedelta(days=9)}) is None
    old = NOW - timedelta(seconds=3600)
    assert over_limits(rules, **{**fresh, "started_at": old}) is R.MAX_DURATION
    idle = NOW - timedelta(seconds=600)
    assert over_limits(rules, **{**fresh, "last_activity_at": idle}) is R.IDLE_TIMEOUT


@pytest.mark.parametrize(
    ("url", "app_env", "usable"),
    [
        ("", "development", False),
        ("wss://desktops.example.com/websocket-tunnel", "production", True),
        ("ws://desktops.example.com/websocket-tunnel", "production", False),
        ("ws://127.0.0.1:8081/websocket-tunnel", "development", True),
    ],
)
def test_which_tunnel_urls_are_handed_to_browsers(url: str, app_env: str, usable: bool) -> None:
    problem = tunnel_url_problem(url, app_env)
    assert (problem is None) is usable
    if problem is not None:
        assert "GATEWAY_PUBLIC_WS_URL" in problem


@pytest.mark.parametrize(
    ("reason", "waited", "due"),
    [
        (R.GATEWAY_LOST, 2, False),
        (R.GATEWAY_LOST, 59, False),
        (R.GATEWAY_LOST, 60, True),
        (R.CLIENT_CLOSED, 2, True),
    ],
)
def test_a_desktop_whose_gateway_was_lost_waits_for_the_gateway_to_reassert(
    reason: SessionEndReason, waited: int, due: bool
) -> None:
    """However short the logoff delay, a lost gateway's next heartbeat may reopen the session."""
    rules = SessionPolicy(after_disconnect=AfterDisconnect.LOGOFF_AFTER_DELAY, logoff_delay=2)
    since = NOW - timedelta(seconds=waited)
    assert logoff_due(rules, disconnected_since=since, last_end_reason=reason, now=NOW) is due
