"""The worker's webhook sender: each subscription's deliveries, in order, signed, retried.

Every pass leases the subscriptions whose first pending delivery is due (one sender at a time
per subscription, :func:`deskpool.webhooks.store.claim_subscriptions`), then sends each one's
deliveries in order: a JSON body signed after the Standard Webhooks specification with the
subscription's secret (the ``standardwebhooks`` library's ``Webhook.sign``; headers
``webhook-id``, ``webhook-timestamp``, ``webhook-signature``). A 2xx answer delivers it; anything
else (another status, a redirect, which is never followed, a refused connection, a timeout)
is kept as an attempt and the delivery is retried after a growing wait
(:class:`~deskpool.webhooks.model.RetryPolicy`), holding back the subscription's later
deliveries so they arrive in order. A subscription failing for longer than the policy allows is
disabled, saying why; its pending deliveries wait for it to be enabled again.

At least once: a delivery is marked delivered after its answer, so a sender killed in between
sends it again. One subscription's failure stops no other's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import aiohttp
from standardwebhooks import Webhook

from deskpool import __version__
from deskpool.errors import error_text
from deskpool.webhooks import store
from deskpool.webhooks.model import MAX_ERROR_LENGTH, RetryPolicy, Subscription, answer_error
from deskpool.webhooks.model import disabled_reason as reason_of
from deskpool.webhooks.store import Delivery

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SenderSettings:
    """How the sender works.

    :param holder: the lease holder's name (the worker's id).
    :param policy: retries and giving up.
    :param timeout: the longest an attempt waits for its answer, in seconds.
    :param lease: how long a subscription stays leased without renewal (a killed sender's
        subscriptions are taken over after it).
    :param concurrency: how many subscriptions one pass sends to at once.
    :param poll_interval: the wait, in seconds, after a pass that found nothing due.
    """

    holder: str
    policy: RetryPolicy
    timeout: float = 10.0
    lease: timedelta = timedelta(seconds=30)
    concurrency: int = 4
    poll_interval: float = 1.0


def _error_of(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "no answer in time"
    if isinstance(error, aiohttp.ClientConnectorError):
        return f"cannot connect: {error.os_error.strerror or type(error.os_error).__name__}"
    return error_text(error)


class WebhookSender:
    """Sends the outbox's deliveries until cancelled (:meth:`run`), one pass at a time."""

    def __init__(self, runtime: Runtime, settings: SenderSettings) -> None:
        self.runtime = runtime
        self.settings = settings
        self._http: aiohttp.ClientSession | None = None

    async def run(self) -> None:
        """Pass after pass until cancelled; a pass that fails is logged and tried again."""
        try:
            while True:
                try:
                    sent = await self.send_due()
                except asyncio.CancelledError:
                    raise
                except Exception as error:  # the database went away: next pass
                    log.warning("webhook pass failed: %s", error_text(error))
                    sent = 0
                if not sent:
                    await asyncio.sleep(self.settings.poll_interval)
        finally:
            await self.close()

    async def close(self) -> None:
        """Close the HTTP client."""
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.settings.timeout),
                headers={"User-Agent": f"deskpool-webhooks/{__version__}"},
            )
        return self._http

    async def send_due(self) -> int:
        """One pass: every due subscription's deliveries. :returns: how many were attempted."""
        claimed = await store.claim_subscriptions(
            self.runtime.db, self.settings.holder, self.settings.lease, self.settings.concurrency
        )
        counts = await asyncio.gather(
            *(self._send_subscription(subscription) for subscription in claimed),
            return_exceptions=True,
        )
        attempted = 0
        for subscription, count in zip(claimed, counts, strict=True):
            if isinstance(count, BaseException):
                if isinstance(count, asyncio.CancelledError):
                    raise count
                log.warning("webhook %s: sending failed: %s", subscription.name, error_text(count))
                continue
            attempted += count
        return attempted

    async def _send_subscription(self, subscription: Subscription) -> int:
        db = self.runtime.db
        attempted = 0
        try:
            secret = await store.SIGNING_SECRET.get(db, self.runtime.secret_store, subscription.id)
            if secret is None:
                log.warning("webhook %s has no signing secret; nothing sent", subscription.name)
                return 0
            signer = Webhook(secret.reveal())
            turn_ends = time.monotonic() + self.settings.lease.total_seconds() / 2
            while time.monotonic() < turn_ends:
                delivery = await store.next_delivery(
                    db, subscription.id, self.settings.holder, self.settings.lease
                )
                if delivery is None:
                    break
                attempted += 1
                if not await self._attempt(subscription, signer, delivery):
                    break
        finally:
            await store.release_subscription(db, subscription.id, self.settings.holder)
        return attempted

    async def _attempt(
        self, subscription: Subscription, signer: Webhook, delivery: Delivery
    ) -> bool:
        """Send ``delivery`` once and record how it went. :returns: whether it was delivered."""
        body = json.dumps(delivery.payload, separators=(",", ":"), default=str)
        now = datetime.now(UTC)
        headers = {
            "Content-Type": "application/json",
            "webhook-id": delivery.message_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": signer.sign(delivery.message_id, now, body),
        }
        started = time.monotonic()
        status: int | None = None
        try:
            async with self._client().post(
                subscription.url, data=body.encode(), headers=headers, allow_redirects=False
            ) as response:
                status = response.status
            error = answer_error(status)
        except asyncio.CancelledError:
            raise
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as failure:
            error = _error_of(failure)
        duration_ms = int((time.monotonic() - started) * 1000)
        if error is not None:
            error = error[:MAX_ERROR_LENGTH]
        async with self.runtime.db.acquire() as connection, connection.transaction():
            attempted_at = await store.record_attempt(
                connection,
                delivery.id,
                status_code=status,
                error=error,
                duration_ms=duration_ms,
            )
            if error is None:
                await store.mark_delivered(connection, delivery.id, subscription.id)
                return True
            policy = self.settings.policy
            failing_since = await store.schedule_retry(
                connection, delivery.id, subscription.id, policy.wait_after(delivery.attempts + 1)
            )
            if policy.gives_up(failing_since, attempted_at):
                reason = reason_of(failing_since, error)
                await store.give_up(connection, delivery.id, subscription.id, reason)
                log.warning("webhook %s disabled: %s", subscription.name, reason)
        log.info(
            "webhook %s: delivery %d failed (%s); retried later",
            subscription.name,
            delivery.id,
            error,
        )
        return False
