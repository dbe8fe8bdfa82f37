"""Webhook subscriptions as plain values and rules.

What a URL and a filter may be, the retry backoff, when a failing subscription is disabled,
and what an HTTP answer means.

No I/O: the store keeps these values, the sender (:mod:`deskpool.webhooks.sender`) acts on them.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from urllib.parse import urlsplit

from deskpool.errors import FieldError
from deskpool.events import NAMED_EVENT_TYPES

#: Limits of a subscription's fields.
MAX_NAME_LENGTH = 100
MAX_URL_LENGTH = 2000
MAX_EVENT_TYPES = 50
MAX_EVENT_TYPE_LENGTH = 200

#: The schemes a subscription's URL may have.
SCHEMES = ("http", "https")

#: The most characters of an error kept with an attempt or shown as a disabled reason.
MAX_ERROR_LENGTH = 500

_FILTER = re.compile(r"^(\*|[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*(\.\*)?)$")


class DeliveryState(StrEnum):
    """Where a delivery is: waiting to be sent (or retried), delivered, or given up."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SubscriptionSettings:
    """What an administrator sets on a subscription."""

    name: str
    url: str
    event_types: tuple[str, ...]
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class Subscription:
    """A stored subscription (its secret is sealed apart and never part of it)."""

    id: uuid.UUID
    name: str
    url: str
    event_types: tuple[str, ...]
    enabled: bool
    disabled_reason: str | None
    disabled_at: datetime | None
    failing_since: datetime | None
    created_at: datetime
    updated_at: datetime


def check_url(url: str) -> list[FieldError]:
    """What is wrong with ``url`` as a subscription's URL (nothing: ``[]``).

    An absolute ``http`` or ``https`` URL with a host, without credentials (they would be stored
    and shown in clear: the signature authenticates deskpool to the receiver) or a fragment.
    """
    if len(url) > MAX_URL_LENGTH:
        return [FieldError("/url", f"is longer than {MAX_URL_LENGTH} characters")]
    if any(ord(character) < 33 or ord(character) == 127 for character in url):
        return [FieldError("/url", "has spaces or control characters")]
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return [FieldError("/url", "is not a URL")]
    if parts.scheme.lower() not in SCHEMES:
        return [FieldError("/url", "must be an http or https URL")]
    if not parts.hostname:
        return [FieldError("/url", "has no host")]
    if parts.username is not None or parts.password is not None:
        return [FieldError("/url", "must not hold credentials; the signature authenticates")]
    if parts.fragment:
        return [FieldError("/url", "must not have a fragment")]
    if port == 0:
        return [FieldError("/url", "has port 0")]
    return []


def check_event_type(name: str) -> str | None:
    """What is wrong with ``name`` as a subscription's filter; ``None`` when it is fine.

    ``*``; ``audit.<action>`` or an ``audit.`` prefix wildcard (``audit.pool.*``); a named type
    (:data:`deskpool.events.NAMED_EVENT_TYPES`) or a prefix wildcard of named types
    (``session.*``).
    """
    if len(name) > MAX_EVENT_TYPE_LENGTH or not _FILTER.match(name):
        return "is not an event type: dotted lower-case words, optionally ending in .*"
    if name == "*" or name == "audit.*" or name.startswith("audit."):
        return None
    if name.endswith(".*"):
        prefix = name[:-1]
        if any(named.startswith(prefix) for named in NAMED_EVENT_TYPES):
            return None
    elif name in NAMED_EVENT_TYPES:
        return None
    return "is not a known event type (see the named types, or use audit.<action>)"


def check_settings(settings: SubscriptionSettings) -> list[FieldError]:
    """Every problem of ``settings``, each at its field's pointer."""
    problems: list[FieldError] = []
    if not settings.name.strip() or len(settings.name) > MAX_NAME_LENGTH:
        problems.append(FieldError("/name", f"must have 1 to {MAX_NAME_LENGTH} characters"))
    problems += check_url(settings.url)
    if not 1 <= len(settings.event_types) <= MAX_EVENT_TYPES:
        problems.append(FieldError("/event_types", f"must list 1 to {MAX_EVENT_TYPES} types"))
    for index, name in enumerate(settings.event_types):
        problem = check_event_type(name)
        if problem is not None:
            problems.append(FieldError(f"/event_types/{index}", problem))
    return problems


# ---------------------------------------------------------------------------------- delivery


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failing delivery is retried, and when its subscription is given up.

    :param backoff: the wait after the first failed attempt; it doubles with each further one.
    :param max_backoff: the longest wait between two attempts.
    :param disable_after: how long a subscription may keep failing before it is disabled.
    """

    backoff: timedelta
    max_backoff: timedelta
    disable_after: timedelta

    def wait_after(self, attempts: int) -> timedelta:
        """The wait before the next attempt of a delivery that failed ``attempts`` times."""
        if attempts < 1:
            return timedelta(0)
        doubled: timedelta = self.backoff * float(2 ** min(attempts - 1, 32))
        return min(doubled, self.max_backoff)

    def gives_up(self, failing_since: datetime, now: datetime) -> bool:
        """Whether a subscription failing since ``failing_since`` is to be disabled at ``now``."""
        return now - failing_since >= self.disable_after


def answer_error(status: int) -> str | None:
    """What is wrong with a receiver's HTTP answer ``status``; ``None`` for a success (2xx).

    A redirect is a failure: the sender follows none (a subscription's URL is where events
    go, and nowhere else).
    """
    if 200 <= status < 300:
        return None
    if 300 <= status < 400:
        return f"HTTP {status}: redirects are not followed"
    return f"HTTP {status}"


def disabled_reason(failing_since: datetime, error: str) -> str:
    """What a subscription the platform disabled says."""
    text = (
        f"Disabled by deskpool: deliveries failed since {failing_since.isoformat()}"
        f" (last error: {error})."
    )
    return text[:MAX_ERROR_LENGTH]
