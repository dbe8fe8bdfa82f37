"""The webhook use cases: subscriptions, their deliveries, a redelivery and a replay.

Subscriptions are created, listed, shown, replaced, deleted and given a new secret; their
deliveries are listed and shown with their attempts; a delivery is redelivered, and the events
from a point in time replayed.

Every change validates, writes and audits in one transaction. A subscription's signing secret
is made here (``whsec_`` and 32 random bytes in base64, as the Standard Webhooks
specification's libraries read it), sealed at rest (:data:`~deskpool.webhooks.store
.SIGNING_SECRET`) and shown once: in the answer that created or renewed it.
"""

from __future__ import annotations

import base64
import json
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from deskpool.actor import Actor
from deskpool.audit import events_since
from deskpool.errors import NotFound, ValidationFailed
from deskpool.events import event_type, subscription_keys, webhook_payload
from deskpool.secrets import SecretValue
from deskpool.webhooks import store
from deskpool.webhooks.model import (
    DeliveryState,
    Subscription,
    SubscriptionSettings,
    check_settings,
)
from deskpool.webhooks.store import Attempt, Delivery

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

#: The most events one replay queues; a longer replay is asked again from where it stopped.
MAX_REPLAY = 10_000
#: How many audit events a replay reads at a time.
_REPLAY_BATCH = 500

RESOURCE = "webhooks"


@dataclass(frozen=True, slots=True)
class NewSecret:
    """A subscription with its signing secret, as shown once."""

    subscription: Subscription
    secret: SecretValue


@dataclass(frozen=True, slots=True)
class Replay:
    """What a replay queued: how many deliveries, and where it stopped if it did not finish.

    :ivar next_since: the time to replay from to go on (``None``: every event was queued).
    """

    queued: int
    next_since: datetime | None


def new_secret() -> SecretValue:
    """A new signing secret: ``whsec_`` and 32 random bytes in base64."""
    return SecretValue("whsec_" + base64.b64encode(secrets.token_bytes(32)).decode())


def _checked(settings: SubscriptionSettings) -> SubscriptionSettings:
    problems = check_settings(settings)
    if problems:
        raise ValidationFailed(problems)
    return settings


def _details(subscription: Subscription) -> dict[str, object]:
    return {
        "name": subscription.name,
        "url": subscription.url,
        "event_types": list(subscription.event_types),
        "enabled": subscription.enabled,
    }


def _not_found(subscription_id: uuid.UUID) -> NotFound:
    return NotFound(f"No webhook has the id {subscription_id}.")


async def create_subscription(
    runtime: Runtime, actor: Actor, settings: SubscriptionSettings
) -> NewSecret:
    """Create a subscription with a new signing secret (shown once, in the answer).

    :raises ValidationFailed: the settings are invalid.
    :raises SubscriptionNameTaken: the name is in use.
    :raises SecretsUnavailable: no master key is configured to seal the secret.
    """
    _checked(settings)
    secret = new_secret()
    async with runtime.db.acquire() as connection, connection.transaction():
        subscription = await store.insert_subscription(connection, uuid.uuid4(), settings)
        await store.SIGNING_SECRET.put(connection, runtime.secret_store, subscription.id, secret)
        await actor.record(
            connection, "webhook.create", RESOURCE, str(subscription.id), _details(subscription)
        )
    return NewSecret(subscription, secret)


async def list_subscriptions(
    runtime: Runtime, *, limit: int, after: str | None
) -> list[Subscription]:
    """Subscriptions by name, after the name ``after``."""
    return await store.list_subscriptions(runtime.db, limit=limit, after=after)


async def get_subscription(runtime: Runtime, subscription_id: uuid.UUID) -> Subscription:
    """The subscription. :raises NotFound: there is none."""
    found = await store.get_subscription(runtime.db, subscription_id)
    if found is None:
        raise _not_found(subscription_id)
    return found


async def replace_subscription(
    runtime: Runtime, actor: Actor, subscription_id: uuid.UUID, settings: SubscriptionSettings
) -> Subscription:
    """Replace a subscription's settings; enabling a disabled one clears why it was.

    Its pending deliveries stay, in order; events recorded while it was disabled were not
    queued for it (a replay queues them).
    """
    _checked(settings)
    async with runtime.db.acquire() as connection, connection.transaction():
        before = await store.get_subscription(connection, subscription_id, for_update=True)
        if before is None:
            raise _not_found(subscription_id)
        after = await store.update_subscription(connection, subscription_id, settings)
        assert after is not None  # held FOR UPDATE above
        await actor.record(
            connection,
            "webhook.update",
            RESOURCE,
            str(subscription_id),
            {"before": _details(before), "after": _details(after)},
        )
    return after


