"""A write whose commit outcome is unknown says so, and its retry with the same key applies once.

Issue 34 (Build 2): "a write whose commit outcome is unknown is reported as such (Retry-After),
and an idempotency key honoured on retry so a retried change is not applied twice". The attack:
the api's connection to PostgreSQL is lost while the ``COMMIT`` of a ``POST /groups`` is in
flight (a proxy forwards the ``COMMIT``, lets the server commit, and drops the answer). The
client is told the outcome is unknown (503 ``commit_outcome_unknown``, ``Retry-After``), sends
the same request with the same ``Idempotency-Key``, and gets the stored answer: the group
exists once. The same key with another body is refused 422; a key is the caller's own.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from tests.support.pg_proxy import CommitCutter, commit_cutter

from deskpool.idempotency import store
from deskpool.idempotency.model import KEY_LIFETIME
from deskpool.testing.pytest_plugin import served

ADMIN = "idempotency-admin"
OTHER = "idempotency-other"


@pytest.fixture
async def api(
    secure_environ: dict[str, str], identity_provider: Any, aiohttp_client: Any
) -> AsyncIterator[tuple[Any, CommitCutter, Any]]:
    """``(client, cutter, token_for)``: an api whose database connections go through a cutter."""
    async with commit_cutter(secure_environ["DATABASE_URL"]) as (cutter, url):
        environ = secure_environ | {
            "DATABASE_URL": url,
            "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": f"{ADMIN},{OTHER}",
        }
        async with served(environ, aiohttp_client) as (_, client):

            def headers(subject: str = ADMIN, **more: str) -> dict[str, str]:
                token = identity_provider.issue_token(subject, expires_in=3600)
                return {"Authorization": f"Bearer {token}", **more}

            assert (await client.get("/api/v1/me", headers=headers())).status == 200
            assert (await client.get("/api/v1/me", headers=headers(OTHER))).status == 200
            yield client, cutter, headers


async def groups_named(database_url: str, key: str) -> int:
    connection = await asyncpg.connect(database_url)
    try:
        return int(await connection.fetchval("SELECT count(*) FROM groups WHERE key = $1", key))
    finally:
        await connection.close()


async def test_a_commit_lost_in_flight_is_reported_unknown_and_its_retry_applies_once(
    api: tuple[Any, CommitCutter, Any], secure_environ: dict[str, str]
) -> None:
    client, cutter, headers = api
    key = f"lost-{secrets.token_hex(4)}"
    body = {"key": key, "name": "Lost commit"}
    idempotency = {"Idempotency-Key": secrets.token_hex(16)}

    cutter.arm("INSERT INTO groups")
    first = await client.post("/api/v1/groups", json=body, headers=headers(**idempotency))
    problem = await first.json()
    assert cutter.cuts == 1
    assert first.status == 503, problem
    assert problem["code"] == "commit_outcome_unknown", problem
    assert problem["type"].endswith("/commit_outcome_unknown"), problem
    assert first.headers["Retry-After"].isdigit()
    assert await groups_named(secure_environ["DATABASE_URL"], key) == 1  # it did commit

    retried = await client.post("/api/v1/groups", json=body, headers=headers(**idempotency))
    assert retried.status == 201, await retried.text()
    created = await retried.json()
    assert created["key"] == key
    assert retried.headers.get("Idempotent-Replayed") == "true"
    again = await client.post("/api/v1/groups", json=body, headers=headers(**idempotency))
    assert again.status == 201
    assert await again.json() == created
    assert await groups_named(secure_environ["DATABASE_URL"], key) == 1


async def test_a_key_is_bound_to_its_request_and_its_caller(
    api: tuple[Any, CommitCutter, Any], secure_environ: dict[str, str]
) -> None:
    client, _, headers = api
    key = f"bound-{secrets.token_hex(4)}"
    idempotency = {"Idempotency-Key": secrets.token_hex(16)}
    first = await client.post(
        "/api/v1/groups", json={"key": key, "name": "One"}, headers=headers(**idempotency)
    )
    assert first.status == 201, await first.text()
    assert "Idempotent-Replayed" not in first.headers

    other_body = await client.post(
        "/api/v1/groups", json={"key": key, "name": "Two"}, headers=headers(**idempotency)
    )
    problem = await other_body.json()
    assert other_body.status == 422, problem
    assert other_body.headers["Content-Type"].startswith("application/problem+json")
    assert problem["code"] == "idempotency_key_reused", problem

    # Another caller's key of the same value is his own: his request runs (and meets the group).
    theirs = await client.post(
        "/api/v1/groups", json={"key": key, "name": "One"}, headers=headers(OTHER, **idempotency)
    )
    assert theirs.status == 409, await theirs.text()
    assert await groups_named(secure_environ["DATABASE_URL"], key) == 1


async def test_an_unusable_key_is_refused(api: tuple[Any, CommitCutter, Any]) -> None:
    client, _, headers = api
    for bad in ("", "x" * 256, "a b\u00e9"):
        response = await client.post(
            "/api/v1/groups",
            json={"key": f"k-{secrets.token_hex(4)}", "name": "K"},
            headers=headers(**{"Idempotency-Key": bad}),
        )
        assert response.status == 400, (bad, await response.text())


async def test_keys_expire_and_are_purged(secure_environ: dict[str, str]) -> None:
    """An expired key is free again; the purge deletes expired keys and keeps the others."""
    connection = await asyncpg.connect(secure_environ["DATABASE_URL"])
    try:
        principal = f"purge-{secrets.token_hex(4)}"
        past = datetime.now(UTC) - timedelta(seconds=1)
        later = datetime.now(UTC) + KEY_LIFETIME
        assert await store.claim(connection, principal, "old", "one", past) is None
        assert await store.claim(connection, principal, "gone", "one", past) is None
        assert await store.claim(connection, principal, "kept", "one", later) is None
        assert await store.claim(connection, principal, "kept", "two", later) is not None
        assert await store.claim(connection, principal, "old", "two", later) is None  # expired
        assert await store.purge_expired(connection) >= 1
        left = await connection.fetch(
            "SELECT key, fingerprint FROM idempotency_keys WHERE principal_id = $1 ORDER BY key",
            principal,
        )
        assert [(row["key"], row["fingerprint"]) for row in left] == [
            ("kept", "one"),
            ("old", "two"),
        ]
    finally:
        await connection.close()
