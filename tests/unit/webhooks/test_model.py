"""The webhook model: event types of audit events, filters, URLs, retry backoff, giving up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks import Webhook

from deskpool.events import (
    AuditEvent,
    event_type,
    outcome_of,
    subscription_keys,
    webhook_payload,
)
from deskpool.webhooks.model import (
    RetryPolicy,
    SubscriptionSettings,
    answer_error,
    check_event_type,
    check_settings,
    check_url,
    disabled_reason,
)
from deskpool.webhooks.service import new_secret


@pytest.mark.parametrize(
    ("action", "outcome", "expected"),
    [
        ("session.start", "success", "session.started"),
        ("session.reopen", "success", "session.started"),
        ("session.end", "success", "session.ended"),
        ("session.refuse", "denied", "session.failed"),
        ("auth.denied", "denied", "session.failed"),
        ("desktop.fail", "failure", "desktop.error"),
        ("desktop.restart", "failure", "desktop.error"),
        ("desktop.restart", "success", "audit.desktop.restart"),
        ("pool.reconcile_error", "failure", "reconcile.error"),
        ("rollout.create", "success", "rollout.changed"),
        ("rollout.rebuild", "success", "rollout.changed"),
        ("schedule.update", "success", "schedule.changed"),
        ("license.state_change", "success", "license.state"),
        ("pool.create", "success", "audit.pool.create"),
        ("user.create", "success", "audit.user.create"),
    ],
)
def test_an_audit_event_has_one_type(action: str, outcome: str, expected: str) -> None:
    assert event_type(action, outcome_of(outcome)) == expected


def test_the_keys_of_an_event_are_its_type_its_action_and_their_wildcards() -> None:
    assert subscription_keys("session.start", "success") == [
        "*",
        "audit.session.start",
        "audit.session.*",
        "audit.*",
        "session.started",
        "session.*",
    ]
    assert subscription_keys("pool.create", "success") == [
        "*",
        "audit.pool.create",
        "audit.pool.*",
        "audit.*",
    ]


def test_the_payload_is_the_audit_event_under_its_type() -> None:
    at = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
    event = AuditEvent("session.end", "u1", "sessions", "s1", "success", at, details={"a": 1})
    payload = webhook_payload(42, event)
    assert payload["type"] == "session.ended"
    assert payload["timestamp"] == "2026-11-29T08:00:00+00:00"
    assert payload["data"]["id"] == 42
    assert payload["data"]["details"] == {"a": 1}


@pytest.mark.parametrize(
    "url",
    ["https://siem.example.com/hooks/deskpool?x=1", "http://127.0.0.1:8080/", "HTTPS://a.b"],
)
def test_http_and_https_urls_are_accepted(url: str) -> None:
    assert check_url(url) == []


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("file:///etc/passwd", "http or https"),
        ("gopher://example.com/", "http or https"),
        ("ftp://example.com/", "http or https"),
        ("//example.com/", "http or https"),
        ("https:///path", "no host"),
        ("https://user:secret@example.com/", "credentials"),
        ("https://example.com/#frag", "fragment"),
        ("https://example.com:99999/", "not a URL"),
        ("https://exa mple.com/", "spaces"),
        ("https://example.com/\x00", "control"),
        ("https://example.com/" + "a" * 2000, "longer"),
    ],
)
def test_other_urls_are_refused(url: str, says: str) -> None:
    problems = check_url(url)
    assert len(problems) == 1
    assert problems[0].pointer == "/url"
    assert says in problems[0].message


@pytest.mark.parametrize(
    "name",
    ["*", "audit.*", "audit.pool.create", "audit.pool.*", "session.started", "session.*"],
)
def test_known_filters_are_accepted(name: str) -> None:
    assert check_event_type(name) is None


@pytest.mark.parametrize(
    "name", ["session.exploded", "nothing.*", "Session.started", "session..x", "a.*.b", ""]
)
def test_unknown_filters_are_refused(name: str) -> None:
    assert check_event_type(name) is not None


def test_settings_problems_are_all_reported_at_their_fields() -> None:
    problems = check_settings(SubscriptionSettings(" ", "ftp://x", ("*", "bogus.type")))
    assert [problem.pointer for problem in problems] == ["/name", "/url", "/event_types/1"]
    assert check_settings(SubscriptionSettings("n", "https://x", ()))[0].pointer == "/event_types"


def test_the_backoff_doubles_up_to_its_maximum() -> None:
    policy = RetryPolicy(timedelta(seconds=5), timedelta(minutes=1), timedelta(hours=1))
    waits = [policy.wait_after(attempts).total_seconds() for attempts in range(0, 7)]
    assert waits == [0, 5, 10, 20, 40, 60, 60]
    assert policy.wait_after(10_000) == timedelta(minutes=1)


def test_a_subscription_is_given_up_after_failing_for_long_enough() -> None:
    policy = RetryPolicy(timedelta(seconds=1), timedelta(seconds=1), timedelta(hours=1))
    since = datetime(2026, 1, 1, tzinfo=UTC)
    assert not policy.gives_up(since, since + timedelta(minutes=59))
    assert policy.gives_up(since, since + timedelta(hours=1))
    reason = disabled_reason(since, "HTTP 500")
    assert "2026-01-01T00:00:00+00:00" in reason
    assert "HTTP 500" in reason


def test_only_2xx_answers_deliver() -> None:
    assert answer_error(200) is None
    assert answer_error(204) is None
    assert answer_error(302) == "HTTP 302: redirects are not followed"
    assert answer_error(500) == "HTTP 500"
    assert answer_error(410) == "HTTP 410"


def test_a_new_secret_signs_what_the_library_verifies() -> None:
    secret = new_secret().reveal()
    assert secret.startswith("whsec_")
    signer = Webhook(secret)
    now = datetime.now(UTC)
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signer.sign("msg_1", now, '{"a":1}'),
    }
    assert Webhook(secret).verify('{"a":1}', headers) == {"a": 1}
    assert new_secret().reveal() != secret


def test_an_outcome_is_read_from_its_text_and_nothing_else_is_one() -> None:
    assert [outcome_of(text) for text in ("success", "denied", "failure")] == [
        "success",
        "denied",
        "failure",
    ]
    with pytest.raises(ValueError, match="not an audit outcome: 'Success'"):
        outcome_of("Success")


def test_the_keys_kept_per_action_are_handed_out_as_new_lists() -> None:
    # Kept per action and outcome (every audit event asks): a caller changing its list must
    # not change what the next one gets.
    first = subscription_keys("desktop.allocate", "success")
    first.append("changed")
    assert subscription_keys("desktop.allocate", "success") == first[:-1]
    assert "changed" not in subscription_keys("desktop.allocate", "success")