async def delete_subscription(runtime: Runtime, actor: Actor, subscription_id: uuid.UUID) -> None:
    """Delete a subscription, its secret and its deliveries."""
    async with runtime.db.acquire() as connection, connection.transaction():
        before = await store.get_subscription(connection, subscription_id, for_update=True)
        if before is None:
            raise _not_found(subscription_id)
        await store.delete_subscription(connection, subscription_id)
        await store.SIGNING_SECRET.delete(connection, subscription_id)
        await actor.record(
            connection, "webhook.delete", RESOURCE, str(subscription_id), _details(before)
        )


async def renew_secret(runtime: Runtime, actor: Actor, subscription_id: uuid.UUID) -> NewSecret:
    """Give a subscription a new signing secret (shown once); the old one signs no more."""
    secret = new_secret()
    async with runtime.db.acquire() as connection, connection.transaction():
        subscription = await store.get_subscription(connection, subscription_id, for_update=True)
        if subscription is None:
            raise _not_found(subscription_id)
        await store.SIGNING_SECRET.put(connection, runtime.secret_store, subscription_id, secret)
        await actor.record(connection, "webhook.secret_renew", RESOURCE, str(subscription_id))
    return NewSecret(subscription, secret)


# ---------------------------------------------------------------------------- deliveries


async def list_deliveries(
    runtime: Runtime,
    subscription_id: uuid.UUID,
    *,
    state: DeliveryState | None,
    before: int | None,
    limit: int,
) -> list[Delivery]:
    """A subscription's deliveries, newest first (``state``: only those in it)."""
    await get_subscription(runtime, subscription_id)
    return await store.list_deliveries(
        runtime.db, subscription_id, state=state, before=before, limit=limit
    )


async def get_delivery(
    runtime: Runtime, subscription_id: uuid.UUID, delivery_id: int
) -> tuple[Delivery, list[Attempt]]:
    """A delivery of the subscription with its attempts. :raises NotFound: there is none."""
    delivery = await store.get_delivery(runtime.db, subscription_id, delivery_id)
    if delivery is None:
        raise NotFound(f"Webhook {subscription_id} has no delivery {delivery_id}.")
    return delivery, await store.list_attempts(runtime.db, delivery_id)


async def redeliver(
    runtime: Runtime, actor: Actor, subscription_id: uuid.UUID, delivery_id: int
) -> Delivery:
    """Queue a delivery's event again, at the end of the subscription's outbox.

    The new delivery has the same ``webhook-id`` (the event is the same: a receiver that
    already has it can tell).
    """
    async with runtime.db.acquire() as connection, connection.transaction():
        original = await store.get_delivery(connection, subscription_id, delivery_id)
        if original is None:
            raise NotFound(f"Webhook {subscription_id} has no delivery {delivery_id}.")
        item = (
            original.message_id,
            original.event_type,
            original.audit_event_id,
            original.occurred_at,
            json.dumps(original.payload),
        )
        await store.insert_deliveries(
            connection, subscription_id, [item], redelivery_of=delivery_id
        )
        await actor.record(
            connection,
            "webhook.redeliver",
            RESOURCE,
            str(subscription_id),
            {"delivery_id": delivery_id, "message_id": original.message_id},
        )
        newest = await store.list_deliveries(
            connection, subscription_id, state=None, before=None, limit=1
        )
    return newest[0]


async def replay(
    runtime: Runtime, actor: Actor, subscription_id: uuid.UUID, since: datetime
) -> Replay:
    """Queue every kept audit event from ``since`` on that the subscription selects, in order.

    At most :data:`MAX_REPLAY` events are queued; ``next_since`` says where to go on.
    """
    async with runtime.db.acquire() as connection, connection.transaction():
        subscription = await store.get_subscription(connection, subscription_id, for_update=True)
        if subscription is None:
            raise _not_found(subscription_id)
        wanted = set(subscription.event_types)
        queued = 0
        after = None
        next_since = None
        while queued < MAX_REPLAY:
            events = await events_since(connection, since, after=after, limit=_REPLAY_BATCH)
            if not events:
                break
            items: list[tuple[str, str, int | None, datetime, str]] = []
            for event_id, event in events:
                after = (event.occurred_at, event_id)
                if queued + len(items) >= MAX_REPLAY:
                    next_since = event.occurred_at
                    break
                if wanted.isdisjoint(subscription_keys(event.action, event.outcome)):
                    continue
                payload = json.dumps(webhook_payload(event_id, event), default=str)
                kind = event_type(event.action, event.outcome)
                items.append((f"msg_{event_id}", kind, event_id, event.occurred_at, payload))
            queued += await store.insert_deliveries(connection, subscription_id, items)
            if next_since is not None:
                break
        if next_since is None and queued >= MAX_REPLAY and after is not None:
            next_since = after[0]  # the events of that instant may be queued twice
        await actor.record(
            connection,
            "webhook.replay",
            RESOURCE,
            str(subscription_id),
            {"since": since.isoformat(), "queued": queued},
        )
    return Replay(queued, next_since)
