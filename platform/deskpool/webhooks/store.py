"""The SQL of webhook subscriptions, their outbox of deliveries and the deliveries' attempts.

Reads take a :class:`~deskpool.db.rows.Db`; writes take an :class:`asyncpg.Connection` and join
the caller's transaction. The outbox rows of new events are written by
:func:`deskpool.audit.record_audit_event`; this module adds those of redeliveries and replays,
and moves deliveries along as the sender tries them.

Order. A subscription's deliveries go out by ``(tx_id, id)``, and only those whose transaction
is below the oldest transaction still running (:data:`FINAL`): every transaction that could
still write an earlier row has ended, so a late commit never slips in before what was sent.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from deskpool.db.rows import Db
from deskpool.errors import Conflict
from deskpool.secrets import OwnedSecret
from deskpool.webhooks.model import DeliveryState, Subscription, SubscriptionSettings

#: The signing secret of a subscription, sealed at rest (``whsec_`` and base64).
SIGNING_SECRET = OwnedSecret("webhook.signing", "secret")

#: The condition a delivery row ``d`` meets once no running transaction can precede it.
FINAL = "d.tx_id < pg_snapshot_xmin(pg_current_snapshot())"


class SubscriptionNameTaken(Conflict):
    """Another subscription has the name (409)."""

    code = "webhook_name_taken"
    title = "Webhook name taken"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event on its way to one subscription."""

    id: int
    subscription_id: uuid.UUID
    message_id: str
    event_type: str
    audit_event_id: int | None
    occurred_at: datetime
    payload: dict[str, Any]
    state: DeliveryState
    attempts: int
    next_attempt_at: datetime
    last_error: str | None
    created_at: datetime
    finished_at: datetime | None
    redelivery_of: int | None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try at a delivery: the receiver's HTTP status, or the error that stopped it."""

    attempted_at: datetime
    status_code: int | None
    error: str | None
    duration_ms: int


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def subscription_of(row: Any) -> Subscription:
    """A :class:`Subscription` from a ``webhook_subscriptions`` row."""
    return Subscription(
        id=row["id"],
        name=row["name"],
        url=row["url"],
        event_types=tuple(row["event_types"]),
        enabled=row["enabled"],
        disabled_reason=row["disabled_reason"],
        disabled_at=row["disabled_at"],
        failing_since=row["failing_since"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def delivery_of(row: Any) -> Delivery:
    """A :class:`Delivery` from a ``webhook_deliveries`` row."""
    return Delivery(
        id=row["id"],
        subscription_id=row["subscription_id"],
        message_id=row["message_id"],
        event_type=row["event_type"],
        audit_event_id=row["audit_event_id"],
        occurred_at=row["occurred_at"],
        payload=_json(row["payload"]),
        state=DeliveryState(row["state"]),
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"],
        last_error=row["last_error"],
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        redelivery_of=row["redelivery_of"],
    )


# ---------------------------------------------------------------------------- subscriptions


_INSERT = """INSERT INTO webhook_subscriptions (id, name, url, event_types, enabled)
              VALUES ($1, $2, $3, $4, $5) RETURNING *"""

_UPDATE = """UPDATE webhook_subscriptions
                SET name = $2, url = $3, event_types = $4, enabled = $5, updated_at = now(),
                    disabled_reason = CASE WHEN $5 THEN NULL ELSE disabled_reason END,
                    disabled_at = CASE WHEN $5 THEN NULL ELSE disabled_at END,
                    failing_since = CASE WHEN $5 AND NOT enabled THEN NULL ELSE failing_since END
              WHERE id = $1 RETURNING *"""


async def _write_subscription(
    connection: asyncpg.Connection,
    statement: str,
    subscription_id: uuid.UUID,
    settings: SubscriptionSettings,
) -> Subscription | None:
    try:
        row = await connection.fetchrow(
            statement,
            subscription_id,
            settings.name,
            settings.url,
            list(settings.event_types),
            settings.enabled,
        )
    except asyncpg.UniqueViolationError:
        raise SubscriptionNameTaken(f"A webhook is named {settings.name!r} already.") from None
    return None if row is None else subscription_of(row)


async def insert_subscription(
    connection: asyncpg.Connection, subscription_id: uuid.UUID, settings: SubscriptionSettings
) -> Subscription:
    """Insert a subscription. :raises SubscriptionNameTaken: the name is in use."""
    inserted = await _write_subscription(connection, _INSERT, subscription_id, settings)
    assert inserted is not None  # INSERT ... RETURNING returns the row
    return inserted


async def update_subscription(
    connection: asyncpg.Connection, subscription_id: uuid.UUID, settings: SubscriptionSettings
) -> Subscription | None:
    """Replace a subscription's settings; enabling it clears why it was disabled.

    :returns: ``None`` when there is no such subscription.
    :raises SubscriptionNameTaken: the name is another's.
    """
    return await _write_subscription(connection, _UPDATE, subscription_id, settings)


async def get_subscription(
    db: Db, subscription_id: uuid.UUID, *, for_update: bool = False
) -> Subscription | None:
    """The subscription; ``None`` when there is none."""
    lock = " FOR UPDATE" if for_update else ""
    row = await db.fetchrow(
        f"SELECT * FROM webhook_subscriptions WHERE id = $1{lock}", subscription_id
    )
    return None if row is None else subscription_of(row)


async def list_subscriptions(db: Db, *, limit: int, after: str | None) -> list[Subscription]:
    """Subscriptions by name, after the name ``after``."""
    rows = await db.fetch(
        """SELECT * FROM webhook_subscriptions WHERE $1::text IS NULL OR name > $1
            ORDER BY name LIMIT $2""",
        after,
        limit,
    )
    return [subscription_of(row) for row in rows]


async def delete_subscription(connection: asyncpg.Connection, subscription_id: uuid.UUID) -> bool:
    """Delete a subscription and its deliveries; ``False`` when there was none."""
    deleted = await connection.fetchval(
        "DELETE FROM webhook_subscriptions WHERE id = $1 RETURNING true", subscription_id
    )
    return bool(deleted)


# ---------------------------------------------------------------------------- deliveries


async def list_deliveries(
    db: Db,
    subscription_id: uuid.UUID,
    *,
    state: DeliveryState | None,
    before: int | None,
    limit: int,
) -> list[Delivery]:
    """A subscription's deliveries, newest first, with ids below ``before``."""
    rows = await db.fetch(
        """SELECT * FROM webhook_deliveries
            WHERE subscription_id = $1 AND ($2::text IS NULL OR state = $2)
              AND ($3::bigint IS NULL OR id < $3)
            ORDER BY id DESC LIMIT $4""",
        subscription_id,
        None if state is None else str(state),
        before,
        limit,
    )
    return [delivery_of(row) for row in rows]


async def get_delivery(db: Db, subscription_id: uuid.UUID, delivery_id: int) -> Delivery | None:
    """One delivery of the subscription; ``None`` when there is none."""
    row = await db.fetchrow(
        "SELECT * FROM webhook_deliveries WHERE subscription_id = $1 AND id = $2",
        subscription_id,
        delivery_id,
    )
    return None if row is None else delivery_of(row)


async def list_attempts(db: Db, delivery_id: int) -> list[Attempt]:
    """A delivery's attempts, oldest first."""
    rows = await db.fetch(
        """SELECT attempted_at, status_code, error, duration_ms FROM webhook_attempts
            WHERE delivery_id = $1 ORDER BY id""",
        delivery_id,
    )
    return [
        Attempt(r["attempted_at"], r["status_code"], r["error"], r["duration_ms"]) for r in rows
    ]


async def insert_deliveries(
    connection: asyncpg.Connection,
    subscription_id: uuid.UUID,
    items: Sequence[tuple[str, str, int | None, datetime, str]],
    *,
    redelivery_of: int | None = None,
) -> int:
    """Queue deliveries at the end of the subscription's outbox.

    :param items: ``(message id, event type, audit event id, occurred at, payload JSON)``.
    :returns: how many were queued.
    """
    if not items:
        return 0
    status = await connection.execute(
        """INSERT INTO webhook_deliveries (subscription_id, message_id, event_type,
                                          audit_event_id, occurred_at, payload, redelivery_of)
           SELECT $1, item.message_id, item.event_type, item.audit_event_id, item.occurred_at,
                  item.payload::jsonb, $7
             FROM unnest($2::text[], $3::text[], $4::bigint[], $5::timestamptz[], $6::text[])
                  AS item (message_id, event_type, audit_event_id, occurred_at, payload)""",
        subscription_id,
        [item[0] for item in items],
        [item[1] for item in items],
        [item[2] for item in items],
        [item[3] for item in items],
        [item[4] for item in items],
        redelivery_of,
    )
    return int(status.split()[-1])


# ---------------------------------------------------------------------------- the sender's


async def claim_subscriptions(
    db: Db, holder: str, lease: timedelta, limit: int
) -> list[Subscription]:
    """Lease up to ``limit`` enabled subscriptions whose next delivery is due, to ``holder``.

    A subscription leased to another holder whose lease runs is left alone: one sender at a
    time keeps its deliveries in order.
    """
    rows = await db.fetch(
        f"""
        WITH due AS (
            SELECT s.id FROM webhook_subscriptions AS s
            CROSS JOIN LATERAL (
                SELECT d.next_attempt_at FROM webhook_deliveries AS d
                 WHERE d.subscription_id = s.id AND d.state = 'pending' AND {FINAL}
                 ORDER BY d.tx_id, d.id LIMIT 1
            ) AS head
             WHERE s.enabled AND head.next_attempt_at <= now()
               AND (s.lease_until IS NULL OR s.lease_until < now() OR s.lease_holder = $1)
             ORDER BY head.next_attempt_at
             LIMIT $3
             FOR UPDATE OF s SKIP LOCKED
        )
        UPDATE webhook_subscriptions AS s
           SET lease_holder = $1, lease_until = now() + $2::interval
          FROM due WHERE s.id = due.id
        RETURNING s.*
        """,
        holder,
        lease,
        limit,
    )
    return [subscription_of(row) for row in rows]


async def release_subscription(db: Db, subscription_id: uuid.UUID, holder: str) -> None:
    """End ``holder``'s lease on the subscription."""
    await db.execute(
        """UPDATE webhook_subscriptions SET lease_holder = NULL, lease_until = NULL
            WHERE id = $1 AND lease_holder = $2""",
        subscription_id,
        holder,
    )


async def next_delivery(
    db: Db, subscription_id: uuid.UUID, holder: str, lease: timedelta
) -> Delivery | None:
    """The subscription's first pending delivery, if it is due, renewing ``holder``'s lease.

    ``None`` when there is none due, or the lease is no longer ``holder``'s.
    """
    row = await db.fetchrow(
        f"""
        WITH held AS (
            UPDATE webhook_subscriptions SET lease_until = now() + $3::interval
             WHERE id = $1 AND lease_holder = $2 AND enabled RETURNING id
        )
        SELECT d.*, d.next_attempt_at <= now() AS due
          FROM webhook_deliveries AS d JOIN held ON held.id = d.subscription_id
         WHERE d.state = 'pending' AND {FINAL}
         ORDER BY d.tx_id, d.id LIMIT 1
        """,
        subscription_id,
        holder,
        lease,
    )
    return delivery_of(row) if row is not None and row["due"] else None


async def record_attempt(
    connection: asyncpg.Connection,
    delivery_id: int,
    *,
    status_code: int | None,
    error: str | None,
    duration_ms: int,
) -> datetime:
    """Keep one attempt of a delivery and count it. :returns: the database's time of it."""
    attempted_at: datetime = await connection.fetchval(
        """WITH counted AS (
               UPDATE webhook_deliveries SET attempts = attempts + 1, last_error = $3
                WHERE id = $1
           )
           INSERT INTO webhook_attempts (delivery_id, status_code, error, duration_ms)
           VALUES ($1, $2, $3, $4) RETURNING attempted_at""",
        delivery_id,
        status_code,
        error,
        duration_ms,
    )
    return attempted_at


async def mark_delivered(
    connection: asyncpg.Connection, delivery_id: int, subscription_id: uuid.UUID
) -> None:
    """The delivery arrived; the subscription is no longer failing."""
    await connection.execute(
        """WITH done AS (
               UPDATE webhook_deliveries SET state = 'delivered', finished_at = now()
                WHERE id = $1
           )
           UPDATE webhook_subscriptions SET failing_since = NULL WHERE id = $2""",
        delivery_id,
        subscription_id,
    )


async def schedule_retry(
    connection: asyncpg.Connection, delivery_id: int, subscription_id: uuid.UUID, wait: timedelta
) -> datetime:
    """Retry the delivery after ``wait``; the subscription is failing (since when is returned)."""
    failing_since: datetime = await connection.fetchval(
        """WITH later AS (
               UPDATE webhook_deliveries SET next_attempt_at = now() + $3::interval
                WHERE id = $1
           )
           UPDATE webhook_subscriptions SET failing_since = coalesce(failing_since, now())
            WHERE id = $2 RETURNING failing_since""",
        delivery_id,
        subscription_id,
        wait,
    )
    return failing_since


async def give_up(
    connection: asyncpg.Connection, delivery_id: int, subscription_id: uuid.UUID, reason: str
) -> None:
    """Mark the delivery failed and disable its subscription, saying why."""
    await connection.execute(
        """WITH failed AS (
               UPDATE webhook_deliveries SET state = 'failed', finished_at = now()
                WHERE id = $1
           )
           UPDATE webhook_subscriptions
              SET enabled = false, disabled_reason = $3, disabled_at = now(),
                  lease_holder = NULL, lease_until = NULL, updated_at = now()
            WHERE id = $2""",
        delivery_id,
        subscription_id,
        reason,
    )
