"""Migration 0026 keys users by kind and keeps the users stored before working.

A database is migrated up to the migration before 0026 and given the users of an instance that
had no kinds: a person with an email, a client's user (no email, no name) holding a grant, and a
person whose tokens carry no email or name. After 0026, the person with an email is ``human``;
the other two are ``unsettled``, and the first sign-in of their subject settles each to the kind
that signed in, with its id, grants and an audit event; a sign-in of the other kind after that
gets a user of its own, holding nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import pytest
from tests.integration.identity.test_sign_in_statement import ISSUER, token

from deskpool.db import known_migrations, migrate
from deskpool.identity.sign_in import sign_in
from deskpool.testing.pytest_plugin import connected
from deskpool.testing.services import (
    ServiceAddresses,
    create_test_database,
    drop_test_database,
)

KINDS = 26


@pytest.fixture
async def before_kinds(test_servers: ServiceAddresses) -> AsyncIterator[asyncpg.Connection]:
    """A database migrated up to (not including) migration 0026."""
    url = await create_test_database(test_servers.admin_url, "deskpool_kinds")
    try:
        async with connected(url) as connection:
            await connection.execute(
                "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
                " checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            for migration in known_migrations():
                if migration.version >= KINDS:
                    continue
                async with connection.transaction():
                    await connection.execute(migration.sql)
                    await connection.execute(
                        "INSERT INTO schema_migrations (version, name, checksum) "
                        "VALUES ($1, $2, $3)",
                        migration.version,
                        migration.name,
                        migration.checksum,
                    )
            yield connection
    finally:
        await drop_test_database(test_servers.admin_url, url)


async def test_users_stored_before_kinds_keep_working(
    before_kinds: asyncpg.Connection, make_config: Callable[..., Any]
) -> None:
    db = before_kinds
    config = make_config().config

    async def legacy(subject: str, email: str | None) -> uuid.UUID:
        user_id: uuid.UUID = await db.fetchval(
            "INSERT INTO users (issuer, subject, email) VALUES ($1, $2, $3) RETURNING id",
            ISSUER,
            subject,
            email,
        )
        return user_id

    alice = await legacy("alice", "alice@example.test")
    robot = await legacy("robot", None)
    carol = await legacy("carol", None)
    await db.execute(
        "INSERT INTO grants (subject_type, subject_id, permission) VALUES ('user', $1, $2)",
        robot,
        "pools:manage",
    )

    applied = await migrate(db)
    assert any(label.startswith("0026_") for label in applied), applied
    kinds = dict(await db.fetch("SELECT subject, kind FROM users ORDER BY subject"))
    assert kinds == {"alice": "human", "carol": "unsettled", "robot": "unsettled"}

    # The client signs in first: its user is the one stored before, with its grant.
    client = await sign_in(db, config, token("robot", client_id="robot"))
    assert (client.id, client.kind) == (str(robot), "service")
    assert client.may("pools:manage")
    event = await db.fetchrow(
        "SELECT actor, details FROM audit_events WHERE action = 'user.update' AND resource_id = $1",
        str(robot),
    )
    assert event is not None
    assert event["actor"] == str(robot)
    # A person with the client's subject is another user, holding nothing.
    person = await sign_in(db, config, token("robot", client_id="deskpool-console"))
    assert person.id != client.id
    assert person.kind == "human"
    assert not person.may("pools:manage")
    assert (await sign_in(db, config, token("robot", client_id="robot"))).id == client.id

    # People keep their users: by email at once, without one at their first sign-in.
    assert (await sign_in(db, config, token("alice", email="alice@example.test"))).id == str(alice)
    assert (await sign_in(db, config, token("carol"))).id == str(carol)
    kinds = dict(
        await db.fetch("SELECT id::text || ':' || subject, kind FROM users ORDER BY subject")
    )
    assert sorted(kinds.values()) == ["human", "human", "human", "service"]
    assert await db.fetchval("SELECT count(*) FROM users WHERE kind = 'unsettled'") == 0
