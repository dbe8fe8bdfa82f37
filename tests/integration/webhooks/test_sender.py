"""The webhook sender against a real receiver that verifies signatures (standardwebhooks).

In order per subscription, at least once, retried with backoff while later deliveries wait,
every attempt kept; a subscription failing for too long is disabled and says why; a failed
delivery is redelivered and events are replayed from a point in time; an event committed late
by a transaction that started earlier is never overtaken.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.pools import Caller
from tests.support.webhooks import WebhookReceiver

from deskpool.actor import Actor
from deskpool.runtime import Runtime
from deskpool.webhooks.model import RetryPolicy
from deskpool.webhooks.sender import SenderSettings, WebhookSender

WEBHOOKS = "/api/v1/webhooks"
NewCaller = Callable[..., Awaitable[Caller]]
ACTOR = Actor.system("system:test")


def sender(runtime: Runtime, disable_after: timedelta = timedelta(hours=1)) -> WebhookSender:
    policy = RetryPolicy(timedelta(milliseconds=200), timedelta(milliseconds=400), disable_after)
    return WebhookSender(runtime, SenderSettings(holder="test", policy=policy, timeout=5.0))


async def subscribe(
    client: Any, caller: Caller, receiver: WebhookReceiver, name: str = "hook", **extra: Any
) -> dict[str, Any]:
    body = {"name": name, "url": receiver.url, "event_types": ["audit.test.*"], **extra}
    response = await client.post(WEBHOOKS, json=body, headers=caller.headers)
    assert response.status == 201, await response.text()
    created: dict[str, Any] = await response.json()
    receiver.secret = created["secret"]
    return created


async def record(runtime: Runtime, *names: str) -> None:
    async with runtime.db.acquire() as connection, connection.transaction():
        for name in names:
            await ACTOR.record(connection, f"test.{name}", "tests", name)


async def drain(hooks: WebhookSender, receiver: WebhookReceiver, count: int) -> None:
    """Send passes until the receiver holds ``count`` deliveries (10 s at most)."""
    async with asyncio.timeout(10):
        while len(receiver.delivered) < count:
            if not await hooks.send_due():
                await asyncio.sleep(0.05)


def actions(receiver: WebhookReceiver) -> list[str]:
    return [item.payload["data"]["action"] for item in receiver.delivered]


async def get(client: Any, path: str, caller: Caller) -> Any:
    response = await client.get(path, headers=caller.headers)
    assert response.status == 200, await response.text()
    return await response.json()


async def test_deliveries_arrive_signed_and_in_order(
    client: Any, new_caller: NewCaller, pools_runtime: Runtime, receiver: WebhookReceiver
) -> None:
    admin = await new_caller("webhooks:manage")
    created = await subscribe(client, admin, receiver)
    await record(pools_runtime, "a", "b", "c")
    await record(pools_runtime, "d")
    hooks = sender(pools_runtime)
    try:
        await drain(hooks, receiver, 4)
    finally:
        await hooks.close()
    assert actions(receiver) == ["test.a", "test.b", "test.c", "test.d"]
    assert receiver.refused == 0
    ids = [item.payload["data"]["id"] for item in receiver.delivered]
    assert ids == sorted(ids)
    assert [item.message_id for item in receiver.delivered] == [f"msg_{i}" for i in ids]
    page = await get(client, f"{WEBHOOKS}/{created['id']}/deliveries", admin)
    assert [item["state"] for item in page["items"]] == ["delivered"] * 4


async def test_a_failing_receiver_holds_later_deliveries_until_it_answers(
    client: Any, new_caller: NewCaller, pools_runtime: Runtime, receiver: WebhookReceiver
) -> None:
    admin = await new_caller("webhooks:manage")
    created = await subscribe(client, admin, receiver)
    receiver.status = 500
    await record(pools_runtime, "one", "two", "three")
    hooks = sender(pools_runtime)
    try:
        async with asyncio.timeout(10):
            while len(receiver.received) < 3:
                await hooks.send_due()
                await asyncio.sleep(0.05)
        # Every try was at the first delivery: the later ones waited behind it.
        assert {item.payload["data"]["action"] for item in receiver.received} == {"test.one"}
        shown = await get(client, f"{WEBHOOKS}/{created['id']}", admin)
        assert shown["failing_since"] is not None
        assert shown["enabled"] is True
        receiver.status = 200
        await drain(hooks, receiver, 3)
    finally:
        await hooks.close()
    assert actions(receiver) == ["test.one", "test.two", "test.three"]
    page = await get(client, f"{WEBHOOKS}/{created['id']}/deliveries", admin)
    first = page["items"][-1]
    detail = await get(client, f"{WEBHOOKS}/{created['id']}/deliveries/{first['id']}", admin)
    statuses = [attempt["status_code"] for attempt in detail["attempt_log"]]
    assert statuses[-1] == 200
    assert set(statuses[:-1]) == {500}
    assert len(statuses) >= 4
    assert detail["attempts"] == len(statuses)
    assert detail["payload"]["data"]["action"] == "test.one"
    shown = await get(client, f"{WEBHOOKS}/{created['id']}", admin)
    assert shown["failing_since"] is None


async def test_a_subscription_that_keeps_failing_is_disabled_redelivered_and_replayed(
    client: Any, new_caller: NewCaller, pools_runtime: Runtime, receiver: WebhookReceiver
) -> None:
    admin = await new_caller("webhooks:manage")
    created = await subscribe(client, admin, receiver)
    one = f"{WEBHOOKS}/{created['id']}"
    since = datetime.now(UTC)
    receiver.status = 503
    await record(pools_runtime, "lost")
    hooks = sender(pools_runtime, disable_after=timedelta(0))
    try:
        async with asyncio.timeout(10):
            while not receiver.received:
                await hooks.send_due()
        shown = await get(client, one, admin)
        assert shown["enabled"] is False
        assert "HTTP 503" in shown["disabled_reason"]
        assert shown["disabled_at"] is not None
        failed = await get(client, f"{one}/deliveries?state=failed", admin)
        assert [item["event_type"] for item in failed["items"]] == ["audit.test.lost"]
        assert failed["items"][0]["last_error"] == "HTTP 503"

        await record(pools_runtime, "while_disabled")  # not queued: the hook is disabled
        receiver.status = 200
        body = {"name": "hook", "url": receiver.url, "event_types": ["audit.test.*"]}
        response = await client.put(one, json=body, headers=admin.headers)
        assert response.status == 200
        assert (await response.json())["disabled_reason"] is None
        response = await client.post(
            f"{one}/deliveries/{failed['items'][0]['id']}/redeliver", headers=admin.headers
        )
        assert response.status == 202, await response.text()
        again = await response.json()
        assert again["redelivery_of"] == failed["items"][0]["id"]
        assert again["message_id"] == failed["items"][0]["message_id"]
        await drain(hooks, receiver, 1)
        assert actions(receiver) == ["test.lost"]

        response = await client.post(
            f"{one}/replay", json={"since": since.isoformat()}, headers=admin.headers
        )
        assert response.status == 202, await response.text()
        assert await response.json() == {"queued": 2, "next_since": None}
        await drain(hooks, receiver, 3)
    finally:
        await hooks.close()
    assert actions(receiver) == ["test.lost", "test.lost", "test.while_disabled"]


async def test_a_late_commit_of_an_earlier_transaction_is_not_overtaken(
    client: Any, new_caller: NewCaller, pools_runtime: Runtime, receiver: WebhookReceiver
) -> None:
    admin = await new_caller("webhooks:manage")
    await subscribe(client, admin, receiver)
    hooks = sender(pools_runtime)
    try:
        async with pools_runtime.db.acquire() as early:
            transaction = early.transaction()
            await transaction.start()
            await ACTOR.record(early, "test.early", "tests", "early")
            await record(pools_runtime, "late")  # committed first
            for _ in range(5):
                await hooks.send_due()
            assert receiver.received == []  # "late" waits: "early" may still commit
            await transaction.commit()
        await drain(hooks, receiver, 2)
    finally:
        await hooks.close()
    assert actions(receiver) == ["test.early", "test.late"]
