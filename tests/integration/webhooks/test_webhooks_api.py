"""The webhooks API over HTTP, and the outbox written with the events.

CRUD under ``webhooks:read`` / ``webhooks:manage``, the secret shown once and sealed at rest,
URLs other than http(s) refused, every change audited; an event's deliveries exist exactly when
its transaction committed, one per enabled subscription that selects it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.support.pools import Caller

from deskpool.actor import Actor
from deskpool.audit import event_of_row
from deskpool.events import webhook_payload
from deskpool.runtime import Runtime

WEBHOOKS = "/api/v1/webhooks"
NewCaller = Callable[..., Awaitable[Caller]]


def hook(name: str = "siem", url: str = "https://siem.example.com/in", **extra: Any) -> Any:
    return {"name": name, "url": url, "event_types": ["*"], **extra}


async def send(client: Any, method: str, path: str, caller: Caller, status: int, **kw: Any) -> Any:
    response = await client.request(method, path, headers=caller.headers, **kw)
    assert response.status == status, await response.text()
    return await response.json() if response.status != 204 else None


async def test_webhooks_are_managed_with_their_permissions_and_audited(
    client: Any, new_caller: NewCaller, pools_runtime: Runtime
) -> None:
    manager, reader = await new_caller("webhooks:manage"), await new_caller("webhooks:read")
    other = await new_caller("pools:manage")
    await send(client, "POST", WEBHOOKS, reader, 403, json=hook())
    await send(client, "GET", WEBHOOKS, other, 403)
    created = await send(client, "POST", WEBHOOKS, manager, 201, json=hook())
    secret = created["secret"]
    assert secret.startswith("whsec_")
    assert created["enabled"] is True
    one = f"{WEBHOOKS}/{created['id']}"
    shown = await send(client, "GET", one, reader, 200)
    assert "secret" not in shown
    assert shown["url"] == "https://siem.example.com/in"
    listed = await send(client, "GET", WEBHOOKS, reader, 200)
    assert [item["id"] for item in listed["items"]] == [created["id"]]
    await send(client, "POST", WEBHOOKS, manager, 409, json=hook())

    async with pools_runtime.db.acquire() as connection:
        sealed = await connection.fetchrow(
            "SELECT sealed FROM sealed_secrets WHERE kind = 'webhook.signing' AND owner_id = $1",
            created["id"],
        )
        stored = await connection.fetchval(
            "SELECT row_to_json(s)::text FROM webhook_subscriptions s WHERE id = $1::uuid",
            created["id"],
        )
        trail = await connection.fetchval("SELECT string_agg(details::text, ' ') FROM audit_events")
    assert sealed is not None
    assert secret.encode() not in bytes(sealed["sealed"])
    assert secret not in stored
    assert secret not in trail

    renewed = await send(client, "POST", f"{one}/secret", manager, 200)
    assert renewed["secret"] != secret
    assert renewed["secret"].startswith("whsec_")
    changed = await send(
        client, "PUT", one, manager, 200, json=hook(event_types=["session.*"], enabled=False)
    )
    assert (changed["event_types"], changed["enabled"]) == (["session.*"], False)
    await send(client, "DELETE", one, manager, 204)
    await send(client, "GET", one, reader, 404)
    await send(client, "GET", f"{WEBHOOKS}/not-an-id", reader, 404)
    async with pools_runtime.db.acquire() as connection:
        rows = await connection.fetch(
            "SELECT action FROM audit_events WHERE resource_id = $1 ORDER BY id", created["id"]
        )
        left = await connection.fetchval(
            "SELECT count(*) FROM sealed_secrets WHERE owner_id = $1", created["id"]
        )
    assert [row["action"] for row in rows] == [
        "webhook.create",
        "webhook.secret_renew",
        "webhook.update",
        "webhook.delete",
    ]
    assert left == 0


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        (hook(url="file:///etc/passwd"), "/url"),
        (hook(url="gopher://127.0.0.1:6379/_FLUSHALL"), "/url"),
        (hook(url="https://admin:pw@example.com/"), "/url"),
        (hook(event_types=["session.exploded"]), "/event_types/0"),
    ],
)
async def test_bad_urls_and_types_are_refused(
    client: Any, new_caller: NewCaller, body: Any, pointer: str
) -> None:
    manager = await new_caller("webhooks:manage")
    problem = await send(client, "POST", WEBHOOKS, manager, 422, json=body)
    assert [error["pointer"] for error in problem["errors"]] == [pointer]


async def test_an_events_deliveries_are_written_in_its_transaction(
    client: Any, new_caller: NewCaller, pools_runtime: Runtime
) -> None:
    manager = await new_caller("webhooks:manage")
    everything = await send(client, "POST", WEBHOOKS, manager, 201, json=hook("all"))
    sessions = await send(
        client, "POST", WEBHOOKS, manager, 201, json=hook("s", event_types=["session.*"])
    )
    off = await send(client, "POST", WEBHOOKS, manager, 201, json=hook("off", enabled=False))
    actor = Actor.system("system:test")
    async with pools_runtime.db.acquire() as connection:
        await connection.execute("DELETE FROM webhook_deliveries")
        transaction = connection.transaction()
        await transaction.start()
        await actor.record(connection, "session.start", "sessions", "s-rolled-back")
        await transaction.rollback()  # the change failed
        assert await connection.fetchval("SELECT count(*) FROM webhook_deliveries") == 0
        async with connection.transaction():
            await actor.record(connection, "session.start", "sessions", "s1")
            await actor.record(connection, "pool.create", "pools", "p1")
        rows = await connection.fetch(
            """SELECT subscription_id::text AS s, event_type, payload, message_id, audit_event_id
                 FROM webhook_deliveries ORDER BY id"""
        )
    by_subscription: dict[str, list[str]] = {}
    for row in rows:
        by_subscription.setdefault(row["s"], []).append(row["event_type"])
    assert by_subscription == {
        everything["id"]: ["session.started", "audit.pool.create"],
        sessions["id"]: ["session.started"],
    }
    assert off["id"] not in by_subscription
    first = rows[0]
    payload = json.loads(first["payload"])
    assert payload["data"]["id"] == first["audit_event_id"]
    assert first["message_id"] == f"msg_{first['audit_event_id']}"
    assert payload["data"]["action"] == "session.start"
    assert datetime.fromisoformat(payload["timestamp"]) <= datetime.now(UTC)


async def test_a_first_sign_in_and_every_payload_match_what_a_replay_sends(
    client: Any,
    new_caller: NewCaller,
    bearer: Callable[[str], dict[str, str]],
    pools_runtime: Runtime,
) -> None:
    """A first sign-in's user.create is in the outbox; a body is what a replay would send.

    The sign-in statement inserts its audit event itself (the end-to-end day found the event
    missing from the outbox); every body written with an event equals the one a replay builds.
    """
    manager = await new_caller("webhooks:manage")
    hook_id = (await send(client, "POST", WEBHOOKS, manager, 201, json=hook("users")))["id"]
    response = await client.get("/api/v1/me", headers=bearer("a-brand-new-subject"))
    assert response.status == 200, await response.text()
    me = await response.json()
    async with pools_runtime.db.acquire() as connection:
        rows = await connection.fetch(
            """SELECT d.event_type, d.payload, a.* FROM webhook_deliveries d
                 JOIN audit_events a ON a.id = d.audit_event_id
                WHERE d.subscription_id = $1::uuid ORDER BY d.id""",
            hook_id,
        )
    created = [row for row in rows if row["action"] == "user.create"]
    assert [row["resource_id"] for row in created] == [me["id"]]
    assert created[0]["event_type"] == "audit.user.create"
    for row in rows:
        assert json.loads(row["payload"]) == json.loads(
            json.dumps(webhook_payload(row["id"], event_of_row(row)), default=str)
        )
