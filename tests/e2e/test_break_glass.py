"""``deskpool admin grant``: break glass with database access alone, through the real command.

The instance is locked out (its only admin's account is disabled, as a change outside the API
or an identity provider's mistake would leave it); the command, run with nothing but
``DATABASE_URL``, brings an admin back, and the audit trail says who did it and how.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import asyncpg
import pytest

from deskpool.testing.pytest_plugin import fresh_database, opened_runtime, served
from deskpool.testing.services import ServiceAddresses

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def own_database(test_servers: ServiceAddresses) -> Iterator[str]:
    with fresh_database(test_servers, "deskpool_breakglass") as url:
        yield url


async def is_admin(environ: dict[str, str], aiohttp_client: Any, headers: dict[str, str]) -> bool:
    """Whether a freshly started API (no cached principals) says the caller is an admin."""
    async with served(environ, aiohttp_client) as (_, client):
        response = await client.get("/api/v1/me", headers=headers)
        status = response.status
        body = await response.json()
    assert status == 200, body
    return bool(body["is_platform_admin"])


async def test_break_glass_brings_an_admin_back(
    own_database: str,
    secure_environ: dict[str, str],
    run_deskpool: Run,
    aiohttp_client: Any,
    identity_provider: Any,
    bearer: Any,
) -> None:
    environ = {**secure_environ, "DATABASE_URL": own_database}
    only_the_database = {
        "DATABASE_URL": own_database,
        "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", ""),
    }

    async def grant(*args: str, env: dict[str, str] = only_the_database) -> Any:
        return await asyncio.to_thread(run_deskpool, "admin", "grant", *args, env=env)

    # The admin and a colleague sign in; then the admin's account ends up disabled.
    root = bearer("root", email="root@example.com", email_verified=True)
    alice = bearer("alice", email="alice@example.com", email_verified=True)
    bootstrapping = {**environ, "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": "root"}
    async with served(bootstrapping, aiohttp_client) as (runtime, client):
        for headers in (root, alice):
            assert (await client.get("/api/v1/me", headers=headers)).status == 200
        await client.close()
        await runtime.db.execute("UPDATE users SET disabled = true WHERE subject = 'root'")

    # By email: the admin is enabled again (it still held the role).
    done = await grant("--email", "ROOT@example.com")
    assert done.returncode == 0, done.stderr
    assert "already held platform_admin" in done.stdout
    assert "enabled the user" in done.stdout
    assert await is_admin(environ, aiohttp_client, root)

    # By email, a user who was not an admin becomes one.
    done = await grant("--email", "alice@example.com")
    assert done.returncode == 0, done.stderr
    assert "granted platform_admin" in done.stdout
    assert await is_admin(environ, aiohttp_client, alice)

    # By subject, a user who never signed in is created, and is an admin at its first sign-in.
    issuer = identity_provider.issuer_url
    done = await grant("--subject", "bob", "--issuer", issuer)
    assert done.returncode == 0, done.stderr
    assert "created user" in done.stdout
    assert await is_admin(environ, aiohttp_client, bearer("bob"))
    # The issuer may come from AUTH_OIDC_ISSUER_URL; a second run changes nothing.
    done = await grant(
        "--subject", "bob", env={**only_the_database, "AUTH_OIDC_ISSUER_URL": issuer}
    )
    assert done.returncode == 0, done.stderr
    assert "already held platform_admin" in done.stdout

    # Everything it did is in the audit trail, by break-glass:cli.
    async with opened_runtime(environ) as runtime:
        rows = await runtime.db.fetch(
            "SELECT action, details FROM audit_events WHERE actor = 'break-glass:cli' ORDER BY id"
        )
        sources = await runtime.db.fetch(
            "SELECT u.subject, g.source FROM grants g JOIN users u ON u.id = g.subject_id "
            "ORDER BY u.subject"
        )
    assert [row["action"] for row in rows] == [
        "user.enable",
        "grant.create",
        "user.create",
        "grant.create",
    ]
    assert all(row["details"] for row in rows)
    assert [tuple(row) for row in sources] == [
        ("alice", "break_glass"),
        ("bob", "break_glass"),
        ("root", "bootstrap"),
    ]


async def test_break_glass_refuses_what_it_cannot_decide(
    own_database: str, run_deskpool: Run
) -> None:
    env = {"DATABASE_URL": own_database, "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", "")}
    connection = await asyncpg.connect(own_database)
    try:
        for subject in ("one", "two"):
            await connection.execute(
                "INSERT INTO users (issuer, subject, email) VALUES ('https://idp', $1, $2)",
                subject,
                "shared@example.com",
            )
    finally:
        await connection.close()

    def grant(*args: str) -> subprocess.CompletedProcess[str]:
        return run_deskpool("admin", "grant", *args, env=env)

    nobody = await asyncio.to_thread(grant, "--email", f"{uuid.uuid4().hex}@example.com")
    assert nobody.returncode == 1
    assert "No user has signed in with the email" in nobody.stderr
    shared = await asyncio.to_thread(grant, "--email", "shared@example.com")
    assert shared.returncode == 1
    assert "Several users" in shared.stderr
    assert "'one'" in shared.stderr
    assert "'two'" in shared.stderr
    no_issuer = await asyncio.to_thread(grant, "--subject", "carol")
    assert no_issuer.returncode == 1
    assert "issuer" in no_issuer.stderr
    neither = await asyncio.to_thread(grant)
    assert neither.returncode == 2
    assert "Traceback" not in nobody.stderr + shared.stderr + no_issuer.stderr
