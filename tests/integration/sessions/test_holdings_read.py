"""What many users hold is read in one statement, and it is what the rules say they hold.

The access watch judges every user with a stream (a gateway's tunnels, live event streams,
downloads) every two seconds; a revocation judges the users its change concerns. Reading one
user's holding was four statements (their groups, their and their groups' grants, the roles,
their entitlements), so a gateway with 1,000 tunnels sent 4,000 statements every two seconds.
Now every user's holding is one statement, whatever their number, and a lock before it when
the caller locks. The holdings are compared with the reading made one user and one question
at a time (the identity service's own :func:`resolve_effective`).
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Awaitable, Callable

import asyncpg
from tests.support.sessions import Estate
from tests.support.statement_log import statements_of

from deskpool.identity.sign_in import resolve_effective
from deskpool.pools import store_entitlements
from deskpool.revocation.model import Holding, nobody
from deskpool.revocation.service import holdings
from deskpool.runtime import Runtime


async def _one_at_a_time(connection: asyncpg.Connection, user_id: uuid.UUID) -> Holding:
    """The holding read as it was: one question at a time."""
    user = await connection.fetchrow(
        "SELECT disabled, claimed_groups, claimed_roles FROM users WHERE id = $1", user_id
    )
    if user is None:
        return nobody(user_id)
    groups, effective = await resolve_effective(
        connection, str(user_id), user["claimed_groups"], user["claimed_roles"]
    )
    pools = await store_entitlements.entitled_pools(
        connection, user_id, [group.id for group in groups]
    )
    return Holding(user_id, user["disabled"], effective, frozenset(pools))


async def _population(connection: asyncpg.Connection, pools: list[uuid.UUID]) -> list[uuid.UUID]:
    """Users holding in every way there is: directly, as members, by claims, by roles; and not."""
    tag = secrets.token_hex(4)
    role = f"watcher-{tag}"
    await connection.execute(
        "INSERT INTO roles (key, description, permissions) VALUES ($1, 'custom', $2)",
        role,
        ["sessions:manage", "sessions:read"],
    )
    members = await connection.fetchval(
        "INSERT INTO groups (key, name) VALUES ($1, $1) RETURNING id", f"members-{tag}"
    )
    claimed = await connection.fetchval(
        "INSERT INTO groups (key, name) VALUES ($1, $1) RETURNING id", f"claimed-{tag}"
    )
    claim = f"claim-{tag}"
    await connection.execute(
        "INSERT INTO oidc_group_bindings (claim_value, group_id) VALUES ($1, $2)", claim, claimed
    )
    await connection.execute(
        "INSERT INTO pool_entitlements (pool_id, subject_type, subject_id) VALUES "
        "($1, 'group', $2), ($3, 'group', $4)",
        pools[0],
        members,
        pools[1],
        claimed,
    )
    await connection.execute(
        "INSERT INTO grants (subject_type, subject_id, role_key) VALUES ('group', $1, $2)",
        claimed,
        role,
    )
    users = []
    for number in range(40):
        kind = number % 5
        user_id = await connection.fetchval(
            "INSERT INTO users (issuer, subject, disabled, claimed_groups, claimed_roles) "
            "VALUES ('https://issuer.holdings.test', $1, $2, $3, $4) RETURNING id",
            f"{tag}-{number}",
            kind == 4,
            [claim] if kind in (2, 4) else [],
            ["helpdesk"] if kind == 3 else [],
        )
        if kind in (1, 4):
            await connection.execute(
                "INSERT INTO group_members (group_id, user_id) VALUES ($1, $2)", members, user_id
            )
        if kind in (0, 3):
            await connection.execute(
                "INSERT INTO pool_entitlements (pool_id, subject_type, subject_id) "
                "VALUES ($1, 'user', $2)",
                pools[number % 2],
                user_id,
            )
        if kind == 3:
            await connection.execute(
                "INSERT INTO grants (subject_type, subject_id, role_key) VALUES ('user', $1, $2)",
                user_id,
                role,
            )
        users.append(user_id)
    return users


async def test_the_holdings_of_many_users_are_one_statement_and_what_the_rules_say(
    estate: Callable[..., Awaitable[Estate]], pools_runtime: Runtime
) -> None:
    pools = [(await estate(ready=0)).pool.id for _ in range(2)]
    async with pools_runtime.db.acquire() as connection:
        users = await _population(connection, pools)
        gone = uuid.uuid4()
        asked = [*users, gone]
        expected = {user_id: await _one_at_a_time(connection, user_id) for user_id in asked}

        read, sent = await statements_of(
            connection, lambda: holdings(connection, asked, exclusive=None)
        )
        assert len(sent) == 1, sent
        assert read == expected
        # Every way of holding is in the population, and some hold nothing.
        assert {holding.keeps_desktop(pools[0]) for holding in read.values()} == {True, False}
        assert {holding.keeps_desktop(pools[1]) for holding in read.values()} == {True, False}
        assert {holding.keeps_watching() for holding in read.values()} == {True, False}
        assert read[gone] == nobody(gone)

        async with connection.transaction():
            locked, sent = await statements_of(
                connection, lambda: holdings(connection, asked, exclusive=True)
            )
        assert len(sent) == 2, sent
        assert locked == expected
